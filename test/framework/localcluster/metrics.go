package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// metricsScraper scrapes the replicas' /metrics (HTTPS, authenticated and
// authorized through the API server) as Prometheus would: with the token of
// a ServiceAccount bound to the ClusterRole tether-metrics-reader, which
// the overlay installed.
type metricsScraper struct {
	cs    kubernetes.Interface
	mu    sync.Mutex
	token string
}

func (s *metricsScraper) bearer(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == "" {
		token, err := testenv.ScraperToken(ctx, s.cs)
		if err != nil {
			return "", err
		}
		s.token = token
	}
	return s.token, nil
}

// scrape GETs addr's /metrics.
func (s *metricsScraper) scrape(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token, err := s.bearer(ctx)
	if err != nil {
		return "", err
	}
	code, body, err := testenv.GetMetrics(ctx, addr, token)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET https://%s/metrics: %d %s", addr, code, body)
	}
	return body, err
}
