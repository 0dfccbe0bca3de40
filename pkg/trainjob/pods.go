package trainjob

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Labels that Trainer (through JobSet and Job) puts on the pods it creates.
const (
	JobSetNameLabel        = "jobset.sigs.k8s.io/jobset-name"
	ReplicatedJobNameLabel = "jobset.sigs.k8s.io/replicatedjob-name"
	JobIndexLabel          = "jobset.sigs.k8s.io/job-index"
	CompletionIndexLabel   = "batch.kubernetes.io/job-completion-index"
	// TrainerReplicatedJob is the replicated job that runs the trainer in
	// every Trainer v2 runtime; the initializers and launcher are others.
	TrainerReplicatedJob = "node"
)

// A trainer pod is a pod of a JobSet's trainer replicated job; its JobSet is
// named after its TrainJob. The three forms below say the same thing for the
// pod webhook (one pod), the controller (a List) and the control plane's
// cache (a selector).

// IsTrainerPod reports whether pod belongs to a JobSet's trainer replicated
// job, and returns the JobSet (= TrainJob) name.
func IsTrainerPod(pod *corev1.Pod) (trainJob string, ok bool) {
	name := pod.Labels[JobSetNameLabel]
	return name, name != "" && pod.Labels[ReplicatedJobNameLabel] == TrainerReplicatedJob
}

// TrainerPodLabels are the labels of the trainer pods of TrainJob trainJob.
func TrainerPodLabels(trainJob string) map[string]string {
	return map[string]string{JobSetNameLabel: trainJob, ReplicatedJobNameLabel: TrainerReplicatedJob}
}

// TrainerPodSelector selects the trainer pods of every TrainJob.
func TrainerPodSelector() labels.Selector {
	req, err := labels.NewRequirement(ReplicatedJobNameLabel, selection.Equals, []string{TrainerReplicatedJob})
	if err != nil {
		panic(err) // constant, valid input
	}
	return labels.NewSelector().Add(*req)
}

// IsPrimaryNode reports whether pod is node rank 0 (see Rank); a pod
// whose rank cannot be told is not.
func IsPrimaryNode(pod *corev1.Pod) bool {
	r, err := Rank(pod)
	return err == nil && r == 0
}
