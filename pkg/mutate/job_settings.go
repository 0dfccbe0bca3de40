package mutate

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/pkg/jobconfig"
)

// Every pod of a job is admitted with the same TrainJob version, whose
// settings (jobconfig.Parse of its annotations: ids, globs, quantities) are
// parsed once per version rather than once per pod. A version is its UID and
// resourceVersion: the API server gives every change of the annotations a
// new resourceVersion, so a cached entry is never stale.

// maxCachedSettings bounds the versions remembered; when full, the cache
// starts over (a miss costs one Parse).
const maxCachedSettings = 1024

type settingsKey struct {
	uid             types.UID
	resourceVersion string
}

type parsedSettings struct {
	settings jobconfig.Settings // shared by every admission: read, never changed
	err      error
}

var settingsCache = struct {
	sync.RWMutex
	byVersion map[settingsKey]parsedSettings
}{byVersion: map[settingsKey]parsedSettings{}}

// jobSettings is jobconfig.Parse(tj.Annotations). The result's slices and
// maps are shared: the caller must not change them.
func jobSettings(tj *metav1.ObjectMeta) (jobconfig.Settings, error) {
	if tj.UID == "" || tj.ResourceVersion == "" {
		// Not a stored object's (tests): nothing identifies the version.
		return jobconfig.Parse(tj.Annotations)
	}
	key := settingsKey{tj.UID, tj.ResourceVersion}
	settingsCache.RLock()
	p, ok := settingsCache.byVersion[key]
	settingsCache.RUnlock()
	if ok {
		return p.settings, p.err
	}
	p.settings, p.err = jobconfig.Parse(tj.Annotations)
	settingsCache.Lock()
	if len(settingsCache.byVersion) >= maxCachedSettings {
		settingsCache.byVersion = map[settingsKey]parsedSettings{}
	}
	settingsCache.byVersion[key] = p
	settingsCache.Unlock()
	return p.settings, p.err
}
