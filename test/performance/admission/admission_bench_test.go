package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/uuid"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/benchutil"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

const (
	namespace    = "tether-bench"
	trainJobName = "llama-ft"
	floorPath    = "/floor"
	// requestTimeout bounds one request; a slice's context also ends this long
	// after the slice's last scheduled send, so a hung server cannot stretch
	// the run beyond (duration+warmup)*2 + slices*requestTimeout.
	requestTimeout = 5 * time.Second // the webhook's timeoutSeconds
	// fullCheckEvery: every Nth response is fully decoded and checked; the
	// others get a cheap byte check (keeps the client's CPU cost low).
	fullCheckEvery = 128
)

// benchConfig is the load, from TETHER_BENCH_* environment variables.
type benchConfig struct {
	duration time.Duration // measured load per path at each rate
	warmup   time.Duration // unmeasured load per path before it, at each rate
	rates    []int         // intended requests per second, open loop, one after another
	slices   int           // slices per path at each rate (even: the order is balanced)
	workers  int           // client goroutines (bound on requests in flight)
	http1    bool          // keep-alive HTTP/1.1 instead of HTTP/2
}

// maxRate and maxSlice bound what one slice asks of the load generator (and
// the size of its result line).
const (
	maxRate  = 20000
	maxSlice = time.Minute
)

func loadConfig(b *testing.B) benchConfig {
	b.Helper()
	c := benchConfig{duration: 10 * time.Second, warmup: time.Second, rates: []int{200, 500, 1000}, slices: 6, workers: 64}
	if benchutil.Smoke(b) {
		// One second per path at the headline rate, in two slices: every
		// path answered, the figures under their usual names.
		c.duration, c.warmup, c.rates, c.slices = time.Second, 0, []int{headlineRate}, 2
	}
	dur := func(key string, v *time.Duration) {
		if s := os.Getenv(key); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 {
				b.Fatalf("%s=%q: want a duration such as 20s", key, s)
			}
			*v = d
		}
	}
	num := func(key string, v *int) {
		if s := os.Getenv(key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				b.Fatalf("%s=%q: want a positive integer", key, s)
			}
			*v = n
		}
	}
	dur("TETHER_BENCH_DURATION", &c.duration)
	dur("TETHER_BENCH_WARMUP", &c.warmup)
	num("TETHER_BENCH_SLICES", &c.slices)
	num("TETHER_BENCH_WORKERS", &c.workers)
	if s := os.Getenv("TETHER_BENCH_RATES"); s != "" {
		c.rates = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 || n > maxRate {
				b.Fatalf("TETHER_BENCH_RATES=%q: want comma-separated request rates from 1 to %d, such as 200,500,1000", s, maxRate)
			}
			c.rates = append(c.rates, n)
		}
	}
	switch p := os.Getenv("TETHER_BENCH_PROTO"); p {
	case "", "h2":
	case "http1":
		c.http1 = true
	default:
		b.Fatalf("TETHER_BENCH_PROTO=%q: want h2 or http1", p)
	}
	if c.duration < time.Second {
		b.Fatalf("TETHER_BENCH_DURATION=%s: want at least 1s", c.duration)
	}
	if c.slices%2 != 0 {
		b.Fatalf("TETHER_BENCH_SLICES=%d: want an even number (the slice order is balanced over pairs of rounds)", c.slices)
	}
	if c.duration/time.Duration(c.slices) > maxSlice || c.warmup > maxSlice {
		b.Fatalf("TETHER_BENCH_DURATION/TETHER_BENCH_SLICES and TETHER_BENCH_WARMUP: want at most %s each", maxSlice)
	}
	return c
}

// headlineRate is the rate whose figures carry the unsuffixed metric names.
const headlineRate = 1000

