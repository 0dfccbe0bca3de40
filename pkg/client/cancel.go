package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// DefaultCancelTimeout is how long Cancel waits for the flush's
// acknowledgement unless told otherwise.
const DefaultCancelTimeout = 2 * time.Minute

// CancelOptions configure Cancel.
type CancelOptions struct {
	// Timeout bounds the wait for every node's acknowledgement of the
	// final flush (0: DefaultCancelTimeout). The job is stopped when it
	// passes too.
	Timeout time.Duration
	// Delete deletes the TrainJob instead of stopping it in a way that can
	// be undone.
	Delete bool
}

// CancelResult is what Cancel did.
type CancelResult struct {
	// CommandID is the cancel command's id.
	CommandID string
	// Command is the command's status once every node acknowledged it (nil
	// when the flush failed or timed out: FlushError says why).
	Command    *tetherv1.CommandStatus
	FlushError error
	// Stop is how the job was stopped.
	Stop Stop
	// Unverified, when the flush failed, names up to 10 files the binding
	// does not list as verified (status.artifacts.missing, else the nodes'
	// missing files); UnverifiedCount counts them all, and UnverifiedSummary
	// says which nodes' manifests are not verified, and why.
	Unverified        []string
	UnverifiedCount   int32
	UnverifiedSummary string
}

// Stop is how Cancel stops a job, with the caller's own credentials.
type Stop struct {
	// Action is StopDeactivateWorkload, StopSuspendTrainJob or
	// StopDeleteTrainJob.
	Action string
	// Verb and Resource are the permission the stop needs (patch
	// workloads.kueue.x-k8s.io, patch or delete trainjobs.trainer.kubeflow.org),
	// in Namespace; Name is the object's name.
	Verb, Resource, Namespace, Name string
}

// How a job is stopped.
const (
	// StopDeactivateWorkload sets the Kueue Workload's spec.active to
	// false: Kueue evicts it, suspends the TrainJob and frees its quota.
	// Setting it true again resumes the job.
	StopDeactivateWorkload = "DeactivateWorkload"
	// StopSuspendTrainJob sets the TrainJob's spec.suspend to true (a job
	// Kueue does not manage). Setting it false resumes the job.
	StopSuspendTrainJob = "SuspendTrainJob"
	// StopDeleteTrainJob deletes the TrainJob (CancelOptions.Delete); its
	// binding goes with it.
	StopDeleteTrainJob = "DeleteTrainJob"
)

func (s Stop) String() string {
	switch s.Action {
	case StopDeactivateWorkload:
		return fmt.Sprintf("Kueue Workload %s/%s deactivated (spec.active=false): Kueue evicts it and frees its quota", s.Namespace, s.Name)
	case StopSuspendTrainJob:
		return fmt.Sprintf("TrainJob %s/%s suspended (spec.suspend=true)", s.Namespace, s.Name)
	}
	return fmt.Sprintf("TrainJob %s/%s deleted", s.Namespace, s.Name)
}

// PermissionError is a permission the caller lacks to stop the job.
// Cancel checks before it sends anything, so nothing was sent.
type PermissionError struct {
	Verb, Resource, Namespace, Name string
	Err                             error
}

