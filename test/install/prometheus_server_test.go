package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// The monitoring the chart ships, as `helm template` renders it with the
// values that turn it on (metrics.serviceMonitor.enabled and its interval,
// metrics.prometheusRule.enabled, metrics.dashboard.enabled).
type chartMonitoring struct {
	ServiceMonitor serviceMonitor
	// RuleGroups are the PrometheusRule's spec.groups, as the operator
	// hands them to Prometheus.
	RuleGroups []ruleGroup
	// Dashboard is the ConfigMap's Grafana dashboard (JSON).
	Dashboard []byte
}

type serviceMonitor struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []smEndpoint `json:"endpoints"`
	} `json:"spec"`
}

type smEndpoint struct {
	Port            string `json:"port"`
	Path            string `json:"path"`
	Scheme          string `json:"scheme"`
	HonorLabels     bool   `json:"honorLabels"`
	BearerTokenFile string `json:"bearerTokenFile"`
	TLSConfig       struct {
		InsecureSkipVerify bool `json:"insecureSkipVerify"`
	} `json:"tlsConfig"`
	Interval string `json:"interval"`
}

// The ServiceMonitor fields prometheusConfig translates; any other makes
// the test fail rather than scrape differently from the operator.
var (
	smSpecFields     = []string{"selector", "namespaceSelector", "endpoints"}
	smSelectorFields = []string{"matchLabels"}
	smEndpointFields = []string{"port", "path", "scheme", "honorLabels", "bearerTokenFile", "tlsConfig", "interval"}
	smTLSFields      = []string{"insecureSkipVerify"}
)

type ruleGroup struct {
	Name  string           `json:"name"`
	Rules []map[string]any `json:"rules"`
}

