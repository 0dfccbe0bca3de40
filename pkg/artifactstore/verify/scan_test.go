package verify

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// scanned is what Scan and Entries make of doc: the manifest as Parse
// would return it, or Scan's error.
func scanned(t *testing.T, doc []byte, jobID string) (*upload.Manifest, error) {
	t.Helper()
	s, err := Scan(bytes.NewReader(doc), jobID)
	if err != nil {
		return nil, err
	}
	m := s.Manifest()
	if s.member > 0 && !s.null {
		m.Files = []upload.ManifestFile{}
	}
	var size int64
	err = s.Entries(doc, func(f upload.ManifestFile) error {
		m.Files = append(m.Files, f)
		size += f.Size
		return nil
	})
	if err != nil {
		t.Fatalf("Entries of what Scan accepted: %v", err)
	}
	if int64(len(m.Files)) != s.Files || size != s.Bytes {
		t.Fatalf("Scan counted %d files of %d bytes, Entries read %d of %d", s.Files, s.Bytes, len(m.Files), size)
	}
	return m, nil
}

// TestScanAgreesWithParse: Scan accepts and refuses what Parse does, with
// the same message, and Entries reads again exactly the entries Parse
// keeps (repeated "files" members, null, case-folded keys included).
func TestScanAgreesWithParse(t *testing.T) {
	for _, doc := range []string{
		`{"Version":"v1","JOBID":"job","files":[{"PATH":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72","x":[1,{"y":2}]}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}],"files":[]}`,
		`{"version":"v1","jobID":"job","files":[],"Files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"},{"path":"b","size":2,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}],"files":null}`,
		`{"version":"v1","jobID":"other","jobID":"job","files":null,"extra":{"deep":[[[]]]},"podUID":"p"}`,
		` {"version":"v1","jobID":"job"} `,
		`{"version":"v1","jobID":"job","files":{}}`, `{"version":"v1","jobID":"job","files":[1]}`,
		`{"version":"v1","jobID":"job","files":[]`, `{"version":"v1","jobID":"job",}`, `{"version":1,"jobID":"job"}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"},{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"manifest.json","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"../x","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":-1,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"X00150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v2","jobID":"job"}`, `{"version":"v1","jobID":"job"} {}`, `[]`, `null`, ``,
		string(manifestOf(3)),
	} {
		want, werr := Parse([]byte(doc), "job")
		got, gerr := scanned(t, []byte(doc), "job")
		switch {
		case (werr == nil) != (gerr == nil):
			t.Errorf("%s: Parse: %v, Scan: %v", doc, werr, gerr)
		case werr != nil && werr.Error() != gerr.Error():
			t.Errorf("%s: Parse refuses with %q, Scan with %q", doc, werr, gerr)
		case werr == nil && !reflect.DeepEqual(got, want):
			t.Errorf("%s:\n Scan+Entries %#v\n       Parse %#v", doc, *got, *want)
		}
	}
	if _, err := Scan(bytes.NewReader(manifestOf(upload.MaxManifestEntries+1)), "job"); err == nil || !strings.Contains(err.Error(), "tether.dev/exclude") {
		t.Errorf("a manifest over the entry cap: %v", err)
	}
}

// TestScanRefusesAValueOverTheCap: one value longer than MaxManifestValue
// (which the JSON decoder would hold whole, several times over) is
// refused, saying why; one within it is read.
func TestScanRefusesAValueOverTheCap(t *testing.T) {
	doc := func(n int) []byte {
		return fmt.Appendf(nil, `{"version":"v1","jobID":"job","note":"%s","files":[]}`, strings.Repeat("a", n))
	}
	if _, err := Scan(bytes.NewReader(doc(MaxManifestValue-100)), "job"); err != nil {
		t.Errorf("a value within the cap: %v", err)
	}
	_, err := Scan(bytes.NewReader(doc(MaxManifestValue+1)), "job")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxManifestValue)) {
		t.Errorf("a value over the cap: %v, want refused naming the cap", err)
	}
	entry := fmt.Appendf(nil, `{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72","x":"%s"}]}`,
		strings.Repeat("b", MaxManifestValue))
	if _, err := Scan(bytes.NewReader(entry), "job"); err == nil || !strings.Contains(err.Error(), "files[0]") {
		t.Errorf("an entry over the cap: %v, want refused at files[0]", err)
	}
}

