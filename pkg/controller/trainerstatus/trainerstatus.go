package trainerstatus

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controller/internal/keys"
	"github.com/tether-dev/tether/pkg/controller/internal/statuspatch"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// FieldManager is the field manager of Tether's writes of
// TrainJob.status.trainerStatus (server-side apply on trainjobs/status):
// Trainer's controller updates status by merge patch, so the field survives
// its writes, and a trainer reporting natively owns it under another
// manager, which is how Tether tells the two apart: a field another manager
// owns is the trainer's, and Tether leaves it alone.
const FieldManager = "tether-progress"

// trainJobCRD is the CRD whose schema says whether trainerStatus exists
// (Trainer v2.3 has it; v2.0 does not).
const trainJobCRD = "trainjobs.trainer.kubeflow.org"

// crdRecheck bounds how long a Trainer upgrade goes unnoticed.
const crdRecheck = time.Minute

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// Reconciler puts a bound job's progress where Kubeflow's
// tools look for it: it writes the worker's progress (status.progress of
// the WorkerBinding, reported by node 0) into TrainJob.status.trainerStatus
// when the trainer does not report natively, and, when it does, copies the
// trainer's own report into the binding's status.progress, so the binding,
// kubectl tether and the metrics show progress either way.
type Reconciler struct {
	Client client.Client
	// Live reads the TrainJob (its status and managedFields, which the
	// metadata cache does not hold) and the CRD.
	Live client.Reader
	// Off disables writing trainerStatus (--trainer-status=off); native
	// progress is still shown on the binding.
	Off bool
	Now func() time.Time

	mu sync.Mutex
	// hasField caches whether the served TrainJob schema has trainerStatus.
	hasField  bool
	checkedAt time.Time
	// first is each binding's first progress sample in its attempt: the
	// ETA is the step rate since then.
	first map[types.NamespacedName]sample
}

type sample struct {
	uid     types.UID
	attempt int32
	step    float64
	t       time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager watches WorkerBindings and the metadata of bound
// TrainJobs (a trainer's native report changes their resourceVersion).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.first = map[types.NamespacedName]sample{}
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	return ctrl.NewControllerManagedBy(mgr).
		Named("trainer-status").
		For(&tetherv1.WorkerBinding{}).
		WatchesMetadata(tj, handler.EnqueueRequestsFromMapFunc(keys.SameName), builder.OnlyMetadata,
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return jobconfig.IsBound(o.GetLabels()) }))).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wb := &tetherv1.WorkerBinding{}
	if err := r.Client.Get(ctx, req.NamespacedName, wb); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if wb.Status.Attempt == 0 && wb.Status.Progress == nil {
		// No pod of the job was seen yet: no trainer ran to report, natively
		// or through the sidecar. Not read: in a burst of new bindings this
		// uncached read was one per binding (test/performance/controller).
		return ctrl.Result{}, nil
	}
	tj := &unstructured.Unstructured{}
	tj.SetGroupVersionKind(trainjob.GVK)
	if err := r.Live.Get(ctx, types.NamespacedName{Namespace: wb.Namespace, Name: wb.Spec.TrainJobName}, tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if tj.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	native, _, _ := unstructured.NestedMap(tj.Object, "status", "trainerStatus")
	if native != nil && ownedByOther(tj) {
		return ctrl.Result{}, r.showNative(ctx, wb, native)
	}
	if r.Off || tj.GetAnnotations()[names.TrainerStatusAnnotation] == jobconfig.TrainerStatusOff ||
		wb.Status.Progress == nil || lifecycleFinal(wb.Status.Phase) {
		return ctrl.Result{}, nil
	}
	ok, err := r.crdHasField(ctx)
	if err != nil || !ok {
		return ctrl.Result{}, err
	}
	want := r.trainerStatus(wb, r.now())
	if want == nil || sameTrainerStatus(native, want) {
		return ctrl.Result{}, nil
	}
	apply := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": trainjob.GVK.GroupVersion().String(), "kind": trainjob.GVK.Kind,
		"metadata": map[string]any{"name": tj.GetName(), "namespace": tj.GetNamespace()},
		"status":   map[string]any{"trainerStatus": want},
	}}
	// No Force: a conflict means another manager (the trainer) owns the
	// field, and its report wins.
	err = r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(FieldManager))
	if apierrors.IsConflict(err) {
		logf.FromContext(ctx).V(1).Info("trainerStatus is owned by another field manager; leaving it", "trainjob", tj.GetName())
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

func lifecycleFinal(p tetherv1.WorkerBindingPhase) bool {
	return p == tetherv1.PhaseSucceeded || p == tetherv1.PhaseFailed
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.first, key)
}

