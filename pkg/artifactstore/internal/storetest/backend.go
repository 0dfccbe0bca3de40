package storetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tether-dev/tether/pkg/upload"
)

// BackendSuite checks the upload.Backend contract on fresh backends from
// newBackend, one per subtest.
func BackendSuite(t *testing.T, newBackend func(t *testing.T) upload.Backend) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, b backendCheck)
	}{
		{"PutHead", checkPutHead},
		{"FailedPutLeavesNothing", checkFailedPut},
		{"CopyDelete", checkCopyDelete},
		{"List", checkList},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, backendCheck{ctx: context.Background(), b: newBackend(t)}) })
	}
}

// backendCheck is one subtest's backend and the checks it runs on it.
type backendCheck struct {
	ctx context.Context
	b   upload.Backend
}

func (c backendCheck) put(t *testing.T, key string, body []byte) {
	t.Helper()
	info, err := c.b.Put(c.ctx, key, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	if want := (upload.ObjectInfo{Size: int64(len(body)), ETag: MD5Hex(body)}); !SameObject(info, want, body) {
		t.Fatalf("Put %s: %+v, want %+v (and no CRC-64/NVME or the body's %s)", key, info, want, upload.CRC64NVMEOf(body))
	}
}

func (c backendCheck) want(t *testing.T, key string, body []byte) {
	t.Helper()
	info, err := c.b.Head(c.ctx, key)
	if err != nil {
		t.Fatalf("Head %s: %v", key, err)
	}
	if w := (upload.ObjectInfo{Size: int64(len(body)), ETag: MD5Hex(body)}); !SameObject(info, w, body) {
		t.Fatalf("Head %s: %+v, want %+v (and no CRC-64/NVME or the body's %s)", key, info, w, upload.CRC64NVMEOf(body))
	}
}

func (c backendCheck) absent(t *testing.T, key string) {
	t.Helper()
	if info, err := c.b.Head(c.ctx, key); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("Head %s: %+v %v, want ErrNotFound", key, info, err)
	}
}

func checkPutHead(t *testing.T, c backendCheck) {
	for _, n := range []int{0, 1, 100000} {
		key := "job/sub dir/obj-" + string(rune('a'+n%26))
		c.put(t, key, Data(n, 1))
		c.want(t, key, Data(n, 1))
	}
	c.put(t, "job/sub dir/obj-a", Data(7, 2)) // overwrite
	c.want(t, "job/sub dir/obj-a", Data(7, 2))
	c.absent(t, "job/missing")
	c.absent(t, "job/sub dir") // a "directory" is not an object
}

func checkFailedPut(t *testing.T, c backendCheck) {
	ctx, b := c.ctx, c.b
	old := Data(10, 1)
	c.put(t, "job/existing", old)
	for _, key := range []string{"job/new", "job/existing"} {
		// The body fails mid-stream.
		if _, err := b.Put(ctx, key, &FailingReader{N: 1 << 20, Err: errors.New("boom")}, 2<<20); err == nil {
			t.Fatalf("Put %s with a failing body succeeded", key)
		}
		// The body is shorter than announced.
		if _, err := b.Put(ctx, key, bytes.NewReader(Data(50, 3)), 100); err == nil {
			t.Fatalf("Put %s with a short body succeeded", key)
		}
	}
	c.absent(t, "job/new")
	c.want(t, "job/existing", old)
	if keys, err := b.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"job/existing"}) {
		t.Fatalf("List: %q %v", keys, err)
	}
}

func checkCopyDelete(t *testing.T, c backendCheck) {
	ctx, b := c.ctx, c.b
	v1, v2 := Data(1000, 1), Data(2000, 2)
	c.put(t, "job/.tether/pending/a/b.bin", v2)
	c.put(t, "job/a/b.bin", v1)
	if err := b.Copy(ctx, "job/.tether/pending/a/b.bin", "job/a/b.bin"); err != nil {
		t.Fatal(err)
	}
	c.want(t, "job/a/b.bin", v2)
	c.want(t, "job/.tether/pending/a/b.bin", v2)
	if err := b.Copy(ctx, "job/.tether/pending/a/b.bin", "job/new/c"); err != nil {
		t.Fatal(err)
	}
	c.want(t, "job/new/c", v2)
	if err := b.Copy(ctx, "job/missing", "job/x"); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("Copy of a missing object: %v", err)
	}
	for _, k := range []string{"job/.tether/pending/a/b.bin", "job/.tether/pending/a/b.bin", "job/never"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete %s: %v", k, err)
		}
	}
	c.absent(t, "job/.tether/pending/a/b.bin")
	c.want(t, "job/a/b.bin", v2)
}

func checkList(t *testing.T, c backendCheck) {
	keys := []string{"j/a", "j/ab/x", "j/abc", "j/b/c/d", "j/.tether/pending/ab", "k/ab"}
	for _, k := range keys {
		c.put(t, k, []byte(k))
	}
	for prefix, wantKeys := range map[string][]string{
		"":                   {"j/.tether/pending/ab", "j/a", "j/ab/x", "j/abc", "j/b/c/d", "k/ab"},
		"j/":                 {"j/.tether/pending/ab", "j/a", "j/ab/x", "j/abc", "j/b/c/d"},
		"j/ab":               {"j/ab/x", "j/abc"},
		"j/ab/":              {"j/ab/x"},
		"j/.tether/pending/": {"j/.tether/pending/ab"},
		"j/b/c/d":            {"j/b/c/d"},
		"j/zz/":              nil,
		"nothing":            nil,
	} {
		got, err := c.b.List(c.ctx, prefix)
		if err != nil {
			t.Fatalf("List %q: %v", prefix, err)
		}
		if !slices.Equal(got, wantKeys) {
			t.Fatalf("List %q: %q, want %q", prefix, got, wantKeys)
		}
	}
}

// SameObject says whether info has want's size and ETag, and no checksum
// or body's CRC-64/NVME (a store reports one or none).
func SameObject(info, want upload.ObjectInfo, body []byte) bool {
	return info.Size == want.Size && info.ETag == want.ETag && (info.CRC64NVME == "" || info.CRC64NVME == upload.CRC64NVMEOf(body))
}

// MD5Hex is the lowercase hex MD5 of b, the ETag of an object holding it.
func MD5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// Data returns n deterministic bytes that differ by seed.
func Data(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// FailingReader returns N zero bytes, then Err.
type FailingReader struct {
	N   int
	Err error
}

func (f *FailingReader) Read(p []byte) (int, error) {
	if f.N == 0 {
		return 0, f.Err
	}
	k := min(len(p), f.N)
	clear(p[:k])
	f.N -= k
	return k, nil
}

// ManifestOf is job's manifest, written by pod podUID, listing n files of
// one byte each (f0, f1, ...: none of them stored).
func ManifestOf(job, podUID string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"version":%q,"jobID":%q,"podUID":%q,"files":[`, upload.ManifestVersion, job, podUID)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"path":"f%d","size":1,"md5":"%032x"}`, i, i)
	}
	b.WriteString("]}")
	return b.Bytes()
}
