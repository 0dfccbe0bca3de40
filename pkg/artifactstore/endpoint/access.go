package endpoint

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// accessOp names what a request to path with method is.
func accessOp(method, path string) string {
	switch {
	case path == upload.PathAuthorize:
		return "authorize"
	case path == upload.PathCommit:
		return "commit"
	case path == upload.PathParts:
		return "parts"
	case path == upload.PathResume:
		return "resume"
	case method == http.MethodHead:
		return "head"
	case method == http.MethodPut:
		return "put"
	}
	return strings.ToLower(method)
}

// accessWriter records the status an answer was written with.
type accessWriter struct {
	http.ResponseWriter
	status int
}

func (w *accessWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *accessWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// record is the access record of rq, answered with status.
func (rq *request) record(status int, body *countingBody) store.AccessRecord {
	a := store.AccessRecord{RequestID: rq.id, Method: rq.r.Method, Op: accessOp(rq.r.Method, rq.r.URL.Path), Key: rq.key,
		Rank: -1, Pod: rq.r.Header.Get(names.HeaderArtifactPodUID), Status: status, Code: rq.code, Duration: time.Since(rq.start)}
	if body != nil {
		a.BodyBytes = body.n.Load()
	}
	if j := rq.job; j != nil {
		a.Binding, a.JobID = j.Namespace+"/"+j.Name, j.JobID
		if path, ok := strings.CutPrefix(rq.key, j.JobID+"/"); ok {
			a.Rank = accessRank(path, j.Nodes)
		}
	}
	return a
}