// renderMonitoring runs `helm template` of charts/tether with the
// monitoring on, interval the ServiceMonitor's scrape interval (a value a
// team sets), and returns what it rendered.
func renderMonitoring(t *testing.T, interval string) chartMonitoring {
	t.Helper()
	sv, err := cluster.Clientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(cluster.Assets, "helm"), "template", "tether", filepath.Join(testenv.RepoRoot(), "charts", "tether"),
		"--namespace", "tether-system", "--kube-version", sv.GitVersion,
		"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval="+interval,
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true",
		"--show-only", "templates/servicemonitor.yaml", "--show-only", "templates/prometheusrule.yaml", "--show-only", "templates/dashboard.yaml")
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template (the chart's monitoring): %v\n%s", err, stderr.Bytes())
	}
	var m chartMonitoring
	kinds := map[string]bool{}
	for doc := range strings.SplitSeq(out.String(), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("helm template output: %v\n%s", err, doc)
		}
		if obj == nil {
			continue
		}
		kind, _ := obj["kind"].(string)
		kinds[kind] = true
		switch kind {
		case "ServiceMonitor":
			checkFields(t, "ServiceMonitor spec", obj, smSpecFields, "spec")
			checkFields(t, "ServiceMonitor spec.selector", obj, smSelectorFields, "spec", "selector")
			spec, _ := obj["spec"].(map[string]any)
			eps, _ := spec["endpoints"].([]any)
			for i, ep := range eps {
				e, _ := ep.(map[string]any)
				checkFields(t, fmt.Sprintf("ServiceMonitor endpoint %d", i), e, smEndpointFields)
				checkFields(t, fmt.Sprintf("ServiceMonitor endpoint %d tlsConfig", i), e, smTLSFields, "tlsConfig")
			}
			if err := yaml.Unmarshal([]byte(doc), &m.ServiceMonitor); err != nil {
				t.Fatal(err)
			}
		case "PrometheusRule":
			var pr struct {
				Spec struct {
					Groups []ruleGroup `json:"groups"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &pr); err != nil {
				t.Fatal(err)
			}
			m.RuleGroups = pr.Spec.Groups
		case "ConfigMap":
			var cm struct {
				Data map[string]string `json:"data"`
			}
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			for k, v := range cm.Data {
				if strings.HasSuffix(k, ".json") {
					m.Dashboard = []byte(v)
				}
			}
		}
	}
	if !kinds["ServiceMonitor"] || len(m.RuleGroups) == 0 || m.Dashboard == nil || len(m.ServiceMonitor.Spec.Endpoints) == 0 {
		t.Fatalf("helm template rendered kinds %v: want a ServiceMonitor with endpoints, a PrometheusRule with groups and the dashboard's ConfigMap\n%s",
			slices.Sorted(maps.Keys(kinds)), out.Bytes())
	}
	return m
}

// checkFields fails t if the object at path in obj has a field outside known.
func checkFields(t *testing.T, what string, obj map[string]any, known []string, path ...string) {
	t.Helper()
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return
		}
		cur = next
	}
	for k := range cur {
		if !slices.Contains(known, k) {
			t.Fatalf("%s has field %q, which this test does not translate into Prometheus's configuration (it knows %v): teach prometheusConfig", what, k, known)
		}
	}
}

// labelName is a Kubernetes label key as Prometheus's service discovery
// names it in __meta_* labels.
var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// prometheusConfig is Prometheus's configuration for sm as prometheus-operator
// renders a ServiceMonitor (its generated scrape job, with the Prometheus
// resource's serviceDiscoveryRole EndpointSlice: this cluster's
// controller-manager keeps EndpointSlices only, v1 Endpoints being
// deprecated): keep the Services with the selector's labels and the
// endpoint port by name, the operator's target labels (namespace, service,
// pod, container, job = the Service's name, endpoint = the port's name),
// its scheme, path, interval and honorLabels, tlsConfig, and
// bearerTokenFile, Prometheus's own ServiceAccount token (here tokenFile).
// One difference, discovery: Debian builds Prometheus without
// kubernetes_sd_configs (removed "due to the insane amount of
// dependencies", its NEWS.Debian), so the targets come from sdURL
// (http_sd_configs), which serves what kubernetes_sd's endpointslice role
// would discover in the ServiceMonitor's namespaces, with the same __meta_
// labels, read from the API server with that token (endpointSliceSD).
// Everything from there on, relabeling, scraping, rules, is Prometheus's.
func prometheusConfig(sm serviceMonitor, sdURL, tokenFile, ruleFile, evaluation string) ([]byte, error) {
	var jobs []any
	for i, ep := range sm.Spec.Endpoints {
		if ep.Port == "" {
			return nil, fmt.Errorf("endpoint %d selects no port by name", i)
		}
		relabel := []any{
			map[string]any{"source_labels": []string{"job"}, "target_label": "__tmp_prometheus_job_name"},
		}
		for _, k := range slices.Sorted(maps.Keys(sm.Spec.Selector.MatchLabels)) {
			n := invalidLabelChars.ReplaceAllString(k, "_")
			relabel = append(relabel, map[string]any{"action": "keep",
				"source_labels": []string{"__meta_kubernetes_service_label_" + n, "__meta_kubernetes_service_labelpresent_" + n},
				"regex":         "(" + regexp.QuoteMeta(sm.Spec.Selector.MatchLabels[k]) + ");true"})
		}
		target := func(kind, label string) map[string]any {
			return map[string]any{"source_labels": []string{"__meta_kubernetes_endpointslice_address_target_kind", "__meta_kubernetes_endpointslice_address_target_name"},
				"separator": ";", "regex": kind + ";(.*)", "replacement": "${1}", "target_label": label}
		}
		relabel = append(relabel,
			map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_endpointslice_port_name"}, "regex": regexp.QuoteMeta(ep.Port)},
			target("Node", "node"), target("Pod", "pod"),
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
			map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
			map[string]any{"target_label": "endpoint", "replacement": ep.Port},
		)
		job := map[string]any{
			"job_name":        fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.Metadata.Namespace, sm.Metadata.Name, i),
			"honor_labels":    ep.HonorLabels,
			"http_sd_configs": []any{map[string]any{"url": sdURL, "refresh_interval": sdRefresh.String()}},
			"metrics_path":    ep.Path,
			"scheme":          ep.Scheme,
			"tls_config":      map[string]any{"insecure_skip_verify": ep.TLSConfig.InsecureSkipVerify},
			"relabel_configs": relabel,
		}
		if ep.Interval != "" {
			job["scrape_interval"] = ep.Interval
		}
		if ep.BearerTokenFile != "" {
			job["authorization"] = map[string]any{"type": "Bearer", "credentials_file": tokenFile}
		}
		jobs = append(jobs, job)
	}
	return yaml.Marshal(map[string]any{
		"global":         map[string]any{"evaluation_interval": evaluation},
		"rule_files":     []string{ruleFile},
		"scrape_configs": jobs,
	})
}

// promServer is Debian's prometheus (hack/testbin.sh prometheus) run as a
// host process, listening on loopback only.
type promServer struct {
	url     string
	cmd     *exec.Cmd
	logFile string
	exited  chan struct{}
}

// startPrometheus starts prometheus with config (rules beside it, at the
// path config names) in dir and stops it, by its PID, when t ends.
func startPrometheus(t *testing.T, dir string, config []byte) *promServer {
	t.Helper()
	bin := filepath.Join(cluster.Assets, "prometheus")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Debian's prometheus is not extracted: run `hack/testbin.sh prometheus` (make e2e does): %v", err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, config, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := &promServer{url: "http://" + addr, logFile: filepath.Join(dir, "prometheus.log"), exited: make(chan struct{})}
	lf, err := os.Create(p.logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	p.cmd = exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=2h", "--log.level=info")
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	// Dies with the test binary if that is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := p.cmd.Process.Pid
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-p.exited
		}
		logf("prometheus (pid %d) stopped; its log: %s", pid, p.logFile)
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("prometheus exited at start:\n%s", p.logTail(40))
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready at %s after 60s (%v):\n%s", p.url, err, p.logTail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	logf("prometheus %s (pid %d) ready at %s", bin, pid, p.url)
	return p
}

func (p *promServer) logTail(n int) string {
	b, _ := os.ReadFile(p.logFile)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// api GETs path of Prometheus's HTTP API and decodes its data into out.
func (p *promServer) api(ctx context.Context, path string, q url.Values, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := p.url + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates expr now (an instant vector).
func (p *promServer) query(ctx context.Context, expr string) ([]promSeries, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("%s: result type %s, not a vector", expr, d.ResultType)
	}
	var s []promSeries
	return s, json.Unmarshal(d.Result, &s)
}

type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

func (p *promServer) alerts(ctx context.Context) ([]promAlert, error) {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	return d.Alerts, p.api(ctx, "/api/v1/alerts", nil, &d)
}

type promTarget struct {
	Labels     map[string]string `json:"labels"`
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
}

func (p *promServer) targets(ctx context.Context) ([]promTarget, error) {
	var d struct {
		ActiveTargets []promTarget `json:"activeTargets"`
	}
	return d.ActiveTargets, p.api(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &d)
}

// describe is what a failure message needs to judge Prometheus's view:
// its targets, active alerts, each alert rule's health and last error,
// and its log's tail.
func (p *promServer) describe(ctx context.Context) string {
	var b strings.Builder
	if ts, err := p.targets(ctx); err != nil {
		fmt.Fprintf(&b, "targets: %v\n", err)
	} else {
		for _, tg := range ts {
			fmt.Fprintf(&b, "target %s %s: %s %s\n", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError)
		}
	}
	if as, err := p.alerts(ctx); err != nil {
		fmt.Fprintf(&b, "alerts: %v\n", err)
	} else {
		for _, a := range as {
			fmt.Fprintf(&b, "alert %s %s since %s: %v (value %s)\n", a.Labels["alertname"], a.State, a.ActiveAt.Format(time.TimeOnly), a.Labels, a.Value)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
				State     string `json:"state"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api(ctx, "/api/v1/rules", url.Values{"type": {"alert"}}, &rules); err != nil {
		fmt.Fprintf(&b, "rules: %v\n", err)
	} else {
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				fmt.Fprintf(&b, "rule %s: %s, health %s %s\n", r.Name, r.State, r.Health, r.LastError)
			}
		}
	}
	fmt.Fprintf(&b, "prometheus log (tail):\n%s", p.logTail(15))
	return b.String()
}

