package localcluster

// The readiness probe of Trainer v2.0.0's webhook (StartTrainerV20).

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// trainerV20Probe is an AdmissionReview the TrainJob validator allows without
// looking anything up (ValidateDelete returns nil).
const trainerV20Probe = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` +
	`"uid":"tether-readiness-probe","operation":"DELETE","name":"probe","namespace":"default","userInfo":{},` +
	`"kind":{"group":"trainer.kubeflow.org","version":"v1alpha1","kind":"TrainJob"},` +
	`"resource":{"group":"trainer.kubeflow.org","version":"v1alpha1","resource":"trainjobs"},` +
	`"oldObject":{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"probe","namespace":"default"}}}}`

// probeTrainerV20 sends trainerV20Probe to the TrainJob validator through
// addr, verifying the webhook's certificate with caPEM: the path answers 404
// until the manager registered its webhooks.
func probeTrainerV20(ctx context.Context, addr string, caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in ca.crt")
	}
	host, _, _ := net.SplitHostPort(addr)
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
			Proxy:             nil,
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+trainerV20ProbePath, strings.NewReader(trainerV20Probe))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	var review struct {
		Response *struct {
			Allowed bool `json:"allowed"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &review); err != nil || review.Response == nil || !review.Response.Allowed {
		return fmt.Errorf("unexpected answer to the readiness probe: %s", bytes.TrimSpace(body))
	}
	return nil
}