func (e *PermissionError) Error() string {
	group, res := e.Resource, e.Resource
	if i := strings.IndexByte(e.Resource, '.'); i > 0 {
		res, group = e.Resource[:i], e.Resource[i+1:]
	}
	return fmt.Sprintf("cancel needs %s on %s in namespace %s (%s), which the caller lacks: %v; nothing was sent. "+
		"Grant it with a Role rule {apiGroups: [%q], resources: [%q], verbs: [%q]} (docs/orchestrator.md)",
		e.Verb, e.Resource, e.Namespace, e.Name, e.Err, group, res, e.Verb)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// CancelFlushError says the job was stopped, but its final flush failed or was
// not acknowledged in time, so some files may not be stored. Result says
// which are not verified.
type CancelFlushError struct {
	Binding string
	Result  *CancelResult
}

func (e *CancelFlushError) Error() string {
	r := e.Result
	msg := fmt.Sprintf("%s stopped (%s), but its final flush did not complete: %v", e.Binding, r.Stop, r.FlushError)
	if len(r.Unverified) > 0 {
		msg += fmt.Sprintf("; %d file(s) not verified: %s", r.UnverifiedCount, strings.Join(r.Unverified, ", "))
		if int(r.UnverifiedCount) > len(r.Unverified) {
			msg += fmt.Sprintf(" and %d more", int(r.UnverifiedCount)-len(r.Unverified))
		}
	}
	if r.UnverifiedSummary != "" {
		msg += "; " + r.UnverifiedSummary
	}
	return msg
}

func (e *CancelFlushError) Unwrap() error { return e.Result.FlushError }

// Cancel stops the trainer of binding namespace/name: it checks that the
// caller may stop the job (a server-side dry run of the very patch or
// delete; a *PermissionError otherwise, and nothing is sent), sends the
// cancel command (every node runs a final flush) and waits for its
// acknowledgement within opts.Timeout, then stops the job with the caller's
// credentials: a TrainJob Kueue manages has its Workload deactivated
// (spec.active=false), any other is suspended (spec.suspend=true), and with
// opts.Delete the TrainJob is deleted. The first two can be undone, and the
// job resumes with a new attempt. The binding says Finishing/Cancelling
// until no trainer pod remains, then Failed/Cancelled.
//
// A flush that failed or timed out still stops the job: the result is
// returned with a *CancelFlushError naming the files not verified. A
// binding already final is a *PhaseError, and nothing is stopped.
func (c *Client) Cancel(ctx context.Context, namespace, name string, opts CancelOptions) (*CancelResult, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultCancelTimeout
	}
	wb, err := c.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	if Final(wb.Status.Phase) {
		return nil, &PhaseError{Binding: namespace + "/" + name, Got: wb.Status.Phase, Reason: wb.Status.Reason, Message: wb.Status.Message,
			Before: "cancel: a finished job has nothing to flush or stop"}
	}
	stop, err := c.planStop(ctx, namespace, wb.Spec.TrainJobName, opts.Delete)
	if err != nil {
		return nil, err
	}
	if err := c.applyStop(ctx, stop, true); err != nil {
		return nil, err
	}
	res := &CancelResult{Stop: stop.Stop}
	if res.CommandID, err = c.Send(ctx, namespace, name, Cancel); err != nil {
		return nil, err
	}
	wctx, done := context.WithTimeout(ctx, opts.Timeout)
	res.Command, res.FlushError = c.WaitCommand(wctx, namespace, name, res.CommandID)
	done()
	if res.FlushError != nil && errors.Is(res.FlushError, context.DeadlineExceeded) {
		res.FlushError = fmt.Errorf("no acknowledgement of cancel %s from every node within %s", res.CommandID, opts.Timeout)
	}
	if err := c.applyStop(ctx, stop, false); err != nil {
		return res, fmt.Errorf("cancel %s sent (flush: %s), but stopping the job failed: %w", res.CommandID, flushOutcome(res.FlushError), err)
	}
	if res.FlushError == nil {
		return res, nil
	}
	if wb, err := c.Get(ctx, namespace, name); err == nil {
		res.Unverified, res.UnverifiedCount, res.UnverifiedSummary = unverifiedFiles(&wb.Status)
	}
	return res, &CancelFlushError{Binding: namespace + "/" + name, Result: res}
}

func flushOutcome(err error) string {
	if err == nil {
		return "acknowledged"
	}
	return err.Error()
}

// unverifiedFiles is what the binding does not list as verified: the
// worker's missing files, else its nodes', and the summary of the nodes
// whose manifest is not verified.
func unverifiedFiles(st *tetherv1.WorkerBindingStatus) ([]string, int32, string) {
	var files []string
	var count int32
	if a := st.Artifacts; a != nil && a.MissingCount > 0 {
		files, count = a.Missing, a.MissingCount
	} else {
		for _, n := range st.Nodes {
			if n.Artifacts == nil {
				continue
			}
			files, count = append(files, n.Artifacts.Missing...), count+n.Artifacts.MissingCount
		}
	}
	if len(files) > 10 {
		files = files[:10]
	}
	summary := ""
	if len(lifecycle.UnverifiedRanks(st)) > 0 {
		summary = "not verified: " + lifecycle.MissingArtifacts(st)
	}
	return files, count, summary
}

// plannedStop is a Stop and the object it acts on.
type plannedStop struct {
	Stop
	obj *unstructured.Unstructured
}

// workloadGroup is Kueue's API group; the Workload's version is the one the
// API server prefers (v1beta2 from Kueue v0.15, v1beta1 before).
const workloadGroup = "kueue.x-k8s.io"

