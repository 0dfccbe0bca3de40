package storetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// MultipartBackend is a backend that stores objects in parts.
type MultipartBackend interface {
	upload.Backend
	objects.Multiparter
}

// MultipartSuite checks the objects.Multiparter contract on fresh backends
// from newBackend, one per subtest. A backend's Copy of an object larger
// than it copies in one request (S3: 5 GiB) must be lowered by the caller
// below 5 MiB + 1 KiB for the Copy check to copy in parts.
func MultipartSuite(t *testing.T, newBackend func(t *testing.T) MultipartBackend) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, c multipartCheck)
	}{
		{"CompleteHead", checkMultipartComplete},
		{"WrongChecksumRefused", checkMultipartWrongChecksum},
		{"Abort", checkMultipartAbort},
		{"InterruptedPart", checkMultipartInterruptedPart},
		{"ListUploadsByPrefix", checkMultipartListUploads},
		{"NoSuchUpload", checkMultipartNoSuchUpload},
		{"Copy", checkMultipartCopy},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBackend(t)
			if !b.MultipartCapable() {
				t.Fatal("MultipartCapable is false")
			}
			c.run(t, multipartCheck{backendCheck{ctx: context.Background(), b: b}, b})
		})
	}
}

// multipartCheck is one subtest's backend and the checks it runs on it.
type multipartCheck struct {
	backendCheck
	m MultipartBackend
}

// Parts are the bodies of an upload's parts, in part order.
type Parts [][]byte

// Whole is the object the parts make.
func (p Parts) Whole() []byte { return bytes.Join(p, nil) }

// ETag is the multipart ETag of an object of these parts.
func (p Parts) ETag() string {
	sums := make([][]byte, len(p))
	for i, b := range p {
		s := md5.Sum(b)
		sums[i] = s[:]
	}
	return upload.MultipartETag(sums)
}

// create starts an upload to key.
func (c multipartCheck) create(t *testing.T, key string) string {
	t.Helper()
	id, err := c.m.CreateMultipart(c.ctx, key)
	if err != nil || id == "" {
		t.Fatalf("CreateMultipart %s: %q %v", key, id, err)
	}
	return id
}

// putPart stores body as part n and checks what PutPart returns.
func (c multipartCheck) putPart(t *testing.T, key, id string, n int, body []byte) objects.Part {
	t.Helper()
	p, err := c.m.PutPart(c.ctx, key, id, n, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("PutPart %d of %s: %v", n, key, err)
	}
	if want := (objects.Part{Number: n, Size: int64(len(body)), ETag: MD5Hex(body)}); p != want {
		t.Fatalf("PutPart %d of %s: %+v, want %+v", n, key, p, want)
	}
	return p
}

// upload creates an upload to key and stores parts in it, the last first.
func (c multipartCheck) upload(t *testing.T, key string, parts Parts) (string, []objects.Part) {
	t.Helper()
	id := c.create(t, key)
	stored := make([]objects.Part, len(parts))
	for i := len(parts) - 1; i >= 0; i-- {
		stored[i] = c.putPart(t, key, id, i+1, parts[i])
	}
	return id, stored
}

// wantMultipart checks that key holds the object of parts, by Head and by
// its content where the backend opens objects.
func (c multipartCheck) wantMultipart(t *testing.T, key string, parts Parts) {
	t.Helper()
	whole := parts.Whole()
	want := upload.ObjectInfo{Size: int64(len(whole)), ETag: parts.ETag(), CRC64NVME: upload.CRC64NVMEOf(whole)}
	if info, err := c.b.Head(c.ctx, key); err != nil || info != want {
		t.Fatalf("Head %s: %+v %v, want %+v", key, info, err, want)
	}
	o, ok := c.b.(objects.Opener)
	if !ok {
		return
	}
	r, _, err := o.Open(c.ctx, key)
	if err != nil {
		t.Fatalf("Open %s: %v", key, err)
	}
	defer r.Close()
	h := md5.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != MD5Hex(whole) {
		t.Fatalf("%s holds content with MD5 %s, want the parts' concatenation's %s", key, got, MD5Hex(whole))
	}
}

func (c multipartCheck) wantParts(t *testing.T, key, id string, want []objects.Part) {
	t.Helper()
	got, err := c.m.ListParts(c.ctx, key, id)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ListParts %s: %+v %v, want %+v", key, got, err, want)
	}
}