// alertWatch follows alerts through Prometheus's /api/v1/alerts.
type alertWatch struct {
	p *promServer
	// exprs are the alert rules' expressions, by name (for failure messages).
	exprs map[string]string
}

// matches says whether a is alert name with every label of want.
func matches(a promAlert, name string, want map[string]string) bool {
	if a.Labels["alertname"] != name {
		return false
	}
	for k, v := range want {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// firing waits until alert name (with labels want) fires, and returns it;
// since is when its cause began, for the log.
func (w *alertWatch) firing(t *testing.T, name string, want map[string]string, since time.Time, timeout time.Duration) promAlert {
	t.Helper()
	ctx := context.Background()
	var pendingSeen bool
	deadline := time.Now().Add(timeout)
	for {
		as, err := w.p.alerts(ctx)
		if err == nil {
			for _, a := range as {
				if !matches(a, name, want) {
					continue
				}
				if a.State == "firing" {
					logf("alert %s seen firing %.1fs after its cause began (pending since %.1fs after it): %v, value %s", name,
						time.Since(since).Seconds(), a.ActiveAt.Sub(since).Seconds(), a.Labels, a.Value)
					return a
				}
				if !pendingSeen {
					pendingSeen = true
					logf("alert %s pending %.1fs after its cause began: %v", name, a.ActiveAt.Sub(since).Seconds(), a.Labels)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("alert %s with labels %v not firing %s after its cause began (%v); its expression:\n%s\nnow: %s\n%s",
				name, want, timeout, err, w.exprs[name], w.evaluate(name), w.p.describe(ctx))
		}
		time.Sleep(time.Second)
	}
}

// resolved waits until no alert name (with labels want) is pending or
// firing; since is when its cause ended.
func (w *alertWatch) resolved(t *testing.T, name string, want map[string]string, since time.Time, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		as, err := w.p.alerts(ctx)
		if err == nil && !slices.ContainsFunc(as, func(a promAlert) bool { return matches(a, name, want) }) {
			logf("alert %s resolved %.1fs after its cause ended", name, time.Since(since).Seconds())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alert %s with labels %v still active %s after its cause ended (%v); its expression:\n%s\nnow: %s\n%s",
				name, want, timeout, err, w.exprs[name], w.evaluate(name), w.p.describe(ctx))
		}
		time.Sleep(time.Second)
	}
}

// quiet waits until no alert is pending or firing (Prometheus's first
// evaluations may find no `up` yet).
func (w *alertWatch) quiet(t *testing.T, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		as, err := w.p.alerts(ctx)
		if err == nil && len(as) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts active with no cause for %s (%v):\n%s", timeout, err, w.p.describe(ctx))
		}
		time.Sleep(time.Second)
	}
}

