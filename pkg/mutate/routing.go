package mutate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// Routing: only a bound job's trainer pods may reach the pod webhook, so that
// an outage of Tether never blocks the pods of a job that did not opt in. The
// pod webhook's objectSelector asks for RouteLabel on the pod. No Trainer
// release puts TrainJob labels on pods, so the label travels in two steps,
// each by a webhook scoped to bound objects only:
//
//	TrainJob webhook: TrainJob ─► label on its JobSet (TrainerShape says how)
//	JobSet webhook:   JobSet labeled ─► label on the trainer pod template
//	pod webhook:      pods with the label ─► sidecar
const (
	// RouteLabel is put on bound jobs' JobSets and trainer pod templates; it
	// is the bind label itself, so the three webhooks select on one key.
	RouteLabel = names.BindLabel
	RouteValue = names.BindValue
)

// trainJobRouting is the part of a TrainJob's spec routing reads, in every
// Trainer v2 shape.
type trainJobRouting struct {
	Spec struct {
		Suspend        *bool             `json:"suspend,omitempty"`
		Labels         map[string]string `json:"labels,omitempty"`
		RuntimePatches []map[string]any  `json:"runtimePatches,omitempty"`
		// PodTemplateOverrides is Trainer v2.1's (v2.0's podSpecOverrides
		// have no metadata, so cannot label a pod).
		PodTemplateOverrides []map[string]any `json:"podTemplateOverrides,omitempty"`
	} `json:"spec"`
}

func (r *trainJobRouting) suspended() bool {
	return r != nil && r.Spec.Suspend != nil && *r.Spec.Suspend
}

// routeTrainJob returns the patch that makes (bound) or stops making (not
// bound) obj's JobSet carry RouteLabel, and warnings for the API client.
// old is nil at CREATE. It is idempotent: on its own output it returns
// nothing. The error refuses a bound TrainJob whose other runtime patches
// would take the label off again (routingConflicts).
func routeTrainJob(shape TrainerShape, obj, old *trainJobRouting, bound bool) ([]jsonpatch.JsonPatchOperation, []string, error) {
	switch shape {
	case ShapeSpecLabels:
		if conflicts := overrideConflicts(obj.Spec.PodTemplateOverrides); bound && len(conflicts) > 0 &&
			(old == nil || !slices.Equal(conflicts, overrideConflicts(old.Spec.PodTemplateOverrides))) {
			return nil, nil, conflictError(conflicts)
		}
		return routeBySpecLabels(obj, bound), nil, nil
	case ShapeRuntimePatches:
		if bound {
			if err := refuseRoutingConflicts(obj, old); err != nil {
				return nil, nil, err
			}
		}
		ops, warnings := routeByRuntimePatch(obj, old, bound)
		return ops, warnings, nil
	}
	return nil, nil, nil
}

// refuseRoutingConflicts refuses a bound TrainJob with a runtime patch
// other than Tether's that sets RouteLabel to anything but RouteValue:
// Trainer merges the patches' JobSet labels in list order (v2.3.0
// newRuntimeInfo), so such an entry after Tether's unlabels the JobSet and
// its pods never reach the pod webhook and run without the sidecar; one on
// the trainer pod template is refused too, for the same intent, though the
// JobSet webhook would put the label back. Where it is does not matter: the label is Tether's alone.
// A conflict old already had (stored before this check existed) is not
// refused again, so that the object's other updates and its deletion go on;
// its pods are reported as PodsNotInjected.
func refuseRoutingConflicts(obj, old *trainJobRouting) error {
	conflicts := routingConflicts(obj.Spec.RuntimePatches)
	if len(conflicts) == 0 {
		return nil
	}
	if old != nil && slices.Equal(conflicts, routingConflicts(old.Spec.RuntimePatches)) {
		return nil
	}
	return conflictError(conflicts)
}

func conflictError(conflicts []string) error {
	return fmt.Errorf("TrainJob is labeled %s=%s, but %s: its pods would not carry the label that routes them to Tether "+
		"and would run without the sidecar; remove %s from there (the label is Tether's: it sets it itself), "+
		"or remove the %s label from the TrainJob to run it unbound",
		RouteLabel, RouteValue, strings.Join(conflicts, "; "), RouteLabel, RouteLabel)
}

