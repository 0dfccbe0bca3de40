package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// refusal is a request the server turns down: an HTTP status, a protocol
// error code, a metric reason and a message for the client.
type refusal struct {
	status  int
	code    string
	reason  string
	message string
	// retryAfter, when set, is sent as Retry-After.
	retryAfter time.Duration
}

func (r *refusal) Error() string { return r.code + ": " + r.message }

func refuse(status int, code, reason, format string, args ...any) *refusal {
	return &refusal{status: status, code: code, reason: reason, message: fmt.Sprintf(format, args...)}
}

// authenticate finds the binding that holds the request's token. The binding
// is looked up by the token's SHA-256, and the hashes are compared in
// constant time, so neither the lookup nor the comparison reveals the token.
// A binding created moments ago may not be in the cache yet: on a miss the
// claimed namespace is listed from the API server.
func (s *Server) authenticate(ctx context.Context, r *http.Request, namespace string) (*tetherv1.WorkerBinding, *refusal) {
	if v := r.Header.Get(binding.HeaderProtocolVersion); v != binding.ProtocolVersion {
		return nil, refuse(http.StatusBadRequest, binding.ErrUnsupportedVersion, "unsupported_version",
			"%s %q is not supported; this server speaks %q", binding.HeaderProtocolVersion, v, binding.ProtocolVersion)
	}
	token, err := binding.TokenFromHeader(r.Header)
	if err != nil {
		return nil, refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "malformed_token", "%v", err)
	}
	hash := token.Hash()
	var list tetherv1.WorkerBindingList
	if err := s.cache.List(ctx, &list, client.MatchingFields{TokenHashIndex: hash}); err != nil {
		return nil, refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "looking up the binding: %v", err)
	}
	now := s.opts.Now()
	wb := findByHash(list.Items, hash, now)
	if wb == nil && s.live != nil && namespace != "" {
		if !s.liveLookups.Allow() {
			// Unknown tokens arrive faster than the API server should be
			// asked about them (ratelimit.go): a real new binding retries.
			return nil, refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "lookup_limited",
				"the token is not in the server's cache and too many unknown tokens are being checked; retry with backoff")
		}
		var live tetherv1.WorkerBindingList
		if err := s.live.List(ctx, &live, client.InNamespace(namespace)); err == nil {
			wb = findByHash(live.Items, hash, now)
		}
	}
	switch {
	case wb == nil:
		return nil, refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "unknown_token",
			"no binding holds this token (the TrainJob was deleted or its token reissued)")
	case wb.DeletionTimestamp != nil:
		return nil, refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "revoked", "the binding is being deleted")
	case lifecycle.IsFinal(wb.Status.Phase):
		return nil, refuse(http.StatusGone, binding.ErrBindingFinished, "finished",
			"binding %s/%s is %s (%s)", wb.Namespace, wb.Name, wb.Status.Phase, wb.Status.Reason)
	}
	if ref := s.trainJobRefusal(ctx, wb); ref != nil {
		return nil, ref
	}
	return wb, nil
}

func findByHash(items []tetherv1.WorkerBinding, hash string, now time.Time) *tetherv1.WorkerBinding {
	var found *tetherv1.WorkerBinding
	for i := range items {
		if tokenAccepted(&items[i], hash, now) {
			found = &items[i]
		}
	}
	return found
}

// tokenAccepted reports whether the token hashing to hash is good for wb at
// now: its current token, or the one its last reissue replaced while that
// overlap lasts. Hashes are compared in constant time.
func tokenAccepted(wb *tetherv1.WorkerBinding, hash string, now time.Time) bool {
	if subtle.ConstantTimeCompare([]byte(wb.Spec.TokenSHA256), []byte(hash)) == 1 {
		return true
	}
	p := wb.Spec.PreviousToken
	return p != nil && now.Before(p.ValidUntil.Time) && subtle.ConstantTimeCompare([]byte(p.SHA256), []byte(hash)) == 1
}

// checkIdentity refuses a request whose claimed job, worker or pod is not the
// binding's: a token is good for one job's worker in one of its own pods,
// and the request's pod token (podtoken.go) must prove that pod.
func (s *Server) checkIdentity(ctx context.Context, r *http.Request, wb *tetherv1.WorkerBinding, jobID, workerID string, pod binding.PodIdentity) (*corev1.Pod, *refusal) {
	if jobID != wb.Spec.JobID || workerID != wb.Spec.WorkerID {
		return nil, refuse(http.StatusForbidden, binding.ErrForbidden, "identity_mismatch",
			"this token belongs to another job or worker")
	}
	if ref := s.provePod(ctx, r, wb, pod.Name, pod.UID); ref != nil {
		return nil, ref
	}
	if pod.Namespace != wb.Namespace || pod.Name == "" || pod.UID == "" {
		return nil, refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch",
			"pod %s/%s is not in the binding's namespace", pod.Namespace, pod.Name)
	}
	p, err := s.pod(ctx, pod.Namespace, pod.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch", "pod %s/%s does not exist", pod.Namespace, pod.Name)
		}
		return nil, refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "reading pod %s: %v", pod.Name, err)
	}
	var status struct {
		JobID string `json:"jobID"`
	}
	_ = json.Unmarshal([]byte(p.Annotations[jobconfig.PodStatusAnnotation]), &status)
	if string(p.UID) != pod.UID || p.Labels[trainjob.JobSetNameLabel] != wb.Spec.TrainJobName || status.JobID != wb.Spec.JobID {
		return nil, refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch",
			"pod %s/%s is not an injected trainer pod of TrainJob %s", pod.Namespace, pod.Name, wb.Spec.TrainJobName)
	}
	return p, nil
}

// pod reads a trainer pod from the cache, or from the API server when the
// cache has not seen it yet (a sidecar can start before the watch delivers
// its pod).
func (s *Server) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	key := types.NamespacedName{Namespace: ns, Name: name}
	err := s.cache.Get(ctx, key, p)
	if apierrors.IsNotFound(err) && s.live != nil {
		err = s.live.Get(ctx, key, p)
	}
	return p, err
}

func writeError(w http.ResponseWriter, r *refusal) {
	w.Header().Set("Content-Type", "application/json")
	if r.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(r.retryAfter)))
	}
	w.WriteHeader(r.status)
	_ = json.NewEncoder(w).Encode(binding.ErrorResponse{Code: r.code, Message: r.message})
}