// TestScanHoldsNoEntries: while a manifest of the most entries is
// scanned, what the heap holds beyond its bytes is a small part of what
// Decode holds (every entry).
func TestScanHoldsNoEntries(t *testing.T) {
	body := bigManifest(upload.MaxManifestEntries, upload.MaxManifestSize)
	held := func(read func(func()) error) uint64 {
		base := liveHeap()
		var peak uint64
		if err := read(func() { peak = liveHeap() }); err != nil {
			t.Fatal(err)
		}
		return peak - min(peak, base)
	}
	scanHeld := held(func(last func()) error {
		n := 0
		_, err := decode(cappedDecoder(bytes.NewReader(body)), "job", visitor{files: func(bool) {}, unique: true,
			entry: func(upload.ManifestFile) error {
				if n++; n == upload.MaxManifestEntries {
					last()
				}
				return nil
			}})
		return err
	})
	var kept *upload.Manifest
	decodeHeld := held(func(last func()) error {
		var err error
		kept, err = Decode(bytes.NewReader(body), "job")
		last()
		return err
	})
	runtime.KeepAlive(kept)
	runtime.KeepAlive(body) // held throughout, not counted
	t.Logf("%d entries, %.1f MiB: Scan holds %.1f MiB at its last entry, Decode %.1f MiB once done",
		upload.MaxManifestEntries, float64(len(body))/(1<<20), float64(scanHeld)/(1<<20), float64(decodeHeld)/(1<<20))
	if scanHeld > decodeHeld/4 || scanHeld > 4<<20 {
		t.Errorf("Scan holds %d bytes of entries at its last one, want at most a quarter of Decode's %d and at most 4 MiB", scanHeld, decodeHeld)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// bigManifest lists n entries with paths long enough to reach about size
// bytes.
func bigManifest(n, size int) []byte {
	head := `{"version":"v1","jobID":"job","podUID":"pod","files":[`
	const perEntry = len(`{"path":"","size":1,"md5":"00000000000000000000000000000000"},`)
	pathLen := max(8, min((size-len(head)-2)/n-perEntry, 1000))
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"path":"d%0*d","size":1,"md5":"%032x"}`, pathLen-1, i, i)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// TestScannedManifestAgreesWithManifest: checking a scanned manifest's
// entries from its bytes gives the verdict of checking them held, in
// manifest order (the first missing entries, the first one's reason),
// whatever order the workers check them in.
func TestScannedManifestAgreesWithManifest(t *testing.T) {
	ctx := context.Background()
	b, err := fsstore.NewFSBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: "job", PodUID: "pod"}
	for i := range 300 {
		data := fmt.Appendf(nil, "file %d", i)
		sum := md5.Sum(data)
		f := upload.ManifestFile{Path: fmt.Sprintf("dir/f%03d", i), Size: int64(len(data)), MD5: hex.EncodeToString(sum[:])}
		switch {
		case i%7 == 3: // not uploaded
		case i%11 == 5: // stored with other content
			if _, err := b.Put(ctx, "job/"+f.Path, strings.NewReader("other"), 5); err != nil {
				t.Fatal(err)
			}
		case i%13 == 1: // its pending object is the upload
			if _, err := b.Put(ctx, objects.PendingKey("job/"+f.Path), bytes.NewReader(data), f.Size); err != nil {
				t.Fatal(err)
			}
		default:
			if _, err := b.Put(ctx, "job/"+f.Path, bytes.NewReader(data), f.Size); err != nil {
				t.Fatal(err)
			}
		}
		m.Files = append(m.Files, f)
	}
	raw := encode(t, &m)
	s, err := Scan(bytes.NewReader(raw), "job")
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 3, 8, 64} {
		want, werr := Manifest(ctx, b, "job/manifest.json", 0, &m, 1)
		got, gerr := ScannedManifest(ctx, b, "job/manifest.json", 0, s, raw, workers)
		if werr != nil || gerr != nil {
			t.Fatal(werr, gerr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d workers:\n scanned %+v\n    held %+v", workers, got, want)
		}
		if got.Verified || got.MissingCount == 0 || len(got.Missing) != maxMissing {
			t.Errorf("%d workers: %+v, want not verified with %d missing listed", workers, got, maxMissing)
		}
	}
	// Every entry stored as listed: verified.
	ok := upload.Manifest{Version: upload.ManifestVersion, JobID: "job", PodUID: "pod"}
	for _, f := range m.Files[:3] {
		if f.Path != "dir/f000" {
			continue
		}
		ok.Files = append(ok.Files, f)
	}
	raw = encode(t, &ok)
	if s, err = Scan(bytes.NewReader(raw), "job"); err != nil {
		t.Fatal(err)
	}
	if res, err := ScannedManifest(ctx, b, "job/manifest.json", 0, s, raw, 8); err != nil || !res.Verified || res.Files != 1 || res.Bytes != ok.Files[0].Size {
		t.Errorf("a manifest of stored files: %+v, %v", res, err)
	}
}

func encode(t *testing.T, m *upload.Manifest) []byte {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
