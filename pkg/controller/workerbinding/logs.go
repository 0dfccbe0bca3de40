package workerbinding

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// archiveLogs archives the trainer logs of the binding's ended trainer
// instances onto its status, and returns when to try again a log that
// could not be copied (0: none to retry).
func (r *Reconciler) archiveLogs(ctx context.Context, wb *tetherv1.WorkerBinding, pods []corev1.Pod) time.Duration {
	_, retry, err := r.Logs.Archive(ctx, &wb.Status, wb.Spec.JobID, lifecycle.Settings(&wb.Spec).TrainerContainer, pods)
	if err != nil {
		// Bounded: each log is retried with backoff, then given up (said so).
		logf.FromContext(ctx).Info("trainer log not archived", "error", err.Error(), "retryIn", retry.String())
		return retry
	}
	return 0
}