// ownedByOther reports whether a field manager other than Tether's owns
// status.trainerStatus: the trainer reported natively.
func ownedByOther(tj *unstructured.Unstructured) bool {
	for _, mf := range tj.GetManagedFields() {
		if mf.Manager == FieldManager || mf.FieldsV1 == nil {
			continue
		}
		if bytes.Contains(mf.FieldsV1.GetRawBytes(), []byte(`"f:trainerStatus"`)) {
			return true
		}
	}
	return false
}

// crdHasField reports whether the served TrainJob schema has
// status.trainerStatus (cached for crdRecheck).
func (r *Reconciler) crdHasField(ctx context.Context) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.checkedAt.IsZero() && r.now().Sub(r.checkedAt) < crdRecheck {
		return r.hasField, nil
	}
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := r.Live.Get(ctx, types.NamespacedName{Name: trainJobCRD}, crd); err != nil {
		return false, fmt.Errorf("reading CRD %s to learn whether it has status.trainerStatus: %w", trainJobCRD, err)
	}
	had, firstCheck := r.hasField, r.checkedAt.IsZero()
	r.hasField, r.checkedAt = CRDHasTrainerStatus(crd), r.now()
	if !r.hasField && (had || firstCheck) {
		logf.FromContext(ctx).Info("the installed Trainer's TrainJob CRD has no status.trainerStatus (Trainer before v2.3?): progress is not written there")
	}
	return r.hasField, nil
}

// CRDHasTrainerStatus reports whether the TrainJob CRD's served version
// (trainjob.GVK's) has status.trainerStatus.
func CRDHasTrainerStatus(crd *unstructured.Unstructured) bool {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok || m["name"] != trainjob.GVK.Version {
			continue
		}
		_, found, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema", "properties", "status", "properties", "trainerStatus")
		return found
	}
	return false
}

// trainerStatus is the trainerStatus to write for wb's progress, or nil.
func (r *Reconciler) trainerStatus(wb *tetherv1.WorkerBinding, now time.Time) map[string]any {
	p := wb.Status.Progress
	t := now
	if p.UpdatedTime != nil {
		t = p.UpdatedTime.Time
	}
	r.mu.Lock()
	key := types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}
	first, seen := r.first[key]
	cur := sample{uid: wb.UID, attempt: wb.Status.Attempt, t: t, step: -1}
	if p.Step != nil {
		cur.step = float64(*p.Step)
	}
	// A new attempt, or a trainer resumed from an earlier checkpoint,
	// measures its rate afresh.
	if !seen || first.uid != cur.uid || first.attempt != cur.attempt || cur.step < first.step {
		r.first[key] = cur
		first = cur
	}
	r.mu.Unlock()
	return Value(p, first.step, first.t, t)
}

