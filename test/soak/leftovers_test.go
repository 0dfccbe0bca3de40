package soak

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// connectedSeries matches a session the binding server still holds:
// tether_job_session_connected{namespace="ns",node="0",trainjob="name"} 1.
var connectedSeries = regexp.MustCompile(`(?m)^tether_job_session_connected\{([^}]*)\} 1$`)

var labelPair = regexp.MustCompile(`(\w+)="([^"]*)"`)

// leftovers finds what an ended job must not keep once every fault healed:
// a session a replica still holds for it (its connected gauge at 1), and a
// token the binding server still takes (a final binding's token is refused
// with 410, a deleted one's with 401). Kept on purpose, and so not looked
// for (docs/platform.md): the token Secret while its TrainJob exists, the job
// id's claim Lease, the replica Leases (deleted after an hour unrenewed).
func leftovers(ctx context.Context, c *localcluster.Cluster, tether *localcluster.Tether, jobs []job, ended map[string]bool) []string {
	var out []string
	endedJobs := map[string]bool{}
	for _, j := range jobs {
		if j.labeled && ended[j.ns+"/"+j.name] {
			endedJobs[j.ns+"/"+j.name] = true
		}
	}
	// A replica that lost its Lease while stopped exits when the heal
	// resumes it, and is started again after the kubelet's back-off (CI
	// once read its metrics in that back-off, every job having ended by
	// the heal): the sessions are counted on replicas that are up.
	if err := tether.AwaitReplicasReady(ctx); err != nil {
		out = append(out, fmt.Sprintf("the control plane's replicas not all ready after the heal: %v", err))
	}
	for i, r := range tether.Replicas() {
		text, err := r.Metrics()
		if err != nil {
			out = append(out, fmt.Sprintf("replica %d's metrics unreadable after the heal: %v", i, err))
			continue
		}
		for _, m := range connectedSeries.FindAllStringSubmatch(text, -1) {
			labels := map[string]string{}
			for _, p := range labelPair.FindAllStringSubmatch(m[1], -1) {
				labels[p[1]] = p[2]
			}
			if key := labels["namespace"] + "/" + labels["trainjob"]; endedJobs[key] {
				out = append(out, fmt.Sprintf("a session of ended job %s (node %s) still held by replica %d", key, labels["node"], i))
			}
		}
	}
	for _, j := range jobs {
		if !endedJobs[j.ns+"/"+j.name] {
			continue
		}
		if msg := tokenRefusedOnceSettled(ctx, c, tether, j); msg != "" {
			out = append(out, msg)
		}
	}
	return out
}

// tokenRefusedOnceSettled tries a register with an ended job's token until
// the binding server refuses it as ended (410, or 401 once its Secret or
// binding is gone), for at most settleLimit, and says what it still
// answered then ("" once refused). A replica takes the job's end from its
// cache of the binding: after a kube-apiserver restart near the heal its
// watch may take seconds to resume (CI saw a job that ended 4 s after the
// heal still answered 403, its binding not yet final there, 3 s later), so
// the checker waits for that, never longer than the limit.
func tokenRefusedOnceSettled(ctx context.Context, c *localcluster.Cluster, tether *localcluster.Tether, j job) string {
	start := time.Now()
	for {
		code, err := registerWithJobToken(ctx, c, tether, j)
		switch {
		case err != nil:
			return fmt.Sprintf("job %s/%s's token could not be tried: %v", j.ns, j.name, err)
		case code == http.StatusGone || code == http.StatusUnauthorized:
			if waited := time.Since(start); waited > time.Second {
				logf("soak: %s/%s's token refused (%d) %s after the check began", j.ns, j.name, code, waited.Round(time.Second))
			}
			return ""
		case time.Since(start) > settleLimit:
			return fmt.Sprintf("job %s/%s ended, and a register with its token was answered %d, not 410 or 401, for %s after the heal's check began",
				j.ns, j.name, code, settleLimit)
		}
		select {
		case <-ctx.Done():
			return fmt.Sprintf("job %s/%s's token: %v", j.ns, j.name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// registerWithJobToken registers with the job's token, as its sidecar
// would, and returns the binding server's status. A job whose Secret is
// gone has no token left to try (200 is never returned for it).
func registerWithJobToken(ctx context.Context, c *localcluster.Cluster, tether *localcluster.Tether, j job) (int, error) {
	var s corev1.Secret
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}, &s); err != nil {
		return http.StatusUnauthorized, client.IgnoreNotFound(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data[names.CABundleKey]) {
		return 0, fmt.Errorf("the token Secret's %s holds no certificate", names.CABundleKey)
	}
	body, _ := json.Marshal(binding.RegisterRequest{Pod: binding.PodIdentity{Namespace: j.ns, Name: j.name + "-gone"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tether.BindingURL()+binding.PathRegister, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(binding.HeaderAuthorization, "Bearer "+string(s.Data[names.TokenKey]))
	req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