// overrideConflicts describes each Trainer v2.1 podTemplateOverrides entry
// targeting the trainer job that sets RouteLabel to another value.
func overrideConflicts(overrides []map[string]any) []string {
	var out []string
	for k, o := range overrides {
		targets, _ := o["targetJobs"].([]any)
		if !slices.ContainsFunc(targets, func(t any) bool { return dig(t, "name") == trainjob.TrainerReplicatedJob }) {
			continue
		}
		if v, conflict := conflictingLabel(dig(o, "metadata", "labels")); conflict {
			out = append(out, fmt.Sprintf("spec.podTemplateOverrides[%d] sets the label %s of replicated job %s's pods to %s", k, RouteLabel, trainjob.TrainerReplicatedJob, v))
		}
	}
	return out
}

// routingConflicts describes each runtime patch, other than Tether's, that
// sets RouteLabel to another value than RouteValue on the JobSet or on the
// trainer pod template.
func routingConflicts(patches []map[string]any) []string {
	var out []string
	for k, p := range patches {
		if p["manager"] == names.RuntimePatchManager {
			continue
		}
		manager, _ := p["manager"].(string)
		where := fmt.Sprintf("runtime patch %d (manager %q)", k, manager)
		if v, conflict := conflictingLabel(dig(p, "trainingRuntimeSpec", "template", "metadata", "labels")); conflict {
			out = append(out, fmt.Sprintf("%s sets the JobSet's label %s to %s", where, RouteLabel, v))
		}
		rjs, _ := dig(p, "trainingRuntimeSpec", "template", "spec", "replicatedJobs").([]any)
		for _, rj := range rjs {
			if dig(rj, "name") != trainjob.TrainerReplicatedJob {
				continue
			}
			if v, conflict := conflictingLabel(dig(rj, "template", "spec", "template", "metadata", "labels")); conflict {
				out = append(out, fmt.Sprintf("%s sets the label %s of replicated job %s's pod template to %s", where, RouteLabel, trainjob.TrainerReplicatedJob, v))
			}
		}
	}
	return out
}

// conflictingLabel reports whether labels (a JSON object) sets RouteLabel to
// anything but RouteValue (null included: a merge that deletes it), and the
// value as JSON.
func conflictingLabel(labels any) (string, bool) {
	m, _ := labels.(map[string]any)
	v, set := m[RouteLabel]
	if !set || v == RouteValue {
		return "", false
	}
	b, _ := json.Marshal(v)
	return string(b), true
}

// routeBySpecLabels: Trainer v2.0/v2.1 copy spec.labels onto the JobSet and
// let them change at any time (a running JobSet's pod template is kept by the
// JobSet webhook, see routeJobSet).
func routeBySpecLabels(obj *trainJobRouting, bound bool) []jsonpatch.JsonPatchOperation {
	_, has := obj.Spec.Labels[RouteLabel]
	switch {
	case bound && obj.Spec.Labels[RouteLabel] == RouteValue:
		return nil
	case bound && obj.Spec.Labels == nil:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/labels", Value: map[string]string{RouteLabel: RouteValue}}}
	case bound:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/labels/" + escapeJSONPointer(RouteLabel), Value: RouteValue}}
	case has:
		return []jsonpatch.JsonPatchOperation{{Operation: "remove", Path: "/spec/labels/" + escapeJSONPointer(RouteLabel)}}
	}
	return nil
}

// routeByRuntimePatch: Trainer v2.2+ merge each runtime patch's
// template.metadata.labels into the JobSet's labels, and refuse an update
// that changes runtimePatches unless the TrainJob is suspended after it
// (v2.2.0; v2.3.0: before or after) and its JobSet has no active Job
// (checkRuntimePatchesImmutability). A refused update would be someone
// else's (Kueue admitting or preempting the job), so Tether changes its entry
// only at CREATE and in updates that keep the TrainJob suspended.
func routeByRuntimePatch(obj, old *trainJobRouting, bound bool) ([]jsonpatch.JsonPatchOperation, []string) {
	idx := -1
	for k, p := range obj.Spec.RuntimePatches {
		if p["manager"] == names.RuntimePatchManager {
			idx = k
		}
	}
	mayChange := old == nil || old.suspended() && obj.suspended()
	switch {
	case bound && idx >= 0 && routesJobSet(obj.Spec.RuntimePatches[idx]):
		return nil, nil
	case bound && !mayChange:
		return nil, []string{fmt.Sprintf("TrainJob is bound but not routed to Tether: Trainer lets spec.runtimePatches change only while the TrainJob "+
			"stays suspended, so Tether could not add its entry in this update; pods its Jobs create without it run without the sidecar "+
			"(reported as %s). Bind TrainJobs at creation or while queued (suspended), or update a suspended one again", "PodsNotInjected")}
	case bound && idx >= 0:
		// Someone changed Tether's entry: put it back.
		return []jsonpatch.JsonPatchOperation{{Operation: "replace", Path: fmt.Sprintf("/spec/runtimePatches/%d", idx), Value: routingRuntimePatch()}}, nil
	case bound && len(obj.Spec.RuntimePatches) == 0:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/runtimePatches", Value: []any{routingRuntimePatch()}}}, nil
	case bound:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/runtimePatches/-", Value: routingRuntimePatch()}}, nil
	case idx >= 0 && mayChange:
		return []jsonpatch.JsonPatchOperation{{Operation: "remove", Path: fmt.Sprintf("/spec/runtimePatches/%d", idx)}}, nil
	}
	return nil, nil
}

