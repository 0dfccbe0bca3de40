package binding

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTenantCannotReadMetrics: /metrics names every tenant's namespaces and
// TrainJobs. A pod that reaches the control plane scrapes it without
// credentials (over plain HTTP and over HTTPS) and with a tenant's own
// ServiceAccount token (its namespace's Role, no metrics-reader): neither
// sees a series. Only a token bound to the tether-metrics-reader
// ClusterRole does.
func TestTenantCannotReadMetrics(t *testing.T) {
	ctx := context.Background()
	victim := newJob(t, nil)
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the attacker does not care
		defer hc.CloseIdleConnections()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	leaks := func(body string) bool {
		return strings.Contains(body, victim.ns) || strings.Contains(body, "tether_job_")
	}

	for _, scheme := range []string{"http", "https"} {
		if code, body := get(scheme+"://"+env.MetricsAddr+"/metrics", ""); code == http.StatusOK || leaks(body) {
			t.Errorf("unauthenticated GET %s://.../metrics: %d, lists namespace %s: %v", scheme, code, victim.ns, leaks(body))
		}
	}
	if code, _ := get("https://"+env.MetricsAddr+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("unauthenticated GET https://.../metrics: %d, want 401", code)
	}
	tenant, err := env.NewTenant(ctx, "metrics-tenant", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get("https://"+env.MetricsAddr+"/metrics", tenant.Token); code != http.StatusForbidden || leaks(body) {
		t.Errorf("GET /metrics with a tenant's token: %d (lists namespace %s: %v), want 403", code, victim.ns, leaks(body))
	}
	// A metrics reader sees the victim's series.
	eventually(t, 20*time.Second, func() error {
		body, err := env.ScrapeMetrics(ctx)
		if err == nil && !strings.Contains(body, `namespace="`+victim.ns+`"`) {
			return errNoSeries(victim.ns)
		}
		return err
	})

	reader, err := env.MetricsToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get("https://"+env.MetricsAddr+"/metrics", reader); code != http.StatusOK || !leaks(body) {
		t.Errorf("GET /metrics as a metrics reader: %d, want 200 with the jobs' series", code)
	}
}

type errNoSeries string

func (e errNoSeries) Error() string {
	return "no series of namespace " + string(e) + " in /metrics yet"
}
