package artifacts

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// NewManifest returns the manifest of jobID listing files, sorted by path.
func NewManifest(jobID string, files []upload.ManifestFile) upload.Manifest {
	fs := slices.Clone(files)
	slices.SortFunc(fs, func(a, b upload.ManifestFile) int { return strings.Compare(a.Path, b.Path) })
	if fs == nil {
		fs = []upload.ManifestFile{} // "files": [] rather than null
	}
	return upload.Manifest{Version: upload.ManifestVersion, JobID: jobID, Files: fs}
}

// EncodeManifest checks m and returns its JSON: version v1, a job id, unique
// well-formed paths, sizes within a single PUT, lowercase hex MD5s, and at
// most MaxManifestSize bytes.
func EncodeManifest(m upload.Manifest) ([]byte, error) {
	if m.Version != upload.ManifestVersion {
		return nil, fmt.Errorf("manifest: version %q, want %q", m.Version, upload.ManifestVersion)
	}
	if !binding.ValidID(m.JobID) {
		return nil, fmt.Errorf("manifest: invalid job id %q", m.JobID)
	}
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		switch {
		case checkKey(f.Path, m.JobID+"/"+f.Path) != nil:
			return nil, fmt.Errorf("manifest: invalid path %q: %v", f.Path, checkKey(f.Path, m.JobID+"/"+f.Path))
		case reservedPath(f.Path) != "":
			return nil, fmt.Errorf("manifest: path %q is reserved", f.Path)
		case seen[f.Path]:
			return nil, fmt.Errorf("manifest: path %q listed twice", f.Path)
		case f.Size < 0 || f.Size > upload.MaxObjectSize:
			return nil, fmt.Errorf("manifest: %q: size %d out of range", f.Path, f.Size)
		case len(f.MD5) != 32 || strings.Trim(f.MD5, "0123456789abcdef") != "":
			return nil, fmt.Errorf("manifest: %q: MD5 %q is not 32 lowercase hex digits", f.Path, f.MD5)
		}
		seen[f.Path] = true
	}
	if m.Files == nil {
		m.Files = []upload.ManifestFile{}
	}
	if len(m.Files) > upload.MaxManifestEntries {
		return nil, fmt.Errorf("manifest: %d files, over the %d one manifest may list; exclude files with the %s annotation or pack small files into fewer",
			len(m.Files), upload.MaxManifestEntries, names.ExcludeAnnotation)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > upload.MaxManifestSize {
		return nil, fmt.Errorf("manifest: %d files make %s of JSON, over the %s limit; exclude files with the %s annotation",
			len(m.Files), humanBytes(int64(len(b))), humanBytes(upload.MaxManifestSize), names.ExcludeAnnotation)
	}
	return b, nil
}

// reservedPath says why a path relative to the artifact directory cannot be
// an artifact's ("" if it can): its key would be the manifest's, or under the
// server's reserved directory.
func reservedPath(rel string) string {
	switch {
	case rel == upload.ManifestName:
		return fmt.Sprintf("its key <job-id>/%s is the job's manifest, which the sidecar writes", upload.ManifestName)
	case rel == upload.ReservedDir || strings.HasPrefix(rel, upload.ReservedDir+"/"):
		return fmt.Sprintf("keys under <job-id>/%s/ are reserved for the server", upload.ReservedDir)
	}
	return ""
}
