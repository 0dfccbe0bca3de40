package mutate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// TestPodEventsCarryNoTextOfTheRequest: a review posted to the webhook port
// by a caller the API server did not send (here: a pod name, a container
// name and an annotation of the caller's choosing, denied as a name
// conflict and as a stale injection) makes Events with Tether's fixed
// wording only, and no more than the per-TrainJob budget of them.
func TestPodEventsCarryNoTextOfTheRequest(t *testing.T) {
	const planted = "CALL-EVIL-HELPDESK"
	rec := events.NewFakeRecorder(1000)
	h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(t, "testdata/pod/sidecar-name-conflict.trainjob.yaml"), Recorder: rec}
	var pod map[string]any
	if err := json.Unmarshal(readJSON(t, "testdata/pod/sidecar-name-conflict.in.yaml"), &pod); err != nil {
		t.Fatal(err)
	}
	md := pod["metadata"].(map[string]any)
	delete(md, "generateName")
	md["name"] = "x-" + strings.ToLower(planted)
	md["annotations"].(map[string]any)["note"] = planted
	raw := mustJSON(t, pod)

	const sent = 3 * podEventBurst
	for range sent {
		if _, d := admitPod(t, h, raw); d.Outcome != OutcomeDenied {
			t.Fatalf("decision %s/%s, want denied", d.Outcome, d.Reason)
		}
	}
	var notes []string
	for len(rec.Events) > 0 {
		notes = append(notes, <-rec.Events)
	}
	if len(notes) == 0 || len(notes) > podEventBurst {
		t.Fatalf("%d Events for %d reviews of one TrainJob, want 1..%d", len(notes), sent, podEventBurst)
	}
	for _, n := range notes {
		if strings.Contains(strings.ToLower(n), strings.ToLower(planted)) || !strings.Contains(n, "denied a trainer pod: ") {
			t.Fatalf("Event %q: want Tether's fixed wording, nothing of the request", n)
		}
	}
	t.Logf("%d reviews, %d Events: %s", sent, len(notes), notes[0])
}

// TestPodEventLimits: a budget per TrainJob and reason, refilled over time,
// and bounded in memory.
func TestPodEventLimits(t *testing.T) {
	var l podEventLimits
	now := time.Unix(1_800_000_000, 0)
	a, b := podEventKey{trainJob: "a", reason: DenyNodeRank}, podEventKey{trainJob: "a", reason: DenyNameConflict}
	for k := range podEventBurst {
		if !l.allow(a, now) {
			t.Fatalf("Event %d of the burst refused", k)
		}
	}
	if l.allow(a, now) {
		t.Fatal("Event past the burst allowed")
	}
	if !l.allow(b, now) {
		t.Fatal("another reason's Event refused: each reason has its own budget")
	}
	if !l.allow(a, now.Add(podEventEvery)) {
		t.Fatal("no Event allowed after the refill interval")
	}
	for k := range maxPodEventKeys + 10 {
		l.allow(podEventKey{trainJob: types.UID(fmt.Sprint("j", k)), reason: DenyNodeRank}, now)
	}
	if n := len(l.keys); n > maxPodEventKeys {
		t.Fatalf("%d limiters held, want at most %d", n, maxPodEventKeys)
	}
}

// TestStaleInjectionEventNamesOnlyContainerFields: of a stale injection's
// message, the Event repeats its findings in Tether's words and the
// container fields that differ, never the pod's own names, paths and
// command the message quotes.
func TestStaleInjectionEventNamesOnlyContainerFields(t *testing.T) {
	msg := `pod already has a container named "tether-sidecar" and a tether.dev/status annotation, but is not this job's injection: ` +
		`it is not the sidecar Tether injects for this pod: it mounts volume "v" at /x differs from Tether's in CALL-US, image; ` +
		`init container tether-sidecar differs from Tether's in command, image; remove Tether's init container`
	_, note, _ := podEventNote(Decision{Outcome: OutcomeDenied, Reason: DenyStaleInjection, Message: msg}, &corev1.Pod{})
	if strings.Contains(note, "CALL-US") || strings.Contains(note, "/x") || !strings.Contains(note, "differs from Tether's in image") {
		t.Fatalf("note %q: want only container field names of the message", note)
	}
	msg = `pod already has a container named "tether-sidecar" and a tether.dev/status annotation, but is not this job's injection: ` +
		`init container tether-sidecar sets a command or args (CALL-US), which Tether's sidecar never has: it is not Tether's`
	if _, note, _ = podEventNote(Decision{Outcome: OutcomeDenied, Reason: DenyStaleInjection, Message: msg}, &corev1.Pod{}); strings.Contains(note, "CALL-US") ||
		!strings.Contains(note, "sets a command or args, which") {
		t.Fatalf("note %q: want the finding in Tether's words, without the pod's command", note)
	}
	if got := differingFields("init container tether-sidecar differs from Tether's in command, image"); !slices.Equal(got, []string{"command", "image"}) {
		t.Fatalf("differingFields = %q, want [command image]", got)
	}
}