// BenchmarkPodAdmission measures /mutate-pod against two floors at sustained
// open-loop rates (TETHER_BENCH_RATES, default 200, 500 and 1,000 rps, one
// after another): /floor, on the same controller-runtime webhook server, and
// the bare floor, a plain net/http server (barefloor_test.go). One b.N
// iteration is one full load phase: the configured duration on each path at
// each rate (each preceded by a warmup).
//
// The load generator is a child process (loadgen_test.go), so that this
// process's CPU time, read with getrusage before and after each slice, is
// the servers' side only; the child reports its own.
//
// Load generation is open loop and coordinated-omission aware: request i of a
// slice is due at start + i/rate, whatever happened to earlier requests; a
// bounded pool of workers (TETHER_BENCH_WORKERS, the bound on requests in
// flight) claims the next request, sleeps until it is due and sends it.
// Latency ends when the full response is read. It starts:
//   - at the due time when the worker claimed the request only after it was
//     due (every worker was busy waiting on the server, or the client was
//     starved of CPU): the queueing a real caller would see is counted, not
//     omitted (the coordinated-omission correction);
//   - at the actual send when the worker was early and slept until the due
//     time: what it overshoots by is the client's timer resolution, not the
//     server's queueing. Go's idle timer resolution on Linux is 1ms
//     (epoll_wait takes milliseconds), which would otherwise add ~0.5ms to
//     every request of every path and pull the ratios towards 1.
//
// The send lag (due -> send) and the pure due-time latency are logged too.
//
// Drift (CPU frequency, noisy neighbours, GC pacing on 2 shared cores) is
// reduced by splitting each path's load into slices run in rounds of one
// slice per path, the order reversed every other round (A B C, C B A, ...):
// over each pair of rounds every path has the same mean position, so a
// linear drift affects all equally. Paths never overlap.
func BenchmarkPodAdmission(b *testing.B) {
	cfg := loadConfig(b)
	// The control plane's production logger (cmd/tether-control-plane: zap,
	// JSON, info), writing nowhere: the handler's log calls cost what they
	// cost in production.
	logf.SetLogger(controlplane.LazyValues(zap.New(zap.WriteTo(io.Discard))))
	ctx := b.Context()

	env := startEnv(b, ctx)
	handler := podHandler(b, ctx, env)
	certPEM, keyPEM := benchutil.SelfSignedCert(b)
	baseURL := serveWebhooks(b, ctx, handler, certPEM, keyPEM)
	bareURL := serveBareFloor(b, ctx, certPEM, keyPEM)
	body := admissionReviewBody(b, ctx, env)

	httpClient := newClient(certPEM, cfg.http1, 1)
	b.Cleanup(httpClient.CloseIdleConnections)
	paths := []*measuredPath{
		{loadPath: &loadPath{name: "bare-floor", url: bareURL}},
		{loadPath: &loadPath{name: "floor", url: baseURL + floorPath}},
		{loadPath: &loadPath{name: "mutate-pod", url: baseURL + controlplane.PodWebhookPath, wantPatch: true}},
	}
	const bare, floor, inject = 0, 1, 2
	for _, p := range paths {
		checkOnce(b, httpClient, p.loadPath, body)
	}
	gen := startLoadGenerator(b, body, certPEM, cfg)
	b.Logf("load: %v rps open loop, %s measured per path and rate in %d slices, %s warmup per path and rate, %d workers, %s; AdmissionReview %d bytes",
		cfg.rates, cfg.duration, cfg.slices, cfg.warmup, cfg.workers, protoName(cfg), len(body))

	slice := cfg.duration / time.Duration(cfg.slices)
	results := make([][]summary, len(cfg.rates))
	b.Logf("CPU pressure before: %s", benchutil.CPUPressure())
	for b.Loop() {
		for r, rate := range cfg.rates {
			for _, p := range paths {
				p.reset()
				if cfg.warmup > 0 {
					p.run(b, gen, rate, cfg.warmup, false)
				}
			}
			for round := range cfg.slices {
				for k := range paths {
					if round%2 == 1 {
						k = len(paths) - 1 - k
					}
					paths[k].run(b, gen, rate, slice, true)
				}
			}
			results[r] = nil
			for _, p := range paths {
				results[r] = append(results[r], p.summary())
			}
		}
	}
	b.StopTimer()
	b.Logf("CPU pressure after:  %s", benchutil.CPUPressure())

	for r, rate := range cfg.rates {
		for _, s := range results[r] {
			b.Logf("%4d rps %-10s n=%d rps=%.1f p50=%.3fms p90=%.3fms p99=%.3fms p99.9=%.3fms max=%.3fms | from due: p50=%.3fms p99=%.3fms | send lag: p50=%.3fms p99=%.3fms | server CPU %.0fus/req, client %.0fus/req",
				rate, s.name, s.n, s.rps, ms(s.p50), ms(s.p90), ms(s.p99), ms(s.p999), ms(s.max), ms(s.due50), ms(s.due99), ms(s.lag50), ms(s.lag99), us(s.serverCPU), us(s.clientCPU))
		}
		bf, fl, in := results[r][bare], results[r][floor], results[r][inject]
		suffix := fmt.Sprintf("-%drps", rate)
		if rate == headlineRate {
			suffix = ""
			b.ReportMetric(ms(in.p50), "p50-ms")
			b.ReportMetric(in.rps, "rps")
			b.ReportMetric(ms(fl.p50), "floor-p50-ms")
			b.ReportMetric(ms(bf.p50), "bare-floor-p50-ms")
			b.ReportMetric(us(fl.serverCPU), "floor-server-cpu-us/req")
		}
		b.ReportMetric(ms(in.p99), "p99-ms"+suffix)
		b.ReportMetric(ms(fl.p99), "floor-p99-ms"+suffix)
		b.ReportMetric(ms(bf.p99), "bare-floor-p99-ms"+suffix)
		// CPU per request of the servers alone is what timing on a shared
		// machine cannot show: it holds still when neighbours steal cores.
		b.ReportMetric(us(in.serverCPU), "server-cpu-us/req"+suffix)
		b.ReportMetric(us(bf.serverCPU), "bare-floor-server-cpu-us/req"+suffix)
		if fl.p99 > 0 {
			b.ReportMetric(float64(in.p99)/float64(fl.p99), "x-floor"+suffix)
		}
		if bf.p99 > 0 {
			b.ReportMetric(float64(in.p99)/float64(bf.p99), "x-bare-floor"+suffix)
		}
		if bf.serverCPU > 0 {
			b.ReportMetric(float64(in.serverCPU)/float64(bf.serverCPU), "x-bare-floor-cpu"+suffix)
		}
	}
}