// evaluate is the value of the alert's expression now, for a failure message.
func (w *alertWatch) evaluate(name string) string {
	s, err := w.p.query(context.Background(), w.exprs[name])
	if err != nil {
		return err.Error()
	}
	if len(s) == 0 {
		return "(no series)"
	}
	var out []string
	for _, x := range s {
		out = append(out, fmt.Sprintf("%v = %v", x.Metric, x.Value[1]))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// shortenFor returns groups with every alert's `for` above max set to max
// (the rules' expressions untouched), and what it changed.
func shortenFor(groups []ruleGroup, maxFor time.Duration) ([]ruleGroup, []string, error) {
	var changed []string
	out := make([]ruleGroup, len(groups))
	for i, g := range groups {
		out[i] = ruleGroup{Name: g.Name}
		for _, r := range g.Rules {
			c := maps.Clone(r)
			if f, ok := c["for"].(string); ok {
				d, err := time.ParseDuration(f)
				if err != nil {
					return nil, nil, fmt.Errorf("rule %v: for %q: %w", c["alert"], f, err)
				}
				if d > maxFor {
					c["for"] = maxFor.String()
					changed = append(changed, fmt.Sprintf("%v for %s -> %s", c["alert"], f, maxFor))
				}
			}
			out[i].Rules = append(out[i].Rules, c)
		}
	}
	if len(changed) == 0 && len(groups) == 0 {
		return nil, nil, errors.New("no rule groups")
	}
	return out, changed, nil
}
