package install

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/certs"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testobj"
)

const (
	// scrapeInterval is the ServiceMonitor's interval (the chart's value
	// metrics.serviceMonitor.interval; default 30s), evaluationInterval
	// Prometheus's rule evaluation: short, so the test waits seconds, not
	// minutes, for what a scrape or an evaluation shows.
	scrapeInterval     = "5s"
	evaluationInterval = "5s"
	// maxFor is the longest `for` of the test's copy of the rules: the
	// shipped ones (2m to 15m) would make the test wait 25 minutes more;
	// a pending alert still has to hold that long to fire. Expressions are
	// the shipped ones, unchanged. (TetherHeartbeatLost's shipped `for` is
	// 1m: a replica stops exporting a lost worker's
	// tether_job_heartbeat_age_seconds 10 x --missed-heartbeats intervals
	// after its last heartbeat, 300s at the default 10s interval, so the
	// age must pass 120s and hold 1m before that; the earlier 5m never
	// could. pkg/bindingserver/liveness.go.)
	maxFor = 30 * time.Second
)

// TestPrometheusScrapesAndAlerts: a real Prometheus (Debian's, as a host
// process) scrapes the installed control plane as prometheus-operator
// would from the chart's ServiceMonitor (rendered by `helm template`: its
// selector, port, scheme, path, honorLabels, TLS and bearer token; the
// token of a ServiceAccount bound to the chart's tether-metrics-reader) and
// evaluates the chart's PrometheusRule. With a labeled TrainJob running on a
// real node, every replica is a healthy target, every panel query of the
// chart's dashboard returns series for the job (its $namespace the job's)
// and no alert fires; then each shipped alert fires for a real cause and
// resolves once the cause ends:
//   - TetherUploadFailures: the in-cluster store scaled to 0 while the job
//     uploads checkpoints (the control plane refuses the uploads with 503);
//   - TetherAdmissionDenied: one labeled TrainJob with an invalid
//     tether.dev/heartbeat-interval, denied by the TrainJob webhook;
//   - TetherHeartbeatLost: the job's session black-holed in its pod's
//     network namespace (localcluster.RealNode.BlackholePod), then healed;
//   - TetherTrainerStalled: a second job whose trainer stands still after
//     step 3 while its sidecar heartbeats (tether.dev/stall-after: 1m);
//     deleting the job resolves it;
//   - TetherCertificateExpiresSoon: a serving certificate valid 3 days put
//     in the Secret while an admission policy keeps the control plane's
//     rotator from replacing it (the rotation failure the alert is for);
//     the policy removed, the rotator renews it;
//   - TetherNoReadyReplica: the control plane's Deployment scaled to 0,
//     then back.
//
// The two increase()[10m] alerts resolve 10 minutes after their cause, so
// the test takes about 13 minutes. Every `for` above 30s is 30s in the
// test's copy of the rules (maxFor).
func TestPrometheusScrapesAndAlerts(t *testing.T) {
	// About 13 minutes (two alerts resolve only after their rules' 10-minute
	// windows), and it scales the control plane to 0 and rotates its
	// certificate under the other tests: run in a process (and so on a
	// cluster) of its own, by make e2e-monitoring or make e2e's third lane.
	if os.Getenv("TETHER_E2E_MONITORING") != "1" {
		t.Skip("set TETHER_E2E_MONITORING=1 and run it alone (make e2e-monitoring; make e2e does): about 13 minutes, and it disturbs the installed control plane the other tests share")
	}
	start := time.Now()
	defer func() { logf("TestPrometheusScrapesAndAlerts: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	const ns, name = "prometheus-scraped", "scraped-finetune"

	mon := renderMonitoring(t, scrapeInterval)
	dir := filepath.Join(cluster.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Prometheus's ServiceAccount token: its bearerTokenFile, and what
	// discovery reads the API server with.
	token := prometheusToken(t, mon.ServiceMonitor)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	sd := startEndpointSliceSD(t, token, mon.ServiceMonitor.Spec.NamespaceSelector.MatchNames)
	groups, changed, err := shortenFor(mon.RuleGroups, maxFor)
	if err != nil {
		t.Fatal(err)
	}
	logf("the test's copy of the chart's rules: %s (expressions unchanged)", strings.Join(changed, ", "))
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := prometheusConfig(mon.ServiceMonitor, sd.url, tokenFile, "rules.yaml", evaluationInterval)
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, dir, cfg)
	w := &alertWatch{p: prom, exprs: map[string]string{}}
	for _, g := range mon.RuleGroups {
		for _, r := range g.Rules {
			if a, ok := r["alert"].(string); ok {
				w.exprs[a], _ = r["expr"].(string)
			}
		}
	}
	shipped := slices.Sorted(maps.Keys(w.exprs))
	// The alerts this test causes; a new rule must be given a scenario here.
	caused := []string{"TetherAdmissionDenied", "TetherCertificateExpiresSoon", "TetherHeartbeatLost", "TetherNoReadyReplica", "TetherTrainerStalled", "TetherUploadFailures"}
	if !slices.Equal(shipped, caused) {
		t.Fatalf("the chart ships alerts %v; this test causes %v: give each new one a scenario", shipped, caused)
	}

	// The job: a checkpoint every 5 steps keeps uploads going; it runs far
	// longer than the test needs it and is deleted before the outage.
	createBoundJob(t, ns, name, localcluster.TrainerPlan{Steps: 1200, CheckpointEvery: 5, StepInterval: time.Second})
	t.Cleanup(func() {
		_ = cluster.Client.Delete(context.Background(), &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			crclient.PropagationPolicy(metav1.DeletePropagationBackground))
	})
	pod := waitPod(t, ns, name, 120*time.Second, "the trainer pod running", func(p *corev1.Pod) error {
		return running(p, mutate.SidecarName, "node")
	})
	waitBinding(t, ns, name, 120*time.Second, "Running (heartbeats arriving)", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhaseRunning {
			return fmt.Errorf("phase %s/%s", wb.Status.Phase, wb.Status.Reason)
		}
		return nil
	})

	checkTargets(t, prom, mon.ServiceMonitor)
	w.quiet(t, 90*time.Second)
	logf("prometheus: both replicas scraped, no alert active, %.1fs into the test", time.Since(start).Seconds())

	// A stalled trainer: after step 3 it stands still for longer than the
	// test runs while its sidecar heartbeats, under the shortest stall
	// window a TrainJob can set. Its alert is checked after the others'
	// causes, by when it has long fired.
	const stallNS, stallName = "prometheus-stalled", "stalled-finetune"
	createBoundJob(t, stallNS, stallName, localcluster.TrainerPlan{Steps: 10, StepInterval: time.Second, StallAtStep: 3, StallFor: time.Hour},
		func(w *testobj.TrainJobWrapper) { w.Annotation(names.StallAfterAnnotation, "1m") })
	stallFrom := time.Now()
	t.Cleanup(func() {
		_ = cluster.Client.Delete(context.Background(), &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: stallNS, Name: stallName}},
			crclient.PropagationPolicy(metav1.DeletePropagationBackground))
	})

	// Upload failures: the store goes away under the job's uploads. One
	// TrainJob denied meanwhile (the TrainJob webhook answers at once).
	storeDown := time.Now()
	scaleDeployment(t, localcluster.StoreService, 0)
	storeRestored := false
	t.Cleanup(func() {
		if !storeRestored {
			scaleDeployment(t, localcluster.StoreService, 1)
		}
	})
	deniedAt := denyTrainJob(t, ns)
	w.firing(t, "TetherAdmissionDenied", map[string]string{"webhook": "trainjob"}, deniedAt, 60*time.Second)
	upload := w.firing(t, "TetherUploadFailures", nil, storeDown, 4*time.Minute)
	if !strings.HasPrefix(upload.Labels["reason"], "artifact_") {
		t.Errorf("TetherUploadFailures fired for reason %q, want an artifact_* refusal", upload.Labels["reason"])
	}
	scaleDeployment(t, localcluster.StoreService, 1)
	storeRestored = true
	waitDeploymentReady(t, localcluster.StoreService, 1, 3*time.Minute)
	storeUp := time.Now()
	logf("the store was down %.1fs (reason of the refusals: %s)", storeUp.Sub(storeDown).Seconds(), upload.Labels["reason"])

	// The dashboard, with the job running (and an upload refused: the
	// upload-failures panel has series only once one was).
	checkDashboard(t, prom, mon.Dashboard, ns)

	// Heartbeat lost: the job's session black-holed in its pod. Meanwhile
	// a short certificate the rotator cannot replace (kubelet's Secret
	// volume updates take up to a minute or so, the black hole two).
	svc := &corev1.Service{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: localcluster.ControlPlaneService}, svc); err != nil {
		t.Fatal(err)
	}
	var bindingPort int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "binding" {
			bindingPort = p.Port
		}
	}
	if bindingPort == 0 {
		t.Fatalf("Service %s has no port named binding: %+v", svc.Name, svc.Spec.Ports)
	}
	node := cluster.RealNodeNamed(pod.Spec.NodeName)
	sidecarID := containerID(t, pod.Status.InitContainerStatuses, mutate.SidecarName)
	if err := node.BlackholePod(sidecarID, bindingPort, true); err != nil {
		t.Fatal(err)
	}
	holeAt := time.Now()
	healed := false
	heal := func() {
		if !healed {
			healed = true
			if err := node.BlackholePod(sidecarID, bindingPort, false); err != nil {
				t.Errorf("ending the black hole: %v", err)
			}
		}
	}
	t.Cleanup(heal)
	cert := freezeShortCertificate(t)

	jobLabels := map[string]string{"namespace": ns, "trainjob": name, "node": "0"}
	w.firing(t, "TetherHeartbeatLost", jobLabels, holeAt, 5*time.Minute)
	wb := waitBinding(t, ns, name, 10*time.Second, "HeartbeatLost during the black hole", func(wb *tetherv1.WorkerBinding) error {
		if !meta.IsStatusConditionTrue(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost) {
			return fmt.Errorf("condition HeartbeatLost not true: %+v", wb.Status.Conditions)
		}
		return nil
	})
	heal()
	healAt := time.Now()
	logf("black hole of %s's session: %.1fs (binding %s/%s)", pod.Name, healAt.Sub(holeAt).Seconds(), wb.Status.Phase, wb.Status.Reason)
	w.resolved(t, "TetherHeartbeatLost", jobLabels, healAt, 3*time.Minute)
	waitBinding(t, ns, name, 60*time.Second, "heartbeats back after the black hole", func(wb *tetherv1.WorkerBinding) error {
		if c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost); c != nil && c.Status != metav1.ConditionFalse {
			return fmt.Errorf("HeartbeatLost %+v", c)
		}
		if wb.Status.Phase != tetherv1.PhaseRunning {
			return fmt.Errorf("phase %s/%s", wb.Status.Phase, wb.Status.Reason)
		}
		return nil
	})

	stalledLabels := map[string]string{"namespace": stallNS, "trainjob": stallName}
	w.firing(t, "TetherTrainerStalled", stalledLabels, stallFrom, 5*time.Minute)
	waitBinding(t, stallNS, stallName, 10*time.Second, "Progressing=False/TrainerStalled", func(wb *tetherv1.WorkerBinding) error {
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionProgressing)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tetherv1.ReasonTrainerStalled {
			return fmt.Errorf("condition Progressing %+v (phase %s/%s)", c, wb.Status.Phase, wb.Status.Reason)
		}
		return nil
	})
	deleteJob(t, stallNS, stallName)
	w.resolved(t, "TetherTrainerStalled", stalledLabels, time.Now(), 3*time.Minute)

	w.firing(t, "TetherCertificateExpiresSoon", nil, cert.writtenAt, 4*time.Minute)
	renewedAt := cert.release(t)
	w.resolved(t, "TetherCertificateExpiresSoon", nil, renewedAt, 4*time.Minute)

	// No ready replica: the job goes first (its sidecar would lose its
	// session), then every replica.
	deleteJob(t, ns, name)
	down := time.Now()
	scaleDeployment(t, localcluster.ControlPlaneService, 0)
	restored := false
	t.Cleanup(func() {
		if !restored {
			scaleDeployment(t, localcluster.ControlPlaneService, 2)
		}
	})
	w.firing(t, "TetherNoReadyReplica", nil, down, 3*time.Minute)
	scaleDeployment(t, localcluster.ControlPlaneService, 2)
	restored = true
	up := time.Now()
	w.resolved(t, "TetherNoReadyReplica", nil, up, 4*time.Minute)
	waitInstalledReady(t)
	logf("the control plane is back, both replicas ready, %.1fs after the scale-up", time.Since(up).Seconds())

	// increase(...[10m]) > 0: 10 minutes after the last refusal or denial.
	// The black hole may have cut an upload too (the control plane then
	// refuses its body: artifact_incomplete_body), an alert of its own
	// reason, resolving later: the store outage's is the one waited for.
	w.resolved(t, "TetherAdmissionDenied", map[string]string{"webhook": "trainjob"}, deniedAt, time.Until(deniedAt.Add(12*time.Minute)))
	w.resolved(t, "TetherUploadFailures", map[string]string{"reason": upload.Labels["reason"]}, storeUp, time.Until(storeUp.Add(12*time.Minute)))
	if as, err := prom.alerts(ctx); err == nil {
		for _, a := range as {
			logf("still %s at the end: %v (since %s, value %s)", a.State, a.Labels, a.ActiveAt.Format(time.TimeOnly), a.Value)
		}
	}
}