// measuredPath is a path and what its measured slices at the current rate
// collected.
type measuredPath struct {
	*loadPath
	latency, fromDue, lag []time.Duration
	elapsed               time.Duration
	serverCPU, clientCPU  time.Duration // summed over the measured slices
}

func (p *measuredPath) reset() {
	p.latency, p.fromDue, p.lag = nil, nil, nil
	p.elapsed, p.serverCPU, p.clientCPU = 0, 0, 0
}

// run has the load generator send one slice on p and, if record, keeps it.
// A failed request fails the benchmark.
func (p *measuredPath) run(b *testing.B, gen *loadGenerator, rate int, d time.Duration, record bool) {
	b.Helper()
	res, serverCPU, err := gen.run(sliceCommand{Name: p.name, URL: p.url, WantPatch: p.wantPatch, Rate: rate, Duration: d})
	if err != nil {
		b.Fatal(err)
	}
	if res.Failures > 0 {
		b.Fatalf("%s at %d rps: %d of %d requests failed; first: %s", p.name, rate, res.Failures, len(res.Latency), res.FirstFailure)
	}
	if !record {
		return
	}
	p.latency = append(p.latency, res.Latency...)
	p.fromDue = append(p.fromDue, res.FromDue...)
	p.lag = append(p.lag, res.Lag...)
	p.elapsed += res.Elapsed
	p.serverCPU += serverCPU
	p.clientCPU += res.ClientCPU
}

// startEnv starts kube-apiserver and etcd only: the webhook under test is
// served by the benchmark itself.
func startEnv(b *testing.B, ctx context.Context) *testenv.Env {
	b.Helper()
	_, err := testenv.Assets()
	benchutil.NeedBinaries(b, err)
	env, err := testenv.Start(ctx, testenv.Options{NoControlPlane: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.Stop(); err != nil {
			b.Log("stopping the API server:", err)
		}
	})
	// testenv installs Tether's MutatingWebhookConfiguration pointing at an
	// address nobody serves without the control plane; with failurePolicy
	// Fail it would deny the bound TrainJob (and the dry-run pod) below.
	// The benchmark calls its webhook server directly, so remove it.
	whc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tether-webhook"}}
	if err := env.Client.Delete(ctx, whc); err != nil {
		b.Fatal("deleting the MutatingWebhookConfiguration:", err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		b.Fatal(err)
	}
	tj := testobj.MakeTrainJob(trainJobName, namespace).Bound().
		Annotation(names.JobIDAnnotation, uuid.NewString()).
		Annotation(names.WorkerIDAnnotation, uuid.NewString()).
		Annotation(names.IncludeAnnotation, "checkpoints/**,*.safetensors").
		Obj()
	// The API server drops the webhook configuration from its informer a
	// moment after the delete.
	if err := retry(ctx, 10*time.Second, func() error { return env.Client.Create(ctx, tj.DeepCopy()) }); err != nil {
		b.Fatal("creating the bound TrainJob:", err)
	}
	return env
}

// podHandler builds the handler as pkg/controlplane wires it, with the
// TrainJob lookup served by a metadata-only informer cache and a real Events
// recorder (identical Events aggregate into one series, so the API server
// sees a handful of writes).
func podHandler(b *testing.B, ctx context.Context, env *testenv.Env) *mutate.PodHandler {
	b.Helper()
	// As the control plane's manager caches them: without managedFields,
	// which every Get would otherwise deep-copy.
	trainJobs, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		b.Fatal(err)
	}
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	if _, err := trainJobs.GetInformer(ctx, tj); err != nil {
		b.Fatal(err)
	}
	go func() {
		if err := trainJobs.Start(ctx); err != nil && ctx.Err() == nil {
			b.Error("TrainJob cache:", err)
		}
	}()
	if !trainJobs.WaitForCacheSync(ctx) {
		b.Fatal("TrainJob cache did not sync")
	}
	if err := trainJobs.Get(ctx, types.NamespacedName{Namespace: namespace, Name: trainJobName}, tj); err != nil {
		b.Fatal("TrainJob not in the cache:", err)
	}
	if !jobconfig.IsBound(tj.Labels) || tj.Annotations[names.JobIDAnnotation] == "" {
		b.Fatalf("cached TrainJob is not bound and stamped: labels %v annotations %v", tj.Labels, tj.Annotations)
	}

	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broadcaster.Shutdown)

	return &mutate.PodHandler{
		Injector: mutate.PodInjector{Sidecar: mutate.SidecarConfig{
			Image:     controlplane.DefaultOptions().SidecarImage,
			ServerURL: controlplane.DefaultOptions().ServerURL,
			Resources: mutate.DefaultSidecarResources(),
		}},
		TrainJobs: trainJobs,
		Recorder:  broadcaster.NewRecorder(env.Client.Scheme(), "tether"),
	}
}

