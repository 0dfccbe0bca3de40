package keys

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// JobIDIndex indexes WorkerBindings by spec.jobID: the binding controller
// finds a job id's other holders by it, the upload sweeper a job's bindings.
const JobIDIndex = "spec.jobID"

// IndexJobID is JobIDIndex's index function.
func IndexJobID(o client.Object) []string {
	return []string{o.(*tetherv1.WorkerBinding).Spec.JobID}
}

// SameName enqueues the object's own namespace/name: a TrainJob's event
// for its WorkerBinding, or a binding's for its TrainJob.
func SameName(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}