// prometheusToken creates Prometheus's ServiceAccount as a platform team
// has it: allowed to discover (get, list and watch Services, Endpoints,
// EndpointSlices and Pods) in the ServiceMonitor's namespaces, and bound
// to the chart's tether-metrics-reader (as the chart's metrics.readers
// value binds it); and returns a token of it.
func prometheusToken(t *testing.T, sm serviceMonitor) string {
	t.Helper()
	const ns, name = "monitoring", "prometheus"
	objs := []crclient.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tether-metrics-reader-" + ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "tether-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}},
	}
	for _, target := range sm.Spec.NamespaceSelector.MatchNames {
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-discovery", Namespace: target}, Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"services", "endpoints", "pods"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-discovery", Namespace: target},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "prometheus-discovery"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}})
	}
	return createAndToken(t, ns, name, objs...)
}

// checkTargets waits until Prometheus scrapes every running control-plane
// replica, and only those, as the ServiceMonitor describes: its port by
// name (the container's port of that name), scheme, path; health up; the
// operator's target labels.
func checkTargets(t *testing.T, prom *promServer, sm serviceMonitor) {
	t.Helper()
	ctx := context.Background()
	ep := sm.Spec.Endpoints[0]
	eventually(t, 90*time.Second, "prometheus scraping every replica", func() error {
		pods, err := cluster.Installed.ControlPlanePods(ctx)
		if err != nil {
			return err
		}
		want := map[string]string{}
		for _, p := range pods {
			var port int32
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == ep.Port {
						port = cp.ContainerPort
					}
				}
			}
			want[(&url.URL{Scheme: ep.Scheme, Host: net.JoinHostPort(p.Status.PodIP, fmt.Sprint(port)), Path: ep.Path}).String()] = p.Name
		}
		ts, err := prom.targets(ctx)
		if err != nil {
			return err
		}
		var problems []string
		seen := map[string]bool{}
		for _, tg := range ts {
			podName, ok := want[tg.ScrapeURL]
			if !ok {
				problems = append(problems, "unexpected target "+tg.ScrapeURL)
				continue
			}
			seen[tg.ScrapeURL] = true
			if tg.Health != "up" {
				problems = append(problems, fmt.Sprintf("%s: %s %s", tg.ScrapeURL, tg.Health, tg.LastError))
			}
			for k, v := range map[string]string{"job": localcluster.ControlPlaneService, "namespace": localcluster.ControlPlaneNamespace,
				"service": localcluster.ControlPlaneService, "endpoint": ep.Port, "pod": podName, "container": controlPlaneContainer} {
				if tg.Labels[k] != v {
					problems = append(problems, fmt.Sprintf("%s: label %s=%q, want %q", tg.ScrapeURL, k, tg.Labels[k], v))
				}
			}
		}
		for u := range want {
			if !seen[u] {
				problems = append(problems, "no target "+u)
			}
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s\n%s", strings.Join(problems, "\n"), prom.describe(ctx))
		}
		return nil
	})
}

