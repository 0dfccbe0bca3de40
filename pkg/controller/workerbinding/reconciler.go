package workerbinding

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controller/internal/keys"
	"github.com/tether-dev/tether/pkg/controller/internal/ownwrites"
	"github.com/tether-dev/tether/pkg/controller/internal/storeops"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/logarchive"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/replicaleases"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/namespaceid"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// conflictRetry is how soon a reconcile that lost a write race runs again.
const conflictRetry = 100 * time.Millisecond

// DefaultBindingWorkers is how many TrainJobs the binding controller
// reconciles at once. A reconcile mostly waits on the API server (the live
// Secret and JobSet reads, the binding and Secret creates, the status write),
// so one worker bound a burst of TrainJobs at one API round trip at a time
// (test/performance/controller: 1,271 of 2,000 in 6 minutes). 16 saturated the test API
// server there; 64 bound no faster and only queued longer. Reconciles of
// different TrainJobs share nothing but thread-safe clients, the recorder and
// the log archiver (locked).
const DefaultBindingWorkers = 16

// Reconciler creates and maintains the token Secret and WorkerBinding
// of every bound TrainJob.
type Reconciler struct {
	// Client reads from the manager's cache (TrainJob metadata, WorkerBindings, trainer pods).
	Client client.Client
	// Secrets reads Secrets straight from the API server by name: token
	// Secrets are never cached, so the control plane needs no list/watch on them.
	Secrets client.Reader
	// Live reads from the API server what is never cached: a bound
	// TrainJob's JobSet, once, to count its nodes (nil: counted from pods).
	Live   client.Reader
	Scheme *runtime.Scheme
	// CABundle returns the PEM the sidecar must trust to reach the binding server.
	CABundle func() ([]byte, error)
	Events   events.EventRecorder
	// StatusInterval and MissedHeartbeats are the binding server's: a
	// worker whose replica vouched for it under a Lease is lost
	// MissedHeartbeats intervals after that Lease's last renewal (Leases);
	// one recorded without a Lease, when silent for StatusInterval +
	// MissedHeartbeats×interval.
	StatusInterval   time.Duration
	MissedHeartbeats int
	// Leases are the binding-server replicas' Leases (nil: not consulted).
	Leases *replicaleases.ReplicaLeases
	// ArtifactGrace is how long after the bound pod ended the controller
	// waits for the manifest's verdict before declaring the artifacts
	// incomplete (the sidecar uploads the manifest just before it exits).
	ArtifactGrace time.Duration
	// Logs archives terminated trainers' logs next to the artifacts (nil: off).
	Logs *logarchive.LogArchiver
	// Pending holds uploads that would have replaced an earlier object:
	// promoted before the binding says Succeeded (nil: off). What is left
	// once the binding is final is dropped by package artifactsettle.
	Pending storeops.PendingArtifacts
	// Manifests reads back a stored manifest whose verdict the binding
	// lacks (nil: not checked).
	Manifests storeops.StoredManifests
	// Paths reads what the verified manifests list, for a job that
	// requires outputs (nil: such a job is never promoted, its binding
	// says why).
	Paths storeops.VerifiedPaths
	// TokenOverlap is how long a reissued token's predecessor stays valid:
	// running pods hold the old token until the kubelet refreshes their
	// Secret volume (its pod sync, about a minute by default). 0: none.
	TokenOverlap time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Workers is how many TrainJobs are reconciled at once (0: DefaultBindingWorkers).
	Workers int
	// Claims claims each job id for good for the TrainJob that binds it
	// (package jobidclaim; nil: not claimed, tests of other parts only).
	Claims *jobidclaim.JobIDClaims

	failedCreates failedCreateReads
	scopedIDs     scopedIDHolders
	written       ownwrites.Tracker
	// namespaces reads a TrainJob's namespace from the API server (Live)
	// before its binding is first written, one read for the reconciles
	// that ask at once.
	namespaces     namespaceid.Shared
	namespacesOnce sync.Once
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler, its index and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &tetherv1.WorkerBinding{}, keys.JobIDIndex, keys.IndexJobID); err != nil {
		return err
	}
	workers := r.Workers
	if workers <= 0 {
		workers = DefaultBindingWorkers
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("workerbinding").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		For(trainjob.New(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return jobconfig.IsBound(o.GetLabels())
		}))).
		// A WorkerBinding is named after its TrainJob. (Owns() cannot be used:
		// it needs the owner's Go type, and TrainJobs are watched as metadata.)
		Watches(&tetherv1.WorkerBinding{}, r.written.EventHandler()).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(trainJobOfPod))
	if r.Leases != nil {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &tetherv1.WorkerBinding{}, replicaleases.SessionReplicaIndex,
			replicaleases.IndexSessionReplica); err != nil {
			return err
		}
		if err := mgr.Add(r.Leases); err != nil {
			return err
		}
		// A binding whose replica's Lease expired.
		b = b.WatchesRawSource(source.Channel(r.Leases.Events(), &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// trainJobOfPod maps a trainer pod to its TrainJob (= JobSet name).
func trainJobOfPod(_ context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	name, ok := trainjob.IsTrainerPod(pod)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: name}}}
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Another writer (the binding server, another reconcile) was first:
		// the normal race of optimistic concurrency, retried shortly, once
		// the cache has the other write.
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	tj, err := trainjob.Get(ctx, r.Client, req.NamespacedName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			if r.Claims != nil {
				r.Claims.Forget(req.NamespacedName)
			}
			r.scopedIDs.forget(req.NamespacedName)
			r.written.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !jobconfig.IsBound(tj.GetLabels()) || tj.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	jobID, workerID := tj.GetAnnotations()[names.JobIDAnnotation], tj.GetAnnotations()[names.WorkerIDAnnotation]
	if jobID == "" || workerID == "" {
		r.warn(tj, lifecycle.ReasonNotStamped, "TrainJob is labeled %s=%s but has no %s/%s annotations (Tether's TrainJob webhook did not see it); remove and re-add the label",
			names.BindLabel, names.BindValue, names.JobIDAnnotation, names.WorkerIDAnnotation)
		return ctrl.Result{}, nil
	}

	wb, res, err := r.currentBinding(ctx, tj, req.NamespacedName)
	if res != nil || err != nil {
		return ptr.Deref(res, ctrl.Result{}), err
	}

	if res, refused, err := r.checkIdentity(ctx, tj, wb, jobID, workerID); refused || err != nil {
		return res, err
	}

	ca, err := r.CABundle()
	if err != nil || len(ca) == 0 {
		log.Info("CA bundle not available yet; retrying", "error", err)
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	fresh := wb == nil
	var pods []corev1.Pod
	if !fresh {
		if pods, err = r.trainerPods(ctx, tj); err != nil {
			return ctrl.Result{}, err
		}
	}
	if wb, res, err = r.issue(ctx, tj, wb, jobID, workerID, ca, pods); res != nil || err != nil {
		return ptr.Deref(res, ctrl.Result{}), err
	}
	if fresh {
		// The token first: the first status after every other token in a
		// burst (ownwrites.FirstStatusNext).
		r.written.AwaitFirstStatus(req.NamespacedName)
		return ownwrites.FirstStatusNext(), nil
	}
	return r.status(ctx, tj, wb, jobID, workerID, pods)
}

// currentBinding returns the TrainJob's binding (nil when there is none yet), or
// the result to return at once (res non-nil) when its name is held by a
// stale binding.
func (r *Reconciler) currentBinding(ctx context.Context, tj *unstructured.Unstructured, key types.NamespacedName) (*tetherv1.WorkerBinding, *ctrl.Result, error) {
	wb := &tetherv1.WorkerBinding{}
	err := r.Client.Get(ctx, key, wb)
	switch {
	case apierrors.IsNotFound(err):
		// The cache may not have this reconciler's own create yet (the
		// first status follows the create at once when nothing else
		// waits): read your writes.
		wb = r.written.Created(key, tj.GetUID(), r.now())
	case err != nil:
		return nil, nil, err
	case !metav1.IsControlledBy(wb, tj):
		// Left from an earlier TrainJob of the same name; garbage collection
		// removes it, then we bind this one.
		logf.FromContext(ctx).Info("waiting for a stale WorkerBinding to be garbage-collected", "uid", wb.GetUID())
		return nil, &ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	default:
		wb = r.written.Latest(wb, r.now())
	}
	return wb, nil, nil
}

// issue writes the binding's spec and its token Secret: a binding not
// there yet (wb nil) is created with a new token; an existing one keeps the
// token its Secret holds, or gets a new one when the Secret is missing or
// malformed. It returns the binding as written, or the result to return at
// once (res non-nil: another reconcile created the binding first). pods
// are the job's trainer pods (none read for a new binding).
func (r *Reconciler) issue(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, jobID, workerID string, ca []byte, pods []corev1.Pod) (*tetherv1.WorkerBinding, *ctrl.Result, error) {
	key := client.ObjectKeyFromObject(tj)
	if wb != nil && lifecycle.WaitsForPods(&wb.Status, pods) && r.written.SecretStands(key, wb.Spec.TokenSHA256, ca, r.now()) {
		// A recheck of a binding waiting for its first pods (the FailedCreate
		// look): its Secret, read or written moments ago, is not read from
		// the API server again (ownwrites' secretVerifiedFor says how long).
		// The reconcile a new binding's create starts with reads nothing
		// either (fresh); a binding found without this mark (a restart, a
		// TrainJob created while another replica led) reads it once.
		wb, err := r.writeSpec(ctx, tj, wb, jobID, workerID, wb.Spec.TokenSHA256, false)
		return wb, nil, err
	}
	// The binding is written before its Secret: once a sidecar can mount
	// the token, the binding server can already find the binding by it.
	// A TrainJob not bound yet has no Secret in all likelihood: it is not
	// read (an uncached read per new job, in a burst of them), and the
	// Secret is created; one that exists after all is read then (secretExists).
	fresh := wb == nil
	var secret *corev1.Secret
	var token binding.Token
	var err error
	if !fresh {
		if secret, token, err = r.loadToken(ctx, tj); err != nil {
			r.warn(tj, tetherv1.ReasonTokenSecretError, "token Secret %s: %v", binding.TokenSecretName(tj.GetName()), err)
			return nil, nil, err
		}
	}
	issued := token == ""
	if issued {
		if token, err = binding.NewToken(); err != nil {
			return nil, nil, err
		}
	}
	if wb, err = r.writeSpec(ctx, tj, wb, jobID, workerID, token.Hash(), issued); wb == nil || err != nil {
		// No binding: another reconcile created it first; the next one,
		// once the cache has it, writes its Secret. (Its create's echo is
		// enqueued behind every token to issue: not soon enough here.)
		if err == nil {
			return nil, &ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return nil, nil, err
	}
	err = r.writeSecret(ctx, tj, secret, token, ca)
	if fresh && apierrors.IsAlreadyExists(err) {
		wb, err = r.secretExists(ctx, tj, wb, token, ca)
	}
	if err != nil {
		r.warn(tj, tetherv1.ReasonTokenSecretError, "token Secret %s: %v", binding.TokenSecretName(tj.GetName()), err)
		return nil, nil, err
	}
	if fresh || lifecycle.WaitsForPods(&wb.Status, pods) {
		// The Secret holds the binding's token and ca now (written, or
		// read and left as it was); remembered for the bindings whose
		// rechecks need no read (above), not for every running one.
		r.written.SecretVerified(key, wb.Spec.TokenSHA256, ca, r.now())
	}
	return wb, nil, nil
}

// status derives and writes the binding's status (updateStatus), and
// announces the binding with its first status.
func (r *Reconciler) status(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, jobID, workerID string, pods []corev1.Pod) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(tj)
	first := wb.Status.Phase == ""
	requeue, err := r.updateStatus(ctx, tj, wb, pods)
	var after *int
	if err == nil {
		// Bound is announced with the binding's first status, written
		// here (also for a binding another replica created), or found
		// written by the binding server (a sidecar registered first): in a
		// burst, after every token, as the status (test/performance/controller: each
		// Event costs the API server about a plain create).
		if created := r.written.FirstStatusWritten(key, r.now()); first || created {
			r.normal(tj, lifecycle.ReasonBound, "bound as job %s, worker %s; token Secret %s", jobID, workerID, wb.Spec.TokenSecretName)
		}
		if first {
			// The binding's later rechecks at a new TrainJob's priority,
			// not its first status's (the queue keeps a request's).
			after = ptr.To(0)
		}
	}
	if p := wb.Spec.PreviousToken; p != nil && err == nil {
		// Back when the previous token expires, to clear it.
		if until := p.ValidUntil.Sub(r.now()) + time.Second; requeue == 0 || until < requeue {
			requeue = max(until, time.Second)
		}
	}
	return ctrl.Result{RequeueAfter: requeue, Priority: after}, err
}

// writeSpec creates the binding (wb nil), or brings its spec up to date:
// the token's hash, the previous one kept for the overlap when the token was
// reissued, an expired previous token cleared, and settings recorded once
// valid. issued says the token was issued in this reconcile. It returns the
// binding as written, or nil without an error when another reconcile
// created it first.
func (r *Reconciler) writeSpec(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, jobID, workerID, hash string, issued bool) (*tetherv1.WorkerBinding, error) {
	switch {
	case wb == nil:
		wb = &tetherv1.WorkerBinding{
			ObjectMeta: metav1.ObjectMeta{Name: tj.GetName(), Namespace: tj.GetNamespace(), Labels: map[string]string{names.BindLabel: names.BindValue}},
			Spec: tetherv1.WorkerBindingSpec{TrainJobName: tj.GetName(), JobID: jobID, WorkerID: workerID,
				TokenSecretName: binding.TokenSecretName(tj.GetName()), TokenSHA256: hash},
		}
		wb.Spec.Settings, _ = r.settings(ctx, tj)
		if err := ctrl.SetControllerReference(tj, wb, r.Scheme); err != nil {
			return nil, err
		}
		if err := r.Client.Create(ctx, wb); err != nil {
			return nil, client.IgnoreAlreadyExists(err)
		}
		r.written.Wrote(wb, r.now())
	default:
		rehashed := wb.Spec.TokenSHA256 != hash
		expired := wb.Spec.PreviousToken != nil && !r.now().Before(wb.Spec.PreviousToken.ValidUntil.Time)
		recorded := false
		if !lifecycle.SettingsRecorded(&wb.Spec) {
			// A binding whose settings were invalid so far.
			if s, valid := r.settings(ctx, tj); valid {
				wb.Spec.Settings, recorded = s, true
			}
		}
		if !rehashed && !recorded && !expired {
			break
		}
		switch {
		case rehashed && wb.Spec.TokenSHA256 != "" && r.TokenOverlap > 0:
			wb.Spec.PreviousToken = &tetherv1.PreviousToken{SHA256: wb.Spec.TokenSHA256,
				ValidUntil: metav1.NewTime(r.now().Add(r.TokenOverlap))}
		case rehashed, expired:
			wb.Spec.PreviousToken = nil
		}
		wb.Spec.TokenSHA256 = hash
		if err := r.Client.Update(ctx, wb); err != nil {
			return nil, err
		}
		r.written.Wrote(wb, r.now())
		if issued && rehashed {
			overlap := "the previous token is refused from now on (--token-overlap=0)"
			if wb.Spec.PreviousToken != nil {
				overlap = "the previous token stays valid for " + r.TokenOverlap.String() + ", while the kubelet updates the running pod's token volume"
			}
			r.warn(tj, lifecycle.ReasonTokenReissued, "token Secret %s was missing or malformed and was issued anew; %s", wb.Spec.TokenSecretName, overlap)
		}
	}
	return wb, nil
}

// settings parses the TrainJob's settings for the binding to record. Invalid
// ones are not recorded (the pod webhook denies the job's pods meanwhile, with
// the reason): the next reconcile records them once they are fixed. valid
// says whether they were.
func (r *Reconciler) settings(ctx context.Context, tj *unstructured.Unstructured) (settings tetherv1.WorkerBindingSettings, valid bool) {
	s, err := jobconfig.Parse(tj.GetAnnotations())
	if err != nil {
		logf.FromContext(ctx).Info("settings not recorded on the binding yet: the TrainJob's settings annotations are invalid", "error", err.Error())
		return tetherv1.WorkerBindingSettings{}, false
	}
	return lifecycle.RecordSettings(s), true
}

// jobIDOwner returns the namespace/name of another live binding that holds
// jobID, or "" when none does.
func (r *Reconciler) jobIDOwner(ctx context.Context, jobID string, tj *unstructured.Unstructured) (string, error) {
	var list tetherv1.WorkerBindingList
	if err := r.Client.List(ctx, &list, client.MatchingFields{keys.JobIDIndex: jobID}); err != nil {
		return "", err
	}
	for _, b := range list.Items {
		if b.DeletionTimestamp == nil && !(b.Namespace == tj.GetNamespace() && b.Name == tj.GetName()) {
			return b.Namespace + "/" + b.Name, nil
		}
	}
	return "", nil
}

// updateStatus gathers what the binding's status depends on, derives the
// new status (decide), archives the ended trainers' logs onto it and writes
// it when it changed, then announces what changed. pods are the job's
// trainer pods. It returns when to look again.
func (r *Reconciler) updateStatus(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, pods []corev1.Pod) (time.Duration, error) {
	before := wb.Status.DeepCopy()
	now := r.now()
	out, requeue := r.decide(ctx, tj, wb, pods, now)
	for _, w := range out.Warnings {
		r.warn(tj, w.Reason, "%s", w.Note)
	}
	if retry := r.archiveLogs(ctx, wb, pods); retry > 0 && (requeue == 0 || retry < requeue) {
		requeue = retry
	}
	// Again after Derive: promoting the artifacts may have made the binding
	// Succeeded since.
	lifecycle.SetOutcomeConditions(&wb.Status, wb.Generation)
	if equality.Semantic.DeepEqual(before, &wb.Status) {
		return requeue, nil
	}
	if err := r.Client.Status().Update(ctx, wb); err != nil {
		return 0, err
	}
	r.written.Wrote(wb, now)
	if r.Events != nil {
		// Announced once written: a write that lost a race is re-observed,
		// and announced, by the next reconcile.
		ref := trainjob.Ref(tj.GetNamespace(), tj.GetName(), tj.GetUID())
		for _, e := range out.Events {
			r.Events.Eventf(ref, nil, e.Type, e.Reason, lifecycle.EventAction, "%s", e.Note)
		}
		// A new binding's first status (Pending, TokenIssued) is what its
		// Bound Event announces (reconcile): one Event per fact (a burst of
		// new bindings paid two creates each, test/performance/controller).
		announced := before.Phase == "" && wb.Status.Reason == tetherv1.ReasonTokenIssued
		if lifecycle.Transitioned(before.Phase, before.Reason, &wb.Status) && !announced {
			eventType, reason, note := lifecycle.TransitionEvent(&wb.Status)
			r.Events.Eventf(ref, nil, eventType, reason, lifecycle.EventAction, "%s", note)
		}
	}
	return requeue, nil
}

func (r *Reconciler) trainerPods(ctx context.Context, tj *unstructured.Unstructured) ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := r.Client.List(ctx, &pods, client.InNamespace(tj.GetNamespace()), client.MatchingLabels(trainjob.TrainerPodLabels(tj.GetName())))
	return pods.Items, err
}

func (r *Reconciler) normal(tj *unstructured.Unstructured, reason, note string, args ...any) {
	if r.Events != nil {
		r.Events.Eventf(trainjob.Ref(tj.GetNamespace(), tj.GetName(), tj.GetUID()), nil, corev1.EventTypeNormal, reason, lifecycle.EventAction, note, args...)
	}
}

func (r *Reconciler) warn(tj *unstructured.Unstructured, reason, note string, args ...any) {
	if r.Events != nil {
		r.Events.Eventf(trainjob.Ref(tj.GetNamespace(), tj.GetName(), tj.GetUID()), nil, corev1.EventTypeWarning, reason, lifecycle.EventAction, note, args...)
	}
}
