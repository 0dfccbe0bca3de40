package mutate

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// TestJobSettingsFollowTheTrainJobVersion: the settings of a TrainJob
// version are Parse's, and a new version (new annotations, new
// resourceVersion) gets its own, valid or not.
func TestJobSettingsFollowTheTrainJobVersion(t *testing.T) {
	tj := &metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "u-1", ResourceVersion: "10",
		Annotations: map[string]string{names.IncludeAnnotation: "checkpoints/**", names.HeartbeatIntervalAnnotation: "20s"}}
	check := func(tj *metav1.ObjectMeta) {
		t.Helper()
		want, wantErr := jobconfig.Parse(tj.Annotations)
		for range 2 { // a miss, then a hit
			got, err := jobSettings(tj)
			if !reflect.DeepEqual(got, want) || (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("resourceVersion %s: settings %+v, %v; want %+v, %v", tj.ResourceVersion, got, err, want, wantErr)
			}
		}
	}
	check(tj)

	changed := tj.DeepCopy()
	changed.ResourceVersion = "11"
	changed.Annotations[names.IncludeAnnotation] = "*.safetensors"
	check(changed)
	invalid := changed.DeepCopy()
	invalid.ResourceVersion = "12"
	invalid.Annotations[names.HeartbeatIntervalAnnotation] = "0s"
	check(invalid)
	if _, err := jobSettings(invalid); err == nil {
		t.Fatal("an invalid heartbeat interval parsed")
	}
	check(tj) // the first version is still its own

	// Without a UID and resourceVersion nothing identifies the version:
	// never cached.
	unstored := &metav1.ObjectMeta{Name: "train", Annotations: map[string]string{names.IncludeAnnotation: "a/**"}}
	check(unstored)
	unstored.Annotations[names.IncludeAnnotation] = "b/**"
	check(unstored)
	settingsCache.RLock()
	_, cached := settingsCache.byVersion[settingsKey{}]
	settingsCache.RUnlock()
	if cached {
		t.Error("settings of an object without UID and resourceVersion were cached")
	}
}