var (
	templateVar  = regexp.MustCompile(`\$(\w+)|\$\{(\w+)\}`)
	labelValuesQ = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*(\w+)\s*\)$`)
)

// checkDashboard queries every panel target of the dashboard with its
// template variables set for the job's namespace ns, and each variable's
// own label_values query, and fails unless each returns the job's series.
func checkDashboard(t *testing.T, prom *promServer, raw []byte, ns string) {
	t.Helper()
	ctx := context.Background()
	var d struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("the chart's dashboard: %v", err)
	}
	values := map[string]string{}
	for _, v := range d.Templating.List {
		switch {
		case v.Type == "datasource":
			values[v.Name] = "" // not in a query
		case v.Type == "query" && v.Name == "namespace":
			values[v.Name] = regexp.QuoteMeta(ns)
			// The variable's own query: the namespaces the dropdown offers.
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				_ = json.Unmarshal(v.Query, &q.Query)
			}
			m := labelValuesQ.FindStringSubmatch(q.Query)
			if m == nil {
				t.Fatalf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
			}
			eventually(t, 60*time.Second, "the dashboard's $"+v.Name+" offering "+ns, func() error {
				var vals []string
				if err := prom.api(ctx, "/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {m[1]}}, &vals); err != nil {
					return err
				}
				if !slices.Contains(vals, ns) {
					return fmt.Errorf("%s gives %v", q.Query, vals)
				}
				return nil
			})
		default:
			t.Fatalf("dashboard variable %s of type %s: the test does not know what to set it to", v.Name, v.Type)
		}
	}
	type panelQuery struct{ title, expr string }
	var queries []panelQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := templateVar.ReplaceAllStringFunc(tg.Expr, func(s string) string {
				m := templateVar.FindStringSubmatch(s)
				n := m[1] + m[2]
				v, ok := values[n]
				if !ok {
					t.Fatalf("panel %q: query %s uses $%s, which the dashboard does not define", p.Title, tg.Expr, n)
				}
				return v
			})
			queries = append(queries, panelQuery{p.Title, expr})
		}
	}
	if len(queries) == 0 {
		t.Fatal("the dashboard has no panel query")
	}
	counts := make([]int, len(queries))
	eventually(t, 90*time.Second, "every panel query of the dashboard returning series", func() error {
		var empty []string
		for i, q := range queries {
			s, err := prom.query(ctx, q.expr)
			if err != nil {
				return err
			}
			counts[i] = len(s)
			if len(s) == 0 {
				empty = append(empty, fmt.Sprintf("panel %q: %s", q.title, q.expr))
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("no series:\n%s\n%s", strings.Join(empty, "\n"), prom.describe(ctx))
		}
		return nil
	})
	var summary []string
	for i, q := range queries {
		summary = append(summary, fmt.Sprintf("%s: %d", q.title, counts[i]))
	}
	logf("dashboard: all %d panel queries return series (%s)", len(queries), strings.Join(summary, "; "))
}

// denyTrainJob creates a labeled TrainJob whose heartbeat interval does
// not parse: the TrainJob webhook denies it. It returns when.
func denyTrainJob(t *testing.T, ns string) time.Time {
	t.Helper()
	tj := testobj.MakeTrainJob("denied-heartbeat", ns).Runtime(localcluster.TorchRuntime).Bound().Obj()
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[names.HeartbeatIntervalAnnotation] = "every now and then"
	at := time.Now()
	err := cluster.Client.Create(context.Background(), tj)
	if err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("a TrainJob with %s=%q: want the webhook's denial, got %v", names.HeartbeatIntervalAnnotation, "every now and then", err)
	}
	logf("TrainJob %s/%s denied: %v", ns, tj.Name, err)
	return at
}

// scaleDeployment sets Deployment name's replicas in tether-system.
func scaleDeployment(t *testing.T, name string, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ControlPlaneNamespace, Name: name}}
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if err := cluster.Client.Patch(context.Background(), d, crclient.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("scaling %s to %d: %v", name, replicas, err)
	}
	logf("deployment %s scaled to %d", name, replicas)
}

func waitDeploymentReady(t *testing.T, name string, replicas int32, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "deployment "+name+" ready", func() error {
		var d appsv1.Deployment
		if err := cluster.Client.Get(context.Background(), crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: name}, &d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas != replicas || d.Status.UpdatedReplicas != replicas || d.Status.Replicas != replicas {
			return fmt.Errorf("%d replicas, %d updated, %d ready; want %d", d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, replicas)
		}
		return nil
	})
}

// waitInstalledReady waits for what the install waited for: both
// replicas ready behind the Service, the webhook answering (a labeled
// TrainJob stamped in a dry run), the read API's APIService available.
func waitInstalledReady(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	waitDeploymentReady(t, localcluster.ControlPlaneService, 2, 3*time.Minute)
	eventually(t, 2*time.Minute, "the webhooks and the read API served again", func() error {
		ips, err := cluster.Installed.ReadyEndpoints(ctx)
		if err != nil || len(ips) != 2 {
			return fmt.Errorf("ready endpoints %v (%v)", ips, err)
		}
		tj := &trainer.TrainJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "prometheus-test-check", Labels: map[string]string{names.BindLabel: "true"}},
			Spec:       trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: localcluster.TorchRuntime}},
		}
		if err := cluster.Client.Create(ctx, tj, crclient.DryRunAll); err != nil {
			return err
		}
		if tj.Annotations[names.JobIDAnnotation] == "" {
			return fmt.Errorf("a labeled TrainJob admitted without %s", names.JobIDAnnotation)
		}
		if cluster.Installed.ReadAPI {
			if ok, err := cluster.Installed.ReadAPIAvailable(ctx); !ok {
				return fmt.Errorf("read API not Available (%v)", err)
			}
		}
		return nil
	})
}

// deleteJob deletes the TrainJob and waits for its pods to go.
func deleteJob(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := cluster.Client.Delete(ctx, tj, crclient.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the TrainJob's pods gone", func() error {
		var pods corev1.PodList
		if err := cluster.Client.List(ctx, &pods, crclient.InNamespace(ns)); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left (%s %s)", len(pods.Items), pods.Items[0].Name, pods.Items[0].Status.Phase)
		}
		return nil
	})
}

// frozenCert is a short serving certificate held in place.
type frozenCert struct {
	secret, policy string
	writtenAt      time.Time
}

// freezeShortCertificate makes the serving certificate expire in 3 days
// and keeps it so, as a rotation that fails would: a
// ValidatingAdmissionPolicy denies the control plane's ServiceAccount any
// update of the certificate Secret (checked by a dry run as that
// ServiceAccount), then the Secret's tls.crt is replaced with one for the
// same key and names, from the same CA (ca.key is in the Secret), valid 3
// days. The webhooks and the sidecars keep trusting it; the kubelet puts it
// in the replicas' volumes, where tether_certificate_expiry_timestamp_seconds
// reads it.
func freezeShortCertificate(t *testing.T) *frozenCert {
	t.Helper()
	ctx := context.Background()
	var dep appsv1.Deployment
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: localcluster.ControlPlaneService}, &dep); err != nil {
		t.Fatal(err)
	}
	fc := &frozenCert{policy: "prometheus-test-freeze-serving-certificate"}
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--cert-secret="); ok {
				fc.secret = v
			}
		}
	}
	if fc.secret == "" {
		t.Fatalf("the control plane's Deployment names no --cert-secret")
	}
	user := "system:serviceaccount:" + localcluster.ControlPlaneNamespace + ":" + dep.Spec.Template.Spec.ServiceAccountName
	adm := cluster.Clientset.AdmissionregistrationV1()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fc.policy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: []string{fc.secret},
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "control-plane", Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			Validations:     []admissionregistrationv1.Validation{{Expression: "false", Message: "the test holds the serving certificate in place"}},
		},
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: fc.policy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: fc.policy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fc.unfreeze(t) })
	as := rest.CopyConfig(cluster.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + localcluster.ControlPlaneNamespace, "system:authenticated"}}
	asCP, err := kubernetes.NewForConfig(as)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the policy denying the control plane's updates of the certificate", func() error {
		return fc.dryRunUpdate(asCP, true)
	})

	sec, err := cluster.Clientset.CoreV1().Secrets(localcluster.ControlPlaneNamespace).Get(ctx, fc.secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := parseCert(sec.Data["tls.crt"])
	if err != nil {
		t.Fatalf("Secret %s tls.crt: %v", fc.secret, err)
	}
	ca, err := certs.Load(sec.Data["ca.crt"], sec.Data["ca.key"])
	if err != nil {
		t.Fatalf("Secret %s ca.crt and ca.key: %v", fc.secret, err)
	}
	notAfter := time.Now().Add(72 * time.Hour)
	if sec.Data["tls.crt"], err = ca.Reissue(leaf, notAfter); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Clientset.CoreV1().Secrets(localcluster.ControlPlaneNamespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.writtenAt = time.Now()
	logf("Secret %s: tls.crt valid until %s (was %s); the control plane's updates of it denied", fc.secret,
		notAfter.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	// The rotator saw the change and was denied: the short one stays.
	time.Sleep(5 * time.Second)
	if cur, err := fc.notAfter(); err != nil || !cur.Equal(notAfter.Truncate(time.Second)) {
		t.Fatalf("the short certificate did not stay in Secret %s (now valid until %v, %v): was the rotator's update denied?", fc.secret, cur, err)
	}
	return fc
}

// dryRunUpdate updates the Secret as cs in a dry run: denied says
// whether the policy must deny it.
func (fc *frozenCert) dryRunUpdate(cs kubernetes.Interface, denied bool) error {
	ctx := context.Background()
	sec, err := cs.CoreV1().Secrets(localcluster.ControlPlaneNamespace).Get(ctx, fc.secret, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations["tether.dev/prometheus-test"] = "dry-run"
	_, err = cs.CoreV1().Secrets(localcluster.ControlPlaneNamespace).Update(ctx, sec, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case denied && err == nil:
		return fmt.Errorf("an update as the control plane was admitted")
	case denied && !strings.Contains(err.Error(), fc.policy):
		return fmt.Errorf("an update as the control plane failed, not by the policy: %w", err)
	case !denied:
		return err
	}
	return nil
}

// unfreeze removes the policy (idempotent).
func (fc *frozenCert) unfreeze(t *testing.T) {
	ctx := context.Background()
	adm := cluster.Clientset.AdmissionregistrationV1()
	for _, err := range []error{
		adm.ValidatingAdmissionPolicyBindings().Delete(ctx, fc.policy, metav1.DeleteOptions{}),
		adm.ValidatingAdmissionPolicies().Delete(ctx, fc.policy, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing policy %s: %v", fc.policy, err)
		}
	}
}

// release removes the policy and lets the rotator do its work: a change
// of the Secret (an annotation) has it check the certificate, find it
// expiring within its lookahead and issue a new one. It returns when the
// Secret holds a certificate valid for more than the alert's 7 days.
func (fc *frozenCert) release(t *testing.T) time.Time {
	t.Helper()
	ctx := context.Background()
	fc.unfreeze(t)
	secrets := cluster.Clientset.CoreV1().Secrets(localcluster.ControlPlaneNamespace)
	eventually(t, 90*time.Second, "the rotator renewing the short certificate", func() error {
		na, err := fc.notAfter()
		if err != nil {
			return err
		}
		if time.Until(na) > 7*24*time.Hour {
			return nil
		}
		// Touch the Secret: the rotator reconciles it on every change.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"tether.dev/prometheus-test":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := secrets.Patch(ctx, fc.secret, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		return fmt.Errorf("still valid until %s", na)
	})
	na, _ := fc.notAfter()
	logf("Secret %s renewed by the rotator %.1fs after the short certificate was written: valid until %s", fc.secret,
		time.Since(fc.writtenAt).Seconds(), na.Format(time.RFC3339))
	return time.Now()
}

func (fc *frozenCert) notAfter() (time.Time, error) {
	sec, err := cluster.Clientset.CoreV1().Secrets(localcluster.ControlPlaneNamespace).Get(context.Background(), fc.secret, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	c, err := parseCert(sec.Data["tls.crt"])
	if err != nil {
		return time.Time{}, err
	}
	return c.NotAfter, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("no PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}