// Value turns a worker's progress into a trainerStatus:
// progressPercentage from the fraction; estimatedRemainingSeconds from the
// step rate since (step0, t0) and the total the fraction implies (total =
// step / fraction); metrics step, epoch and loss. Nil without anything to say.
func Value(p *tetherv1.Progress, step0 float64, t0, t time.Time) map[string]any {
	out := map[string]any{}
	var metrics []any
	add := func(name, value string) {
		if value != "" && len(value) <= 64 {
			metrics = append(metrics, map[string]any{"name": name, "value": value})
		}
	}
	if p.Step != nil {
		add("step", strconv.FormatInt(*p.Step, 10))
	}
	add("epoch", p.Epoch)
	add("loss", p.Loss)
	if f, err := strconv.ParseFloat(p.Fraction, 64); err == nil && f >= 0 && f <= 1 && !math.IsNaN(f) {
		out["progressPercentage"] = int64(math.Floor(f * 100))
		if p.Step != nil && f > 0 && step0 >= 0 {
			step := float64(*p.Step)
			if dt := t.Sub(t0).Seconds(); step > step0 && dt > 0 {
				rate := (step - step0) / dt
				remaining := (step/f - step) / rate
				if remaining >= 0 && remaining < math.MaxInt32 {
					out["estimatedRemainingSeconds"] = int64(math.Ceil(remaining))
				}
			}
		}
	}
	if len(metrics) > 0 {
		out["metrics"] = metrics
	}
	if len(out) == 0 {
		return nil
	}
	out["lastUpdatedTime"] = t.UTC().Truncate(time.Second).Format(time.RFC3339)
	return out
}

// sameTrainerStatus reports whether have already says what want says
// (lastUpdatedTime aside: a write only for a newer timestamp is churn).
func sameTrainerStatus(have, want map[string]any) bool {
	if have == nil {
		return false
	}
	for _, k := range []string{"progressPercentage", "estimatedRemainingSeconds"} {
		if fmt.Sprint(have[k]) != fmt.Sprint(want[k]) {
			return false
		}
	}
	return fmt.Sprint(have["metrics"]) == fmt.Sprint(want["metrics"])
}

// showNative copies a trainer's native trainerStatus into the binding's
// status.progress, unless the worker reported something newer.
func (r *Reconciler) showNative(ctx context.Context, wb *tetherv1.WorkerBinding, native map[string]any) error {
	p := ProgressFromTrainerStatus(native)
	if p == nil {
		return nil
	}
	if have := wb.Status.Progress; have != nil && have.UpdatedTime != nil && p.UpdatedTime != nil && !p.UpdatedTime.After(have.UpdatedTime.Time) {
		return nil
	}
	before := wb.DeepCopy()
	wb.Status.Progress = lifecycle.MergeProgress(wb.Status.Progress, p, r.now())
	return r.Client.Status().Patch(ctx, wb, statuspatch.For(before, wb))
}

// ProgressFromTrainerStatus reads a native trainerStatus as a binding's
// progress: the fraction from progressPercentage, step, epoch and loss
// from the metrics of those names.
func ProgressFromTrainerStatus(ts map[string]any) *tetherv1.Progress {
	p := &tetherv1.Progress{}
	found := false
	if v, ok, _ := unstructured.NestedFieldNoCopy(ts, "progressPercentage"); ok {
		if f, err := strconv.ParseFloat(fmt.Sprint(v), 64); err == nil {
			p.Fraction = strconv.FormatFloat(f/100, 'f', -1, 64)
			found = true
		}
	}
	metrics, _, _ := unstructured.NestedSlice(ts, "metrics")
	for _, m := range metrics {
		mm, ok := m.(map[string]any)
		if !ok {
			continue
		}
		name, _ := mm["name"].(string)
		value, _ := mm["value"].(string)
		switch name {
		case "step", "global_step":
			if s, err := strconv.ParseInt(value, 10, 64); err == nil {
				p.Step, found = &s, true
			}
		case "epoch":
			p.Epoch, found = value, true
		case "loss", "train_loss":
			p.Loss, found = value, true
		}
	}
	if s, ok := ts["lastUpdatedTime"].(string); ok {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			mt := metav1.NewTime(t)
			p.UpdatedTime = &mt
		}
	}
	if !found {
		return nil
	}
	return p
}
