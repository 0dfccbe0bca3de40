package endpoint

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/binding"
)

// A PUT authorized while the job ran whose body ends after the job's
// artifacts became final is refused, and nothing it sent is kept: neither
// over a free key nor as a listed key's pending object.
func TestPutEndingAfterArtifactsFinalNotKept(t *testing.T) {
	var final atomic.Bool
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()}, func(h *Handler, _ *httptest.Server) {
		next := h.Authorize
		h.Authorize = func(ctx context.Context, token binding.Token) (Job, error) {
			j, err := next(ctx, token)
			if final.Load() && j.JobID == "job-a" {
				j.Writable, j.State = false, "Succeeded"
			}
			return j, err
		}
	})
	listed := data(4000, 1)
	e.mustPut("job-a/model.bin", listed)
	for _, key := range []string{"job-a/model.bin", "job-a/unlisted.bin"} {
		final.Store(false)
		pr, pw := io.Pipe()
		done := make(chan *http.Response, 1)
		go func() { done <- e.raw(http.MethodPut, "/tether-artifacts/"+key, tokenA, pr, 4000, nil) }()
		late := data(4000, 9)
		if _, err := pw.Write(late[:2000]); err != nil {
			t.Fatal(err)
		}
		final.Store(true)
		go func() { _, _ = pw.Write(late[2000:]); _ = pw.Close() }()
		resp := <-done
		if e := wantError(t, resp, http.StatusForbidden, "AccessDenied"); !strings.Contains(e.Message, "Succeeded") || !strings.Contains(e.Message, "final") {
			t.Errorf("%s: message %q does not say the job's artifacts are final", key, e.Message)
		}
		e.wantAbsent(objects.PendingKey(key))
	}
	e.wantObject("job-a/model.bin", listed)
	e.wantAbsent("job-a/unlisted.bin")
}

// TestNotWritableSaysWhatIsTrue: a refused write to a failed job's binding
// does not call its artifacts verified (the soak's cancelled job was told
// "verified and final"); a succeeded or promoting one's are.
func TestNotWritableSaysWhatIsTrue(t *testing.T) {
	for state, want := range map[string]string{
		"Succeeded":                    "verified and final",
		"Finishing/PromotingArtifacts": "verified and final",
		"Failed":                       "the binding has ended",
		"":                             "the binding has ended",
	} {
		e := notWritable(Job{Namespace: "ns", Name: "wb", State: state})
		if e.status != http.StatusForbidden || !strings.Contains(e.message, want) {
			t.Errorf("state %q: %d %q, want 403 saying %q", state, e.status, e.message, want)
		}
		if want != "verified and final" && strings.Contains(e.message, "verified") {
			t.Errorf("state %q: %q calls the artifacts verified", state, e.message)
		}
	}
}
