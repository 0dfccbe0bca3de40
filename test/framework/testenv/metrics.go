package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// MetricsReaderRole is the ClusterRole that may get /metrics
// (manifests/base/metrics-reader.yaml).
const MetricsReaderRole = "tether-metrics-reader"

// metricsScraper is the ServiceAccount the tests scrape /metrics as: what a
// Prometheus bound to MetricsReaderRole is.
const metricsScraper = "tether-metrics-scraper"

var scraperToken struct {
	sync.Mutex
	env   *Env
	token string
}

// MetricsToken is the bearer token of a ServiceAccount bound to
// MetricsReaderRole (created on first use; the role too, from manifests/,
// when the control plane runs as admin and nothing installed it).
func (e *Env) MetricsToken(ctx context.Context) (string, error) {
	scraperToken.Lock()
	defer scraperToken.Unlock()
	if scraperToken.env == e && scraperToken.token != "" {
		return scraperToken.token, nil
	}
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "manifests", "base", "metrics-reader.yaml"))
	if err != nil {
		return "", err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		return "", fmt.Errorf("manifests/base/metrics-reader.yaml: %w", err)
	}
	for _, o := range []client.Object{role, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tether-system"}}} {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("metrics scraper: creating %T %s: %w", o, o.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", err
	}
	token, err := ScraperToken(ctx, cs)
	if err != nil {
		return "", err
	}
	scraperToken.env, scraperToken.token = e, token
	return token, nil
}

// ScraperToken creates (if missing) the ServiceAccount tether-system/
// tether-metrics-scraper bound to MetricsReaderRole, which must exist, and
// returns a token of it valid for a day: what a Prometheus installed with
// the ServiceMonitor scrapes with.
func ScraperToken(ctx context.Context, cs kubernetes.Interface) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: metricsScraper, Namespace: "tether-system"}}
	if _, err := cs.CoreV1().ServiceAccounts("tether-system").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("metrics scraper: creating its ServiceAccount: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: metricsScraper},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: metricsScraper, Namespace: "tether-system"}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("metrics scraper: binding %s: %w", MetricsReaderRole, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("tether-system").CreateToken(ctx, metricsScraper,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("metrics scraper: token: %w", err)
	}
	return tr.Status.Token, nil
}

// GetMetrics GETs the control plane's /metrics with token ("" sends none)
// and returns the status and body.
func (e *Env) GetMetrics(ctx context.Context, token string) (int, string, error) {
	return GetMetrics(ctx, e.MetricsAddr, token)
}

// GetMetrics GETs https://addr/metrics with token ("" sends none) and
// returns the status and body. The endpoint's certificate is the
// self-signed one controller-runtime generates, so it is not verified.
func GetMetrics(ctx context.Context, addr, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed, as in a cluster
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// ScrapeMetrics returns the control plane's /metrics, scraped as a reader
// bound to MetricsReaderRole.
func (e *Env) ScrapeMetrics(ctx context.Context) (string, error) {
	token, err := e.MetricsToken(ctx)
	if err != nil {
		return "", err
	}
	code, body, err := e.GetMetrics(ctx, token)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("GET /metrics as %s: %d %s", metricsScraper, code, body)
	}
	return body, nil
}