// planStop decides how to stop TrainJob namespace/name: delete it, or
// deactivate its Kueue Workload (found by Kueue's job-uid label or its
// ownerReference), or suspend it when Kueue manages it not.
func (c *Client) planStop(ctx context.Context, namespace, name string, del bool) (*plannedStop, error) {
	tj := trainjob.New()
	if err := c.kube.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, tj); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, denied(err, "get", "trainjobs.trainer.kubeflow.org", namespace, name)
		}
		return nil, fmt.Errorf("reading TrainJob %s/%s to stop it: %w", namespace, name, err)
	}
	tjStop := func(action, verb string) *plannedStop {
		return &plannedStop{Stop: Stop{Action: action, Verb: verb, Resource: "trainjobs.trainer.kubeflow.org", Namespace: namespace, Name: name}, obj: tj}
	}
	if del {
		return tjStop(StopDeleteTrainJob, "delete"), nil
	}
	mapping, err := c.kube.RESTMapper().RESTMapping(schema.GroupKind{Group: workloadGroup, Kind: "Workload"})
	switch {
	case meta.IsNoMatchError(err):
		return tjStop(StopSuspendTrainJob, "patch"), nil // no Kueue in this cluster
	case err != nil:
		return nil, fmt.Errorf("looking up Kueue's Workload API: %w", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(mapping.GroupVersionKind.GroupVersion().WithKind("WorkloadList"))
	if err := c.kube.List(ctx, list, crclient.InNamespace(namespace)); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, denied(err, "list", "workloads."+workloadGroup, namespace, "to find the Workload of TrainJob "+name)
		}
		return nil, fmt.Errorf("finding the Kueue Workload of TrainJob %s/%s: %w", namespace, name, err)
	}
	for i := range list.Items {
		wl := &list.Items[i]
		if ownedBy(wl, tj) {
			wl.SetGroupVersionKind(mapping.GroupVersionKind)
			return &plannedStop{Stop: Stop{Action: StopDeactivateWorkload, Verb: "patch", Resource: "workloads." + workloadGroup,
				Namespace: namespace, Name: wl.GetName()}, obj: wl}, nil
		}
	}
	if q := tj.GetLabels()[kueueQueueLabel]; q != "" {
		// Suspending it would not hold: Kueue unsuspends what it admits.
		return nil, fmt.Errorf("TrainJob %s/%s is queued in Kueue (%s=%s) but has no Workload yet; retry once Kueue created it", namespace, name, kueueQueueLabel, q)
	}
	return tjStop(StopSuspendTrainJob, "patch"), nil
}

const (
	kueueQueueLabel  = "kueue.x-k8s.io/queue-name"
	kueueJobUIDLabel = "kueue.x-k8s.io/job-uid"
)

// ownedBy reports whether Workload wl is TrainJob tj's: Kueue labels it with
// the job's UID and makes the job its owner.
func ownedBy(wl, tj *unstructured.Unstructured) bool {
	if wl.GetLabels()[kueueJobUIDLabel] == string(tj.GetUID()) {
		return true
	}
	for _, o := range wl.GetOwnerReferences() {
		if o.UID == tj.GetUID() {
			return true
		}
	}
	return false
}

// applyStop stops the job, or with dryRun has the API server check (RBAC,
// admission) that it may, changing nothing.
func (c *Client) applyStop(ctx context.Context, s *plannedStop, dryRun bool) error {
	var opts []crclient.PatchOption
	var delOpts []crclient.DeleteOption
	if dryRun {
		opts, delOpts = append(opts, crclient.DryRunAll), append(delOpts, crclient.DryRunAll)
	}
	var err error
	switch s.Action {
	case StopDeactivateWorkload:
		err = c.kube.Patch(ctx, s.obj, crclient.RawPatch(types.MergePatchType, []byte(`{"spec":{"active":false}}`)), opts...)
	case StopSuspendTrainJob:
		err = c.kube.Patch(ctx, s.obj, crclient.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`)), opts...)
	default:
		uid := s.obj.GetUID()
		delOpts = append(delOpts, crclient.Preconditions{UID: &uid}, crclient.PropagationPolicy("Background"))
		err = c.kube.Delete(ctx, s.obj, delOpts...)
		if !dryRun && apierrors.IsNotFound(err) {
			err = nil
		}
	}
	if err == nil {
		return nil
	}
	if dryRun && apierrors.IsForbidden(err) {
		return denied(err, s.Verb, s.Resource, s.Namespace, s.Name)
	}
	what := fmt.Sprintf("%s %s %s/%s", s.Verb, s.Resource, s.Namespace, s.Name)
	if dryRun {
		what = "checking (dry run) that the caller may " + what
	}
	return fmt.Errorf("%s: %w", what, err)
}

// denied turns the API server's Forbidden into a *PermissionError.
func denied(err error, verb, resource, namespace, name string) error {
	if apierrors.IsForbidden(err) {
		return &PermissionError{Verb: verb, Resource: resource, Namespace: namespace, Name: name, Err: err}
	}
	return err
}