// floorHandler is the least a pod webhook does: decode the pod, encode it,
// diff the two (no change, so an empty patch) and answer. The re-encoding is
// byte-identical to the request's pod (both are encoding/json output of the
// same corev1.Pod), so jsonpatch.CreatePatch returns at its bytes.Equal check:
// the floor never pays the JSON diff, and x-floor includes it for /mutate-pod.
// Everything around the handlers (TLS, HTTP/2, controller-runtime's
// AdmissionReview decoding and encoding, its metrics) is shared.
type floorHandler struct{}

func (floorHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	out, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, out)
}

// serveWebhooks serves /mutate-pod and /floor on 127.0.0.1 with
// controller-runtime's webhook server (TLS with the given certificate, HTTP/2
// offered, controller-runtime's latency metrics on both paths), as
// pkg/controlplane configures it, and returns its URL.
func serveWebhooks(b *testing.B, ctx context.Context, h *mutate.PodHandler, certPEM, keyPEM []byte) string {
	b.Helper()
	dir := b.TempDir()
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	port := freePort(b)
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	srv.Register(controlplane.PodWebhookPath, h) // as pkg/controlplane registers it
	srv.Register(floorPath, &webhook.Admission{Handler: floorHandler{}})
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	started := srv.StartedChecker()
	if err := retry(ctx, 10*time.Second, func() error {
		select {
		case err := <-done:
			return backoffStop{fmt.Errorf("webhook server stopped: %v", err)}
		default:
		}
		return started(nil)
	}); err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("https://127.0.0.1:%d", port)
}

