package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

// Config is what the service submits and where it puts results.
type Config struct {
	Namespace string
	// Queue is the Kueue LocalQueue (label kueue.x-k8s.io/queue-name).
	Queue string
	// Runtime is the ClusterTrainingRuntime the jobs use.
	Runtime string
	// Job and CancelJob name the job that runs to completion and the one
	// the service cancels.
	Job, CancelJob string
	// Annotations go on both TrainJobs (Tether's per-job settings).
	Annotations map[string]string
	// OutDir receives the first job's artifacts.
	OutDir string
	// Timeout bounds each wait.
	Timeout time.Duration
}

// Result is what the run saw.
type Result struct {
	Artifacts  []client.Artifact
	Downloaded []string
	Phases     []tetherv1.WorkerBindingPhase
	Cancelled  *tetherv1.WorkerBinding
}

// TrainJob builds a bound TrainJob in cfg's queue.
func TrainJob(cfg Config, name string) *unstructured.Unstructured {
	ann := map[string]any{}
	for k, v := range cfg.Annotations {
		ann[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"name": name, "namespace": cfg.Namespace, "annotations": ann,
			"labels": map[string]any{"tether.dev/bind": "true", "kueue.x-k8s.io/queue-name": cfg.Queue}},
		"spec": map[string]any{"runtimeRef": map[string]any{"name": cfg.Runtime, "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"}},
	}}
}

// Run runs the service once, printing what it does to out.
func Run(ctx context.Context, c *client.Client, cfg Config, out io.Writer) (*Result, error) {
	res := &Result{}
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%s] %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}

	if err := c.Kube().Create(ctx, TrainJob(cfg, cfg.Job)); err != nil {
		return nil, fmt.Errorf("creating TrainJob %s: %w", cfg.Job, err)
	}
	say("submitted TrainJob %s/%s to queue %s", cfg.Namespace, cfg.Job, cfg.Queue)
	if err := waitAdmitted(ctx, c, cfg, cfg.Job); err != nil {
		return nil, err
	}
	say("Kueue admitted %s", cfg.Job)

	// Follow the binding through its phases.
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var last tetherv1.WorkerBindingPhase
	wb, err := c.WaitUntil(wctx, cfg.Namespace, cfg.Job, func(wb *tetherv1.WorkerBinding) (bool, error) {
		if p := wb.Status.Phase; p != last {
			last = p
			res.Phases = append(res.Phases, p)
			say("binding %s: %s (%s)", wb.Name, p, wb.Status.Reason)
		}
		if wb.Status.Phase == tetherv1.PhaseFailed {
			return false, &client.PhaseError{Binding: wb.Name, Want: tetherv1.PhaseSucceeded, Got: wb.Status.Phase, Reason: wb.Status.Reason, Message: wb.Status.Message}
		}
		return wb.Status.Phase == tetherv1.PhaseSucceeded, nil
	})
	if err != nil {
		return nil, err
	}

	// Its verified artifacts, downloaded with their MD5 checked.
	if res.Artifacts, err = c.Artifacts(ctx, wb); err != nil {
		return nil, err
	}
	for _, a := range res.Artifacts {
		say("artifact node=%d %s %d bytes md5=%s verified=%v", a.Rank, a.Path, a.Size, a.MD5, a.Verified)
		if !a.Verified {
			continue
		}
		dest := filepath.Join(cfg.OutDir, filepath.FromSlash(a.Path))
		if err := os.MkdirAll(filepath.Dir(dest), 0o750); err != nil {
			return nil, err
		}
		if _, err := c.DownloadFile(ctx, wb, a.Path, dest); err != nil {
			return nil, err
		}
		res.Downloaded = append(res.Downloaded, dest)
	}
	say("downloaded %d verified artifacts into %s", len(res.Downloaded), cfg.OutDir)

	// A second job, cancelled after a flush: what it wrote so far is kept.
	if err := c.Kube().Create(ctx, TrainJob(cfg, cfg.CancelJob)); err != nil {
		return nil, fmt.Errorf("creating TrainJob %s: %w", cfg.CancelJob, err)
	}
	say("submitted TrainJob %s/%s", cfg.Namespace, cfg.CancelJob)
	if err := waitAdmitted(ctx, c, cfg, cfg.CancelJob); err != nil {
		return nil, err
	}
	wctx2, cancel2 := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel2()
	if _, err := c.WaitUntil(wctx2, cfg.Namespace, cfg.CancelJob, func(wb *tetherv1.WorkerBinding) (bool, error) {
		return wb.Status.Phase == tetherv1.PhaseRunning && wb.Status.Progress != nil, nil
	}); err != nil {
		return nil, err
	}
	say("%s is running; flushing", cfg.CancelJob)
	id, err := c.Send(wctx2, cfg.Namespace, cfg.CancelJob, client.Flush)
	if err != nil {
		return nil, err
	}
	st, err := c.WaitCommand(wctx2, cfg.Namespace, cfg.CancelJob, id)
	if err != nil {
		return nil, err
	}
	say("flush:%s acknowledged by nodes %v", id, st.AckedNodes)
	// Cancel: a final flush, then the job stopped with this service's own
	// credentials (its Kueue Workload deactivated: Kueue evicts it and
	// frees the quota).
	cres, err := c.Cancel(wctx2, cfg.Namespace, cfg.CancelJob, client.CancelOptions{Timeout: cfg.Timeout})
	if err != nil {
		return nil, err
	}
	say("cancel:%s acknowledged by nodes %v; %s", cres.CommandID, cres.Command.AckedNodes, cres.Stop)
	if res.Cancelled, err = c.WaitFor(wctx2, cfg.Namespace, cfg.CancelJob, tetherv1.PhaseFailed); err != nil {
		return nil, err
	}
	say("%s ended %s (%s): %s", cfg.CancelJob, res.Cancelled.Status.Phase, res.Cancelled.Status.Reason, res.Cancelled.Status.Message)
	return res, nil
}

// waitAdmitted waits until Kueue unsuspends the TrainJob.
func waitAdmitted(ctx context.Context, c *client.Client, cfg Config, name string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for {
		tj := &unstructured.Unstructured{}
		tj.SetAPIVersion("trainer.kubeflow.org/v1alpha1")
		tj.SetKind("TrainJob")
		if err := c.Kube().Get(ctx, types.NamespacedName{Namespace: cfg.Namespace, Name: name}, tj); err != nil {
			return fmt.Errorf("waiting for Kueue to admit %s: %w", name, err)
		}
		if s, _, _ := unstructured.NestedBool(tj.Object, "spec", "suspend"); !s {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was not admitted by Kueue within %s: is the queue %q's ClusterQueue out of quota?", name, cfg.Timeout, cfg.Queue)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
