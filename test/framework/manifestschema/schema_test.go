package manifestschema

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
)

const job = "team-a_0a1b2c3d0123456789abcdef"

// TestSidecarEncodedManifestsMatch: what the sidecar's encoder writes
// (the Syncer uploads EncodeManifest's bytes) is valid under the schema,
// and the control plane's parser accepts it: empty, one file, with and
// without a CRC-64/NVME, nested and odd but legal paths.
func TestSidecarEncodedManifestsMatch(t *testing.T) {
	for name, files := range map[string][]upload.ManifestFile{
		"no files": nil,
		"files": {
			{Path: "ckpt/step-100.pt", Size: 3 << 20, MD5: "0123456789abcdef0123456789abcdef", CRC64NVME: "AAECAwQFBgc="},
			{Path: "empty", Size: 0, MD5: "d41d8cd98f00b204e9800998ecf8427e"},
			{Path: "a b/ünï ... /.hidden/x.tether", Size: 7, MD5: "ffffffffffffffffffffffffffffffff"},
			{Path: "nodes/manifest.json", Size: upload.MaxObjectSize, MD5: "00000000000000000000000000000000"},
		},
	} {
		m := artifacts.NewManifest(job, files)
		m.PodUID = "6f1f3c56-8a2b-4c1e-9d6f-1b2c3d4e5f60"
		raw, err := artifacts.EncodeManifest(m)
		if err != nil {
			t.Fatalf("%s: the sidecar refuses to encode it: %v", name, err)
		}
		if err := Validate(raw); err != nil {
			t.Errorf("%s: %v\n%s", name, err, raw)
		}
		if _, err := verify.Parse(raw, job); err != nil {
			t.Errorf("%s: the control plane's parser refuses what the schema accepts: %v", name, err)
		}
	}
}

// TestParserRefusalsAreSchemaFailures: manifests the control plane refuses
// (its parser, or the manifest endpoint for a missing podUID) fail the
// schema too, each for the member at fault.
func TestParserRefusalsAreSchemaFailures(t *testing.T) {
	valid := func() map[string]any {
		return map[string]any{"version": "v1", "jobID": job, "podUID": "uid-1", "files": []any{
			map[string]any{"path": "ckpt/a.pt", "size": 1, "md5": "0123456789abcdef0123456789abcdef"},
		}}
	}
	file := func(m map[string]any) map[string]any { return m["files"].([]any)[0].(map[string]any) }
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		// endpointOnly: the parser accepts it, the manifest endpoint refuses it.
		endpointOnly bool
		where        string
	}{
		{name: "another version", edit: func(m map[string]any) { m["version"] = "v2" }, where: "/version"},
		{name: "files not an array", edit: func(m map[string]any) { m["files"] = "x" }, where: "/files"},
		{name: "negative size", edit: func(m map[string]any) { file(m)["size"] = -1 }, where: "/files/0/size"},
		{name: "size over 5 TiB", edit: func(m map[string]any) { file(m)["size"] = upload.MaxObjectSize + 1 }, where: "/files/0/size"},
		{name: "upper-case MD5", edit: func(m map[string]any) { file(m)["md5"] = "0123456789ABCDEF0123456789ABCDEF" }, where: "/files/0/md5"},
		{name: "short MD5", edit: func(m map[string]any) { file(m)["md5"] = "0123" }, where: "/files/0/md5"},
		{name: "the manifest itself", edit: func(m map[string]any) { file(m)["path"] = "manifest.json" }, where: "/files/0/path"},
		{name: "under .tether", edit: func(m map[string]any) { file(m)["path"] = ".tether/logs/x.log" }, where: "/files/0/path"},
		{name: "a .. segment", edit: func(m map[string]any) { file(m)["path"] = "ckpt/../x" }, where: "/files/0/path"},
		{name: "a . segment", edit: func(m map[string]any) { file(m)["path"] = "./x" }, where: "/files/0/path"},
		{name: "an empty segment", edit: func(m map[string]any) { file(m)["path"] = "ckpt//x" }, where: "/files/0/path"},
		{name: "a leading slash", edit: func(m map[string]any) { file(m)["path"] = "/x" }, where: "/files/0/path"},
		{name: "a NUL", edit: func(m map[string]any) { file(m)["path"] = "x\x00y" }, where: "/files/0/path"},
		{name: "a path too long", edit: func(m map[string]any) { file(m)["path"] = strings.Repeat("x", 1010) }, where: "/files/0/path"},
		{name: "no podUID", edit: func(m map[string]any) { delete(m, "podUID") }, endpointOnly: true, where: "podUID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := valid()
			c.edit(m)
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, perr := verify.Parse(raw, job)
			if perr == nil && !c.endpointOnly {
				t.Fatalf("the parser accepts %s; this case is meant to be one it refuses", raw)
			}
			err = Validate(raw)
			if err == nil {
				t.Fatalf("the schema accepts %s, which the control plane refuses (%v)", raw, perr)
			}
			if !strings.Contains(err.Error(), c.where) {
				t.Errorf("schema failure %v\nwant it to name %s", err, c.where)
			}
		})
	}
	if raw, _ := json.Marshal(valid()); Validate(raw) != nil {
		t.Fatalf("the unedited manifest fails the schema: %v", Validate(raw))
	}
}
