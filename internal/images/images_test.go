package images

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	testMeta = Meta{Version: "v9.8.7", Revision: "0123456789abcdef0123456789abcdef01234567", Created: time.Unix(1764580000, 0)}
	amd64    = v1.Platform{OS: "linux", Architecture: "amd64"}
)

func spec(t *testing.T, title string) Spec {
	t.Helper()
	for _, s := range Specs("example.test/tether") {
		if s.Title() == title {
			return s
		}
	}
	t.Fatalf("no spec %s", title)
	return Spec{}
}

// fakeBinary writes content to a new file with the given mode and mtime.
func fakeBinary(t *testing.T, content string, mode fs.FileMode, mtime time.Time) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return p
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The host file's mtime and mode, and the time of the build, never reach
// the image: only the binary's bytes and Meta do.
func TestImageIsReproducible(t *testing.T) {
	s := spec(t, "tether-sidecar")
	a := fakeBinary(t, "\x7fELF sidecar", 0o755, time.Unix(1000, 0))
	b := fakeBinary(t, "\x7fELF sidecar", 0o700, time.Now())
	imgA, err := Image(s, testMeta, amd64, a)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a build a second later
	imgB, err := Image(s, testMeta, amd64, b)
	if err != nil {
		t.Fatal(err)
	}
	if da, db := digest(t, imgA), digest(t, imgB); da != db {
		t.Errorf("same binary, different host mtime/mode: digests %s and %s", da, db)
	}

	// What must change the digest does.
	c := fakeBinary(t, "\x7fELF sidecar v2", 0o755, time.Unix(1000, 0))
	imgC, err := Image(s, testMeta, amd64, c)
	if err != nil {
		t.Fatal(err)
	}
	later := testMeta
	later.Created = later.Created.Add(time.Second)
	imgD, err := Image(s, later, amd64, a)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[v1.Hash]string{digest(t, imgA): "base"}
	for name, img := range map[string]v1.Image{"other binary": imgC, "other commit time": imgD} {
		d := digest(t, img)
		if prev, dup := seen[d]; dup {
			t.Errorf("%s has the digest of %s: %s", name, prev, d)
		}
		seen[d] = name
	}
}

// Two builds and writes of the same image, from binaries with different host
// mtimes, at different wall times, give byte-identical archives.
func TestWriteIsReproducible(t *testing.T) {
	s := spec(t, "tether-control-plane")
	var sums []string
	var digests []string
	for _, mtime := range []time.Time{time.Unix(5, 0), time.Now()} {
		bin := fakeBinary(t, "\x7fELF control plane", 0o755, mtime)
		img, err := Image(s, testMeta, amd64, bin)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		w, err := Write(out, s, s.Ref(testMeta), img, testMeta.Created)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(w.Path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		sums = append(sums, string(sum[:]))
		digests = append(digests, w.Digest)
	}
	if digests[0] != digests[1] || sums[0] != sums[1] {
		t.Errorf("two writes differ: digests %v, archives equal: %v", digests, sums[0] == sums[1])
	}
}

func TestConfig(t *testing.T) {
	s := spec(t, "tether-sidecar")
	img, err := Image(s, testMeta, amd64, fakeBinary(t, "x", 0o755, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q", cfg.Config.User)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/tether-sidecar"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	want := map[string]string{
		"org.opencontainers.image.source":      "https://github.com/tether-dev/tether",
		"org.opencontainers.image.revision":    testMeta.Revision,
		"org.opencontainers.image.version":     "v9.8.7",
		"org.opencontainers.image.title":       "tether-sidecar",
		"org.opencontainers.image.description": s.Description,
	}
	if !reflect.DeepEqual(cfg.Config.Labels, want) {
		t.Errorf("labels %v, want %v", cfg.Config.Labels, want)
	}
	if !cfg.Created.Time.Equal(testMeta.Created) || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("created %v os %s arch %s", cfg.Created, cfg.OS, cfg.Architecture)
	}
	if len(cfg.History) != 1 || !cfg.History[0].Created.Time.Equal(testMeta.Created) {
		t.Errorf("history %+v", cfg.History)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Errorf("media types: manifest %s config %s layers %+v", m.MediaType, m.Config.MediaType, m.Layers)
	}
}

type entry struct {
	name     string
	mode     int64
	typeflag byte
}

func layerEntries(t *testing.T, img v1.Image) ([]entry, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has a time %v or name %q", zr.ModTime, zr.Name)
	}
	var es []entry
	data := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q)", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(testMeta.Created) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: mtime %v atime %v ctime %v", h.Name, h.ModTime, h.AccessTime, h.ChangeTime)
		}
		if len(h.PAXRecords) != 0 || len(h.Xattrs) != 0 { //nolint:staticcheck // Xattrs: checked on purpose
			t.Errorf("%s: PAX records %v", h.Name, h.PAXRecords)
		}
		es = append(es, entry{h.Name, h.Mode, h.Typeflag})
		b, _ := io.ReadAll(tr)
		data[h.Name] = b
	}
	return es, data
}