func (c multipartCheck) wantUploads(t *testing.T, prefix string, want ...objects.MultipartUpload) {
	t.Helper()
	got, err := c.m.ListMultipartUploads(c.ctx, prefix)
	if err != nil {
		t.Fatalf("ListMultipartUploads %q: %v", prefix, err)
	}
	key := func(u objects.MultipartUpload) string { return u.Key + " " + u.ID }
	want = slices.Clone(want)
	slices.SortFunc(got, func(a, b objects.MultipartUpload) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(want, func(a, b objects.MultipartUpload) int { return strings.Compare(key(a), key(b)) })
	if !slices.EqualFunc(got, want, func(a, b objects.MultipartUpload) bool { return key(a) == key(b) && !a.Initiated.IsZero() }) {
		t.Fatalf("ListMultipartUploads %q: %+v, want %+v", prefix, got, want)
	}
}

func checkMultipartComplete(t *testing.T, c multipartCheck) {
	const key = "job/ckpt/model.bin"
	parts := Parts{Data(int(upload.MinPartSize), 1), Data(int(upload.MinPartSize), 2), Data(1000, 3)}
	id, stored := c.upload(t, key, parts)
	c.wantParts(t, key, id, stored)
	// A part stored again replaces the one before, or is listed beside it
	// (SeaweedFS lists every upload of a part number): the completion
	// takes the one it names.
	c.putPart(t, key, id, 2, Data(int(upload.MinPartSize), 9))
	stored[1] = c.putPart(t, key, id, 2, parts[1])
	if listed, err := c.m.ListParts(c.ctx, key, id); err != nil || !slices.Contains(listed, stored[1]) {
		t.Fatalf("ListParts after part 2 was stored again: %+v %v, want %+v among them", listed, err, stored[1])
	}
	c.absent(t, key) // nothing at the key until the upload is completed
	c.wantUploads(t, "job/", objects.MultipartUpload{Key: key, ID: id})

	whole := parts.Whole()
	info, err := c.m.CompleteMultipart(c.ctx, key, id, stored, upload.CRC64NVMEOf(whole))
	want := upload.ObjectInfo{Size: int64(len(whole)), ETag: parts.ETag(), CRC64NVME: upload.CRC64NVMEOf(whole)}
	if err != nil || info != want {
		t.Fatalf("CompleteMultipart: %+v %v, want %+v", info, err, want)
	}
	c.wantMultipart(t, key, parts)
	c.wantUploads(t, "job/")
	if _, err := c.m.ListParts(c.ctx, key, id); !errors.Is(err, objects.ErrNoSuchUpload) {
		t.Fatalf("ListParts of a completed upload: %v, want ErrNoSuchUpload", err)
	}
	if keys, err := c.b.List(c.ctx, ""); err != nil || !slices.Equal(keys, []string{key}) {
		t.Fatalf("List: %q %v, want only %s", keys, err, key)
	}
}

func checkMultipartWrongChecksum(t *testing.T, c multipartCheck) {
	const key = "job/refused.bin"
	parts := Parts{Data(int(upload.MinPartSize), 4), Data(10, 5)}
	id, stored := c.upload(t, key, parts)
	if info, err := c.m.CompleteMultipart(c.ctx, key, id, stored, upload.CRC64NVMEOf([]byte("other bytes"))); err == nil {
		t.Fatalf("CompleteMultipart with a wrong CRC-64/NVME: %+v, want it refused", info)
	}
	c.absent(t, key)
	if keys, err := c.b.List(c.ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("List after a refused completion: %q %v", keys, err)
	}
	if err := c.m.AbortMultipart(c.ctx, key, id); err != nil {
		t.Fatalf("AbortMultipart: %v", err)
	}
	c.wantUploads(t, "")
}

func checkMultipartAbort(t *testing.T, c multipartCheck) {
	const key = "job/aborted.bin"
	id, _ := c.upload(t, key, Parts{Data(int(upload.MinPartSize), 6), Data(100, 7)})
	c.wantUploads(t, "", objects.MultipartUpload{Key: key, ID: id})
	for range 2 { // an upload already gone is not an error
		if err := c.m.AbortMultipart(c.ctx, key, id); err != nil {
			t.Fatalf("AbortMultipart: %v", err)
		}
	}
	c.wantUploads(t, "")
	if parts, err := c.m.ListParts(c.ctx, key, id); !errors.Is(err, objects.ErrNoSuchUpload) {
		t.Fatalf("ListParts of an aborted upload: %+v %v, want ErrNoSuchUpload", parts, err)
	}
	if p, err := c.m.PutPart(c.ctx, key, id, 3, bytes.NewReader([]byte("late")), 4); !errors.Is(err, objects.ErrNoSuchUpload) {
		t.Fatalf("PutPart to an aborted upload: %+v %v, want ErrNoSuchUpload", p, err)
	}
	c.absent(t, key)
}

func checkMultipartInterruptedPart(t *testing.T, c multipartCheck) {
	const key = "job/interrupted.bin"
	id := c.create(t, key)
	first := c.putPart(t, key, id, 1, Data(int(upload.MinPartSize), 8))
	// The body fails midway, then a body shorter than announced.
	if p, err := c.m.PutPart(c.ctx, key, id, 2, &FailingReader{N: 1 << 20, Err: errors.New("boom")}, 2<<20); err == nil {
		t.Fatalf("PutPart with a failing body: %+v, want an error", p)
	}
	if p, err := c.m.PutPart(c.ctx, key, id, 3, bytes.NewReader(Data(50, 1)), 100); err == nil {
		t.Fatalf("PutPart with a short body: %+v, want an error", p)
	}
	c.wantParts(t, key, id, []objects.Part{first})
	parts := Parts{Data(int(upload.MinPartSize), 8)}
	if _, err := c.m.CompleteMultipart(c.ctx, key, id, []objects.Part{first}, upload.CRC64NVMEOf(parts.Whole())); err != nil {
		t.Fatalf("CompleteMultipart of the part stored whole: %v", err)
	}
	c.wantMultipart(t, key, parts)
}

func checkMultipartListUploads(t *testing.T, c multipartCheck) {
	var ups []objects.MultipartUpload
	for _, k := range []string{"j/a/x", "j/a/y", "j/ab", "j/b/z", "k/a/x"} {
		ups = append(ups, objects.MultipartUpload{Key: k, ID: c.create(t, k)})
	}
	// Two uploads to one key.
	ups = append(ups, objects.MultipartUpload{Key: "j/a/x", ID: c.create(t, "j/a/x")})
	c.wantUploads(t, "j/a/", ups[0], ups[1], ups[5])
	c.wantUploads(t, "j/a", ups[0], ups[1], ups[2], ups[5])
	c.wantUploads(t, "j/", ups[0], ups[1], ups[2], ups[3], ups[5])
	c.wantUploads(t, "", ups...)
	c.wantUploads(t, "nothing/")
	if err := c.m.AbortMultipart(c.ctx, "j/a/x", ups[0].ID); err != nil {
		t.Fatal(err)
	}
	c.wantUploads(t, "j/a/", ups[1], ups[5])
}

func checkMultipartNoSuchUpload(t *testing.T, c multipartCheck) {
	const key = "job/x.bin"
	other := c.create(t, "job/other.bin")
	// An id never made, one of another key, and one that is not an id.
	for _, id := range []string{"0123456789abcdef0123456789abcdef", other, "job"} {
		if _, err := c.m.ListParts(c.ctx, key, id); !errors.Is(err, objects.ErrNoSuchUpload) {
			t.Errorf("ListParts of upload %q: %v, want ErrNoSuchUpload", id, err)
		}
		if _, err := c.m.PutPart(c.ctx, key, id, 1, bytes.NewReader([]byte("x")), 1); !errors.Is(err, objects.ErrNoSuchUpload) {
			t.Errorf("PutPart to upload %q: %v, want ErrNoSuchUpload", id, err)
		}
		parts := []objects.Part{{Number: 1, Size: 1, ETag: MD5Hex([]byte("x"))}}
		if _, err := c.m.CompleteMultipart(c.ctx, key, id, parts, upload.CRC64NVMEOf([]byte("x"))); !errors.Is(err, objects.ErrNoSuchUpload) {
			t.Errorf("CompleteMultipart of upload %q: %v, want ErrNoSuchUpload", id, err)
		}
		if err := c.m.AbortMultipart(c.ctx, key, id); err != nil {
			t.Errorf("AbortMultipart of upload %q: %v, want nil (gone)", id, err)
		}
	}
	c.absent(t, key)
	c.wantUploads(t, "", objects.MultipartUpload{Key: "job/other.bin", ID: other})
}

func checkMultipartCopy(t *testing.T, c multipartCheck) {
	const src, dst = "job/.tether/pending/big.bin", "job/big.bin"
	parts := Parts{Data(int(upload.MinPartSize), 10), Data(1024, 11)}
	id, stored := c.upload(t, src, parts)
	if _, err := c.m.CompleteMultipart(c.ctx, src, id, stored, upload.CRC64NVMEOf(parts.Whole())); err != nil {
		t.Fatal(err)
	}
	c.put(t, dst, Data(10, 12))
	if err := c.b.Copy(c.ctx, src, dst); err != nil {
		t.Fatalf("Copy of a multipart object: %v", err)
	}
	c.wantMultipart(t, dst, parts)
	c.wantMultipart(t, src, parts)
	c.wantUploads(t, "")
	w, ok := c.b.(objects.ConditionalWriter)
	if !ok {
		return
	}
	const dst2 = "job/big2.bin"
	// A source that is not the version named is not copied, in parts
	// either.
	err := w.CopyIf(c.ctx, src, dst2, objects.CopyCond{SrcETag: MD5Hex([]byte("another version"))})
	if !errors.Is(err, objects.ErrPrecondition) {
		t.Fatalf("CopyIf of another source version: %v, want ErrPrecondition", err)
	}
	c.absent(t, dst2)
	if err := w.CopyIf(c.ctx, src, dst2, objects.CopyCond{SrcETag: parts.ETag(), DstAbsent: true}); err != nil {
		t.Fatalf("CopyIf of the source's version to an absent key: %v", err)
	}
	c.wantMultipart(t, dst2, parts)
	c.wantUploads(t, "")
}