// routingRuntimePatch is Tether's runtime patch: the route label on the JobSet.
func routingRuntimePatch() map[string]any {
	return map[string]any{
		"manager": names.RuntimePatchManager,
		"trainingRuntimeSpec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"labels": map[string]any{RouteLabel: RouteValue},
		}}},
	}
}

// routesJobSet reports whether a runtime patch labels the JobSet with RouteLabel.
func routesJobSet(p map[string]any) bool {
	labels, _ := dig(p, "trainingRuntimeSpec", "template", "metadata", "labels").(map[string]any)
	return labels[RouteLabel] == RouteValue
}

// dig returns the value at path in nested JSON objects, or nil.
func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// jobSetRouting is the part of a JobSet routing reads.
type jobSetRouting struct {
	Metadata struct {
		Labels map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Suspend        *bool            `json:"suspend,omitempty"`
		ReplicatedJobs []map[string]any `json:"replicatedJobs,omitempty"`
	} `json:"spec"`
}

func (j *jobSetRouting) suspended() bool { return j != nil && j.Spec.Suspend != nil && *j.Spec.Suspend }

// podTemplateOf is the pod template of the replicated job named name, or nil.
func (j *jobSetRouting) podTemplateOf(name string) (int, map[string]any) {
	for k, rj := range j.Spec.ReplicatedJobs {
		if rj["name"] == name {
			t, _ := dig(rj, "template", "spec", "template").(map[string]any)
			return k, t
		}
	}
	return -1, nil
}

func templateRouted(t map[string]any) bool {
	labels, _ := dig(t, "metadata", "labels").(map[string]any)
	return labels[RouteLabel] == RouteValue
}

// routeJobSet returns the patch that puts RouteLabel on the trainer pod
// template of obj (a JobSet at CREATE, or at UPDATE from old), and only
// ever adds it:
//   - at CREATE, when the JobSet carries RouteLabel;
//   - at UPDATE, when the old template had it (Trainer applies its JobSet
//     with server-side apply, which drops the label this webhook added at
//     CREATE; putting it back keeps the template as it was), or when the
//     JobSet is labeled and suspended before or after the update: JobSet's
//     own webhook refuses any other pod template change (v0.12.0
//     ValidateUpdate), and a refused update would block Trainer's reconcile.
func routeJobSet(obj, old *jobSetRouting) []jsonpatch.JsonPatchOperation {
	bound := obj.Metadata.Labels[RouteLabel] == RouteValue
	k, t := obj.podTemplateOf(trainjob.TrainerReplicatedJob)
	if t == nil || templateRouted(t) {
		return nil
	}
	want := bound
	if old != nil {
		_, ot := old.podTemplateOf(trainjob.TrainerReplicatedJob)
		want = templateRouted(ot) || bound && (old.suspended() || obj.suspended())
	}
	if !want {
		return nil
	}
	base := fmt.Sprintf("/spec/replicatedJobs/%d/template/spec/template/metadata", k)
	meta, _ := t["metadata"].(map[string]any)
	switch {
	case meta == nil:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: base, Value: map[string]any{"labels": map[string]string{RouteLabel: RouteValue}}}}
	case meta["labels"] == nil:
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: base + "/labels", Value: map[string]string{RouteLabel: RouteValue}}}
	}
	return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: base + "/labels/" + escapeJSONPointer(RouteLabel), Value: RouteValue}}
}
