package testobj

import (
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
)

// TrainJobWrapper builds a Trainer v2.3 TrainJob.
type TrainJobWrapper struct{ trainer.TrainJob }

// MakeTrainJob starts a TrainJob referring to the torch-distributed runtime.
func MakeTrainJob(name, namespace string) *TrainJobWrapper {
	return &TrainJobWrapper{trainer.TrainJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: "TrainJob"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
			Name: "torch-distributed", APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To("ClusterTrainingRuntime"),
		}},
	}}
}

// Obj returns the built object.
func (w *TrainJobWrapper) Obj() *trainer.TrainJob { return &w.TrainJob }

// Label sets a label.
func (w *TrainJobWrapper) Label(k, v string) *TrainJobWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

// Annotation sets an annotation.
func (w *TrainJobWrapper) Annotation(k, v string) *TrainJobWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

// Bound adds the bind label.
func (w *TrainJobWrapper) Bound() *TrainJobWrapper {
	return w.Label(names.BindLabel, names.BindValue)
}

// Queue adds Kueue's queue-name label.
func (w *TrainJobWrapper) Queue(q string) *TrainJobWrapper {
	return w.Label("kueue.x-k8s.io/queue-name", q)
}

// NumNodes sets spec.trainer.numNodes.
func (w *TrainJobWrapper) NumNodes(n int32) *TrainJobWrapper {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	w.Spec.Trainer.NumNodes = ptr.To(n)
	return w
}

// Image sets spec.trainer.image.
func (w *TrainJobWrapper) Image(image string) *TrainJobWrapper {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	w.Spec.Trainer.Image = ptr.To(image)
	return w
}

// Suspend sets spec.suspend.
func (w *TrainJobWrapper) Suspend(s bool) *TrainJobWrapper {
	w.Spec.Suspend = ptr.To(s)
	return w
}

// Runtime sets spec.runtimeRef.name (a ClusterTrainingRuntime).
func (w *TrainJobWrapper) Runtime(name string) *TrainJobWrapper {
	w.Spec.RuntimeRef.Name = name
	return w
}

// Command sets spec.trainer.command.
func (w *TrainJobWrapper) Command(cmd ...string) *TrainJobWrapper {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	w.Spec.Trainer.Command = cmd
	return w
}

// Args sets spec.trainer.args.
func (w *TrainJobWrapper) Args(args ...string) *TrainJobWrapper {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	w.Spec.Trainer.Args = args
	return w
}

// ResourcesPerNode sets spec.trainer.resourcesPerNode's requests (and
// equal limits).
func (w *TrainJobWrapper) ResourcesPerNode(list corev1.ResourceList) *TrainJobWrapper {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	w.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: list, Limits: list}
	return w
}

// NodePatch adds a runtime patch (Trainer v2.2+, manager "tether.dev/test")
// to the pods of replicated job "node": volumes, and mounts or a security
// context for its containers.
func (w *TrainJobWrapper) NodePatch(spec trainer.PodSpecPatch) *TrainJobWrapper {
	w.Spec.RuntimePatches = append(w.Spec.RuntimePatches, trainer.RuntimePatch{
		Manager: "tether.dev/test",
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{
			Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
				Name: "node",
				Template: &trainer.JobTemplatePatch{Spec: &trainer.JobSpecPatch{
					Template: &trainer.PodTemplatePatch{Spec: &spec},
				}},
			}}},
		}},
	})
	return w
}

// PriorityClass sets Kueue's workload priority class label.
func (w *TrainJobWrapper) PriorityClass(name string) *TrainJobWrapper {
	return w.Label("kueue.x-k8s.io/priority-class", name)
}
