package mutate

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
)

// The pod webhook's Events land in the TrainJob's namespace, but nothing
// proves that an AdmissionReview came from the API server: the webhook port
// is the Service's port 443, which every sidecar reaches, and a review
// names any namespace. So an Event recorded on the webhook path carries
// Tether's own fixed wording only, chosen by the decision's reason (an
// enum), and goes to the TrainJob Tether read from the API server: no pod
// name, message or warning text of the request's object. The pod's creator
// gets the full message as the admission error or warnings (the Job
// controller's FailedCreate Event repeats it, in the Job's namespace, from
// the API server's own answer). And Events per TrainJob and reason are
// rate-limited, so a flood of forged reviews can neither spam a TrainJob
// nor fill the control plane's Event queue that every job shares.

// Limits of the webhook path's Events, per TrainJob and reason.
const (
	// podEventBurst Events at once (a job's pods created together), then
	// one per podEventEvery. Identical notes are counted into one Event
	// by the recorder anyway: the limit saves its API writes.
	podEventBurst = 10
	podEventEvery = time.Minute
	// maxPodEventKeys bounds the limiters held; idle ones (full again)
	// are swept when it is reached, and beyond it new keys share one.
	maxPodEventKeys = 10000
)

// podEventNote is the fixed Event type and note of a decision worth an
// Event; ok is false for none. pod is the injected pod, read only to pick
// among fixed notes.
func podEventNote(d Decision, pod *corev1.Pod) (eventType, note string, ok bool) {
	switch d.Outcome {
	case OutcomePatched:
		if len(d.Warnings) == 0 {
			return "", "", false
		}
		note = "a trainer pod was injected with warnings about its spec"
		if pod.Spec.HostNetwork && pod.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			note += ": hostNetwork without dnsPolicy ClusterFirstWithHostNet (the sidecar cannot resolve the binding server's Service name)"
		} else {
			note += ": the pod template carries a " + names.PodStatusAnnotation + " annotation that was not this job's injection (remove it)"
		}
		return corev1.EventTypeWarning, note + "; the pod's creator got them as admission warnings", true
	case OutcomeSkipped:
		if d.Reason == SkipNotPrimaryNode {
			return corev1.EventTypeNormal, "did not inject a trainer pod of node rank above 0: the job is bound with tether.dev/nodes: primary", true
		}
		return "", "", false
	case OutcomeDenied:
		why, known := denialNotes[d.Reason]
		if !known {
			why = "see the reason"
		}
		if d.Reason == DenyStaleInjection {
			why += staleDetails(d.Message)
		}
		return corev1.EventTypeWarning, "denied a trainer pod: " + why + "; the full message is the pod creation's error (the Job's FailedCreate Event)", true
	}
	return "", "", false
}

// staleFindings are what a stale injection's message may say (Tether's
// own phrases: pkg/trainjob's CheckInjected, sidecar_proof.go), each with
// the fixed words its Event says it in.
var staleFindings = []struct{ phrase, note string }{
	{"names job", "its " + names.PodStatusAnnotation + " names another job or worker"},
	{"is not a native sidecar", "its " + SidecarName + " init container is not a native sidecar"},
	{"is not Tether's completed sidecar", "its " + SidecarName + " init container is a declaration the pod webhook did not complete, or a copy"},
	{"sets a command or args", "its " + SidecarName + " init container sets a command or args, which Tether's sidecar never has"},
}

// staleDetails are the findings of a stale injection's message, in fixed
// words: the message itself quotes the pod's own names, paths and command.
func staleDetails(msg string) string {
	var out string
	for _, f := range staleFindings {
		if strings.Contains(msg, f.phrase) {
			out += "; " + f.note
		}
	}
	if fields := differingFields(msg); len(fields) > 0 {
		out += "; its " + SidecarName + " init container differs from Tether's in " + strings.Join(fields, ", ")
	}
	return out
}

// containerFields are the JSON names of a container's fields: the only
// words of a stale injection's message an Event repeats.
var containerFields = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[corev1.Container]()
	for k := range t.NumField() {
		out[strings.Split(t.Field(k).Tag.Get("json"), ",")[0]] = true
	}
	return out
}()

// differingFields are the container fields a stale injection's message
// names (sidecar_proof.go: "differs from Tether's in command, image"),
// each checked against containerFields: the message also quotes the
// pod's own volume names and paths, which never pass.
func differingFields(msg string) []string {
	_, rest, ok := strings.Cut(msg, "differs from Tether's in ")
	if !ok {
		return nil
	}
	rest, _, _ = strings.Cut(rest, ";")
	var out []string
	for _, f := range strings.Split(rest, ", ") {
		if f = strings.TrimSpace(f); containerFields[f] && !slices.Contains(out, f) && len(out) < len(containerFields) {
			out = append(out, f)
		}
	}
	return out
}

// denialNotes are the fixed notes of the denials (docs/platform.md,
// "Troubleshooting by Event reason", says more).
var denialNotes = map[Reason]string{
	DenyMissingIdentity:    "the TrainJob has no tether.dev/job-id or tether.dev/worker-id (Tether's TrainJob webhook did not stamp it; remove and re-add the label)",
	DenyInvalidSettings:    "a tether.dev/ setting annotation of the TrainJob is invalid",
	DenyNoTrainerContainer: "the pod has no trainer container of the name tether.dev/trainer-container gives (default node)",
	DenyArtifactMount:      "a volume mount of the trainer conflicts with the artifact path",
	DenyNameConflict:       "the pod already has a container, volume or mount of one of Tether's names",
	DenyStaleInjection:     "the pod template carries Tether's sidecar, volumes or tether.dev/status, of another job or not as Tether renders them for this one (remove them)",
	DenyTrainJobLookup:     "Tether could not read the TrainJob; the Job controller retries",
	DenyNodeRank:           "no node rank can be told for the pod, or it is 256 or more (bind with tether.dev/nodes: primary)",
	DenyNoServiceAccount:   "the pod names no serviceAccountName, so it can hold no pod token",
	DenySidecarDeclaration: "the runtime declares the sidecar, but not as Tether can complete it (Kueue mode)",
	DenySidecarResources:   "tether.dev/sidecar-requests or tether.dev/sidecar-limits contradict the sidecar the runtime declares (Kueue mode)",
}

// podEventKey is what the webhook path's Events are limited by.
type podEventKey struct {
	trainJob types.UID
	reason   Reason
}

// podEventLimits are the per-TrainJob, per-reason Event budgets.
type podEventLimits struct {
	mu     sync.Mutex
	keys   map[podEventKey]*rate.Limiter
	shared *rate.Limiter
}

// allow spends one Event of key's budget at now.
func (l *podEventLimits) allow(key podEventKey, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[podEventKey]*rate.Limiter{}
		l.shared = rate.NewLimiter(rate.Every(podEventEvery), podEventBurst)
	}
	lim, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= maxPodEventKeys {
			for k, v := range l.keys {
				if v.TokensAt(now) >= podEventBurst {
					delete(l.keys, k)
				}
			}
		}
		if len(l.keys) >= maxPodEventKeys {
			return l.shared.AllowN(now, 1)
		}
		lim = rate.NewLimiter(rate.Every(podEventEvery), podEventBurst)
		l.keys[key] = lim
	}
	return lim.AllowN(now, 1)
}
