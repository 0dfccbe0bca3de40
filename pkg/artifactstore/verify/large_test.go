package verify

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/upload"
)

// sized is a backend whose objects are only their Head answers: a manifest
// of files past 5 GiB is checked without storing them.
type sized struct {
	upload.Backend
	objects map[string]upload.ObjectInfo
}

func (s sized) Head(_ context.Context, key string) (upload.ObjectInfo, error) {
	if o, ok := s.objects[key]; ok {
		return o, nil
	}
	return upload.ObjectInfo{}, upload.ErrNotFound
}

// A manifest entry of 6 GiB (past a single PUT, stored in parts) parses,
// and verifies against an object stored in parts by its CRC-64/NVME alone:
// the multipart ETag is never taken for an MD5, and such an object without
// a checksum, or with another, is not the entry.
func TestManifestAcceptsFilesPast5GiB(t *testing.T) {
	const size = 6 << 30
	const md5, crc = "0123456789abcdef0123456789abcdef", "AAECAwQFBgc="
	raw := `{"version":"v1","jobID":"job-a","podUID":"pod-0","files":[{"path":"model-00001.safetensors","size":6442450944,"md5":"` + md5 + `","crc64nvme":"` + crc + `"}]}`
	m, err := Parse([]byte(raw), "job-a")
	if err != nil {
		t.Fatalf("a 6 GiB entry is refused: %v", err)
	}
	if m.Files[0].Size != size {
		t.Fatalf("size %d", m.Files[0].Size)
	}
	over := strings.Replace(raw, "6442450944", "5497558138881", 1) // 5 TiB + 1
	if _, err := Parse([]byte(over), "job-a"); err == nil || !strings.Contains(err.Error(), "size") {
		t.Fatalf("an entry past 5 TiB: %v", err)
	}
	for _, tc := range []struct {
		name   string
		stored upload.ObjectInfo
		want   bool
	}{
		{"InPartsSameChecksum", upload.ObjectInfo{Size: size, ETag: "fedcba9876543210fedcba9876543210-96", CRC64NVME: crc}, true},
		{"InPartsOtherChecksum", upload.ObjectInfo{Size: size, ETag: "fedcba9876543210fedcba9876543210-96", CRC64NVME: "BwYFBAMCAQA="}, false},
		{"InPartsNoChecksum", upload.ObjectInfo{Size: size, ETag: "fedcba9876543210fedcba9876543210-96"}, false},
		// A store that answered the MD5 as if it were a multipart ETag.
		{"InPartsETagIsTheMD5", upload.ObjectInfo{Size: size, ETag: md5 + "-96"}, false},
		{"OtherSize", upload.ObjectInfo{Size: size - 1, ETag: "fedcba9876543210fedcba9876543210-96", CRC64NVME: crc}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := sized{objects: map[string]upload.ObjectInfo{"job-a/model-00001.safetensors": tc.stored}}
			res, err := Manifest(context.Background(), b, "job-a/manifest.json", 0, m, 2)
			if err != nil && !errors.Is(err, upload.ErrNotFound) {
				t.Fatal(err)
			}
			if res.Verified != tc.want {
				t.Fatalf("verified %v, want %v (%+v)", res.Verified, tc.want, res)
			}
		})
	}
}