// admissionReviewBody is the AdmissionReview kube-apiserver sends for node 0
// of the TrainJob's trainer replicated job. The pod is built with testobj,
// made to look like what a Trainer torch runtime renders, and passed once
// through the API server as a server-side dry run, so it carries exactly the
// defaults and built-in admission changes a webhook sees.
func admissionReviewBody(b *testing.B, ctx context.Context, env *testenv.Env) []byte {
	b.Helper()
	pod := testobj.MakeTrainerPod(trainJobName, namespace).Routed().
		Volume(corev1.Volume{Name: "initializer", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "initializer"}}}).
		Mount("node", corev1.VolumeMount{Name: "initializer", MountPath: "/workspace"}).
		RestrictedPodSecurity().
		Obj()
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: trainJobName + "-node-0",
		UID: types.UID(uuid.NewString()), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	pod.Spec.Hostname, pod.Spec.Subdomain = trainJobName+"-node-0-0", trainJobName
	trainer := &pod.Spec.Containers[0]
	trainer.Env = []corev1.EnvVar{
		{Name: "PET_NNODES", Value: "1"},
		{Name: "PET_NPROC_PER_NODE", Value: "8"},
		{Name: "PET_NODE_RANK", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.annotations['" + trainjob.CompletionIndexLabel + "']"}}},
		{Name: "PET_MASTER_ADDR", Value: trainJobName + "-node-0-0." + trainJobName},
		{Name: "PET_MASTER_PORT", Value: "29400"},
	}
	trainer.Ports = []corev1.ContainerPort{{ContainerPort: 29400, Protocol: corev1.ProtocolTCP}}
	trainer.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("128Gi"), "nvidia.com/gpu": resource.MustParse("8")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Gi"), "nvidia.com/gpu": resource.MustParse("8")},
	}

	// envtest runs kube-apiserver with the ServiceAccount admission plugin
	// disabled; add what it adds to every pod of a real cluster.
	pod.Spec.ServiceAccountName = "default"
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access-7xk2p", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o644), Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}})
	trainer.VolumeMounts = append(trainer.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-7xk2p",
		MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})

	if err := env.Client.Create(ctx, pod, client.DryRunAll); err != nil {
		b.Fatal("dry-run create of the trainer pod:", err)
	}
	// What a webhook sees at CREATE: no name yet (generateName), no uid,
	// resourceVersion, creationTimestamp or status; these are set after
	// mutating admission.
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	pod.Name, pod.UID, pod.ResourceVersion, pod.CreationTimestamp = "", "", "", metav1.Time{}
	pod.Status = corev1.PodStatus{}
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             types.UID(uuid.NewString()),
			Kind:            metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:        metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			RequestKind:     &metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			RequestResource: &metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace:       namespace,
			Operation:       admissionv1.Create,
			UserInfo: authenticationUser("system:serviceaccount:kube-system:job-controller",
				"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
			Object:  runtime.RawExtension{Raw: raw},
			DryRun:  ptr.To(false),
			Options: runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`)},
		},
	}
	body, err := json.Marshal(&review)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// checkOnce sends one request and checks the answer in full; for
// /mutate-pod it applies the patch and looks for the sidecar.
func checkOnce(b *testing.B, c *http.Client, p *loadPath, body []byte) {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	out, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	if err := p.check(resp.StatusCode, out, body, true); err != nil {
		b.Fatal(err)
	}
	var review admissionv1.AdmissionReview
	_ = json.Unmarshal(out, &review)
	detail := "no patch"
	if p.wantPatch {
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			b.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(review.Response.Patch)
		if err != nil {
			b.Fatalf("%s: patch: %v", p.name, err)
		}
		patched, err := patch.Apply(in.Request.Object.Raw)
		if err != nil {
			b.Fatalf("%s: applying the patch: %v", p.name, err)
		}
		var pod corev1.Pod
		if err := json.Unmarshal(patched, &pod); err != nil {
			b.Fatal(err)
		}
		if !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == mutate.SidecarName }) ||
			pod.Annotations[names.PodStatusAnnotation] == "" {
			b.Fatalf("%s: patched pod has no %s init container or no %s annotation", p.name, mutate.SidecarName, names.PodStatusAnnotation)
		}
		detail = fmt.Sprintf("%d-byte patch adds %s (%s)", len(review.Response.Patch), mutate.SidecarName, pod.Annotations[names.PodStatusAnnotation])
	}
	b.Logf("%s: %s, %d-byte response, %s", p.name, resp.Proto, len(out), detail)
}

type summary struct {
	name                     string
	n                        int
	rps                      float64
	p50, p90, p99, p999, max time.Duration
	due50, due99             time.Duration
	lag50, lag99             time.Duration
	serverCPU, clientCPU     time.Duration // per request
}

func (p *measuredPath) summary() summary {
	lat, due, lag := slices.Clone(p.latency), slices.Clone(p.fromDue), slices.Clone(p.lag)
	slices.Sort(lat)
	slices.Sort(due)
	slices.Sort(lag)
	s := summary{name: p.name, n: len(lat),
		p50: percentile(lat, 0.50), p90: percentile(lat, 0.90), p99: percentile(lat, 0.99), p999: percentile(lat, 0.999),
		due50: percentile(due, 0.50), due99: percentile(due, 0.99),
		lag50: percentile(lag, 0.50), lag99: percentile(lag, 0.99)}
	if len(lat) > 0 {
		s.max = lat[len(lat)-1]
		s.serverCPU = p.serverCPU / time.Duration(len(lat))
		s.clientCPU = p.clientCPU / time.Duration(len(lat))
	}
	if p.elapsed > 0 {
		s.rps = float64(len(lat)) / p.elapsed.Seconds()
	}
	return s
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func protoName(c benchConfig) string {
	if c.http1 {
		return "HTTP/1.1 keep-alive"
	}
	return "HTTP/2"
}

func authenticationUser(name string, groups ...string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: name, UID: uuid.NewString(), Groups: groups}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// backoffStop ends retry early with its error.
type backoffStop struct{ error }

// retry calls f every 100ms until it succeeds, returns backoffStop, or
// timeout passes.
func retry(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		var stop backoffStop
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stop):
			return stop.error
		case time.Now().After(deadline):
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
