package objects

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tether-dev/tether/pkg/upload"
)

// MultipartState is the binding server's record of one open multipart
// upload of a proxied body (docs/artifacts.md, "Files in parts"): what it
// stores and, per stored part, the checksums an upload that resumes after
// that part needs. It is written after the upload is created and after
// every part, under MultipartStateKey, a key only the server writes (outside
// every job's prefix), so any replica resumes it and the sweep finds every
// upload the server started.
type MultipartState struct {
	// Key is the client's key; Target the key the object completes at
	// (Key, or its pending key).
	Key    string `json:"key"`
	Target string `json:"target"`
	// UploadID is the store's multipart upload id.
	UploadID string `json:"uploadID"`
	// Size is the whole object's size, PartSize the size of every part
	// but the last.
	Size     int64 `json:"size"`
	PartSize int64 `json:"partSize"`
	// Token is the id a direct upload in parts was authorized with (the
	// sidecar's parts and commit name it); empty for a proxied body, whose
	// Parts the server streamed (a direct upload's parts are the store's).
	Token   string      `json:"token,omitempty"`
	Parts   []StatePart `json:"parts"`
	Created time.Time   `json:"created"`
}

// StatePart is one stored part as the server streamed it.
type StatePart struct {
	Number int   `json:"number"`
	Size   int64 `json:"size"`
	// MD5 is the part's hex MD5, computed while it streamed: the part ETag
	// the store must report.
	MD5 string `json:"md5"`
	// CRC64NVME is the checksum of the object's bytes from its start to
	// this part's end (S3's form): where an upload resuming after this part
	// continues from.
	CRC64NVME string `json:"crc64nvme"`
}

// Covered is how many bytes the first n parts hold.
func (s *MultipartState) Covered(n int) int64 {
	var c int64
	for _, p := range s.Parts[:n] {
		c += p.Size
	}
	return c
}

// maxStateSize bounds a state record: MaxParts parts of about 100 bytes.
const maxStateSize = 2 << 20

// MultipartStatePrefix holds job jobID's multipart state records.
func MultipartStatePrefix(jobID string) string { return JobUploadsPrefix(jobID) + "multipart/" }

// MultipartStateKey is where the state of the proxied multipart upload of
// key (of job jobID) is kept: one per key, so a new upload of the key
// replaces (and aborts) an older one.
func MultipartStateKey(jobID, key string) string {
	s := sha256.Sum256([]byte(key))
	return MultipartStatePrefix(jobID) + hex.EncodeToString(s[:16]) + ".json"
}

// ReadMultipartState reads the state at stateKey; nil if there is none.
func ReadMultipartState(ctx context.Context, b upload.Backend, stateKey string) (*MultipartState, error) {
	o, ok := b.(Opener)
	if !ok {
		return nil, errors.New("the backend cannot read objects back (no Opener)")
	}
	rc, info, err := o.Open(ctx, stateKey)
	if errors.Is(err, upload.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if info.Size > maxStateSize {
		return nil, fmt.Errorf("the multipart state %s is %d bytes, over %d", stateKey, info.Size, maxStateSize)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, maxStateSize+1))
	if err != nil {
		return nil, err
	}
	var s MultipartState
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("the multipart state %s is not JSON: %w", stateKey, err)
	}
	return &s, nil
}

// WriteMultipartState stores s at stateKey.
func WriteMultipartState(ctx context.Context, b upload.Backend, stateKey string, s *MultipartState) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = b.Put(ctx, stateKey, bytes.NewReader(raw), int64(len(raw)))
	return err
}
