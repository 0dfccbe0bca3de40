package trainjob

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels and annotations JobSet puts on the pods it creates, beyond the
// names in pods.go.
const (
	// ReplicatedJobReplicasAnnotation is how many Jobs the pod's
	// replicated job has.
	ReplicatedJobReplicasAnnotation = "jobset.sigs.k8s.io/replicatedjob-replicas"
	// RestartAttemptLabel is the JobSet restart attempt that created the
	// pod: 0 first, +1 each time a failurePolicy rule recreates every pod.
	RestartAttemptLabel = "jobset.sigs.k8s.io/restart-attempt"
)

// JobSetGVK is the JobSet Trainer creates for a TrainJob, with its name.
var JobSetGVK = schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}

// Rank is a trainer pod's node rank. Trainer's runtimes run every node as
// one indexed Job (one replica of the trainer replicated job), so the rank
// is the pod's completion index; a replicated job of several Jobs with one
// pod each is ranked by job index. Several indexed Jobs of several pods
// have no single rank: an error says so.
func Rank(pod *corev1.Pod) (int, error) {
	idx := pod.Labels[CompletionIndexLabel]
	if idx == "" {
		idx = pod.Annotations[CompletionIndexLabel]
	}
	jobIdx := pod.Labels[JobIndexLabel]
	num := func(name, v string) (int, error) {
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("pod %s has %s=%q, which is not a non-negative integer", pod.Name, name, v)
		}
		return n, nil
	}
	c, err := num(CompletionIndexLabel, idx)
	if err != nil {
		return 0, err
	}
	j, err := num(JobIndexLabel, jobIdx)
	if err != nil {
		return 0, err
	}
	replicas, err := num(ReplicatedJobReplicasAnnotation, pod.Annotations[ReplicatedJobReplicasAnnotation])
	if err != nil {
		return 0, err
	}
	switch {
	case j == 0 && replicas <= 1:
		return c, nil
	case c == 0 && idx == "":
		return j, nil
	default:
		return 0, fmt.Errorf("pod %s is completion index %d of Job %d of replicated job %q, which has %d Jobs: "+
			"Tether ranks nodes within one indexed Job (Trainer's runtimes) or one pod per Job", pod.Name, c, j, TrainerReplicatedJob, replicas)
	}
}

// RestartAttempt is the JobSet restart attempt that created pod (0 when the
// label is absent or malformed).
func RestartAttempt(pod *corev1.Pod) int32 {
	v := pod.Labels[RestartAttemptLabel]
	if v == "" {
		v = pod.Annotations[RestartAttemptLabel]
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// NodeCount reads the TrainJob's JobSet (named after it) and returns how
// many trainer nodes it runs: the trainer replicated job's replicas times
// each Job's completions (parallelism when completions is unset).
func NodeCount(ctx context.Context, r client.Reader, key types.NamespacedName) (int, error) {
	js := &unstructured.Unstructured{}
	js.SetGroupVersionKind(JobSetGVK)
	if err := r.Get(ctx, key, js); err != nil {
		return 0, err
	}
	return NodeCountOf(js)
}

// NodeCountOf is NodeCount of a JobSet already read.
func NodeCountOf(js *unstructured.Unstructured) (int, error) {
	rjs, _, err := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	if err != nil {
		return 0, fmt.Errorf("JobSet %s: spec.replicatedJobs: %v", js.GetName(), err)
	}
	for _, item := range rjs {
		rj, ok := item.(map[string]any)
		if !ok || rj["name"] != TrainerReplicatedJob {
			continue
		}
		replicas := int64(1)
		if v, found, err := unstructured.NestedInt64(rj, "replicas"); err == nil && found {
			replicas = v
		}
		perJob := int64(1)
		if v, found, err := unstructured.NestedInt64(rj, "template", "spec", "completions"); err == nil && found {
			perJob = v
		} else if v, found, err := unstructured.NestedInt64(rj, "template", "spec", "parallelism"); err == nil && found {
			perJob = v
		}
		if replicas < 1 || perJob < 1 {
			return 0, fmt.Errorf("JobSet %s: replicated job %q runs %d Jobs of %d pods", js.GetName(), TrainerReplicatedJob, replicas, perJob)
		}
		return int(replicas * perJob), nil
	}
	return 0, fmt.Errorf("JobSet %s has no replicated job %q", js.GetName(), TrainerReplicatedJob)
}