func TestLayerHoldsOnlyTheBinaryAndWhatItNeeds(t *testing.T) {
	for title, want := range map[string][]entry{
		"tether-control-plane": {
			{"etc/", 0o755, tar.TypeDir}, {"etc/ssl/", 0o755, tar.TypeDir}, {"etc/ssl/certs/", 0o755, tar.TypeDir},
			{"etc/ssl/certs/ca-certificates.crt", 0o644, tar.TypeReg},
			{"tether-control-plane", 0o755, tar.TypeReg}, {"tmp/", 0o1777, tar.TypeDir},
		},
		"tether-sidecar": {
			{"etc/", 0o755, tar.TypeDir}, {"etc/ssl/", 0o755, tar.TypeDir}, {"etc/ssl/certs/", 0o755, tar.TypeDir},
			{"etc/ssl/certs/ca-certificates.crt", 0o644, tar.TypeReg},
			{"tether-sidecar", 0o755, tar.TypeReg},
		},
		"tether-trainer-standin": {{"trainer-standin", 0o755, tar.TypeReg}},
		"tether-pause":           {{"pause", 0o755, tar.TypeReg}},
	} {
		t.Run(title, func(t *testing.T) {
			s := spec(t, title)
			img, err := Image(s, testMeta, amd64, fakeBinary(t, "\x7fELF "+title, 0o700, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			got, data := layerEntries(t, img)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("entries\n got %v\nwant %v", got, want)
			}
			for name := range data {
				if base := filepath.Base(name); base == "sh" || base == "busybox" || strings.HasPrefix(name, "bin/") {
					t.Errorf("layer has %s", name)
				}
			}
			if got := string(data[strings.TrimPrefix(s.Entrypoint, "/")]); got != "\x7fELF "+title {
				t.Errorf("binary content %q", got)
			}
			if s.CACerts {
				roots := data["etc/ssl/certs/ca-certificates.crt"]
				n := 0
				for rest := roots; ; n++ {
					var blk *pem.Block
					if blk, rest = pem.Decode(rest); blk == nil {
						break
					}
				}
				if n < 100 {
					t.Errorf("CA bundle has %d certificates", n)
				}
			}
		})
	}
}

func TestWriteLayoutAndArchive(t *testing.T) {
	s := spec(t, "tether-pause")
	img, err := Image(s, testMeta, amd64, fakeBinary(t, "pause", 0o755, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ref := s.Ref(testMeta)
	w, err := Write(out, s, ref, img, testMeta.Created)
	if err != nil {
		t.Fatal(err)
	}
	if w.Ref != "example.test/tether/tether-pause:v9.8.7" || w.Digest != digest(t, img).String() ||
		w.Path != filepath.Join(out, "tether-pause.tar") || w.Layout != filepath.Join(out, "tether-pause") ||
		!reflect.DeepEqual(w.Platforms, []string{"linux/amd64"}) || w.Entrypoint != "/pause" || !w.Test {
		t.Errorf("written %+v", w)
	}

	// The layout directory: one entry, named by the full reference for OCI
	// tools and containerd, with its platform; crane push reads it so.
	check := func(dir string) {
		t.Helper()
		idx, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Manifests) != 1 {
			t.Fatalf("index.json has %d entries", len(m.Manifests))
		}
		d := m.Manifests[0]
		if d.Digest.String() != w.Digest || d.MediaType != types.OCIManifestSchema1 || d.Platform == nil || d.Platform.String() != "linux/amd64" ||
			d.Annotations["org.opencontainers.image.ref.name"] != ref || d.Annotations["io.containerd.image.name"] != ref {
			t.Errorf("index entry %+v", d)
		}
		got, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if digest(t, got).String() != w.Digest {
			t.Errorf("read back %s", digest(t, got))
		}
	}
	check(w.Layout)

	// The archive: the same files, sorted, fixed headers; extracted, it is
	// the same layout.
	f, err := os.Open(w.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ext := t.TempDir()
	var names []string
	var size int64
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(testMeta.Created) {
			t.Errorf("%s: %d:%d %v", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		p := filepath.Join(ext, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, _ := io.ReadAll(tr)
		if strings.HasPrefix(h.Name, "blobs/") {
			size += int64(len(b))
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if names[0] != "blobs/" || names[1] != "blobs/sha256/" || names[len(names)-2] != "index.json" || names[len(names)-1] != "oci-layout" ||
		len(names) != 2+3+2 { // dirs, manifest + config + layer, index.json + oci-layout
		t.Errorf("archive entries %v", names)
	}
	if size != w.Size {
		t.Errorf("size %d, blobs in the archive %d", w.Size, size)
	}
	check(ext)
}

func TestIndex(t *testing.T) {
	s := spec(t, "tether-trainer-standin")
	var imgs []v1.Image
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := Image(s, testMeta, v1.Platform{OS: "linux", Architecture: arch}, fakeBinary(t, arch, 0o755, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	idx, err := Index(imgs)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Write(t.TempDir(), s, s.Ref(testMeta), idx, testMeta.Created)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w.Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", w.Platforms)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != 2 || m.Manifests[1].Platform.Architecture != "arm64" {
		t.Errorf("index %+v", m)
	}
}

func TestListRoundTrip(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "images.json")
	list := List{Version: "v1", Revision: "abc", Created: testMeta.Created.UTC(), Images: []Written{{
		Name: "r/x", Ref: "r/x:v1", Digest: "sha256:00", Path: filepath.Join(dir, "x.tar"), Layout: filepath.Join(dir, "x"), Size: 3,
		Platforms: []string{"linux/amd64"}, Entrypoint: "/x",
	}}}
	if err := WriteList(file, list); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(file)
	var onDisk struct {
		Images []struct{ Path, Layout string }
	}
	if err := json.Unmarshal(raw, &onDisk); err != nil || onDisk.Images[0].Path != "x.tar" || onDisk.Images[0].Layout != "x" {
		t.Errorf("on disk: %s (%v)", raw, err)
	}
	got, err := ReadList(file)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, list) {
		t.Errorf("read %+v, wrote %+v", got, list)
	}
}

func TestFilesRejectsARelativeEntrypoint(t *testing.T) {
	if _, err := Files(Spec{Repository: "r/x", Entrypoint: "x"}, nil); err == nil {
		t.Error("no error")
	}
}
