package install

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/soakcheck"
)

// What the operator scenarios (operate_test.go) watch while they disturb
// the installed control plane: admissions, the replicas' logs, the
// session's replica.

// admissionProbe asks the API server to admit, every 100 ms and in a dry
// run (the webhooks run as for a real create; nothing is stored), a
// labeled TrainJob (the webhook must stamp its job id), an unlabeled
// TrainJob and an unlabeled pod, and counts every one that fails.
type admissionProbe struct {
	stop, done       chan struct{}
	attempts, failed atomic.Int64
	mu               sync.Mutex
	errs             []string
}

func startAdmissionProbe(t *testing.T, ns string) *admissionProbe {
	t.Helper()
	ctx := context.Background()
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	p := &admissionProbe{stop: make(chan struct{}), done: make(chan struct{})}
	image := cluster.RealNodes()[0].Image("tether-trainer-standin")
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			labeled := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("labeled-%d", i),
				Labels: map[string]string{names.BindLabel: "true"}},
				Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: localcluster.TorchRuntime}}}
			p.try("a labeled TrainJob", func() error {
				if err := cluster.Client.Create(ctx, labeled, crclient.DryRunAll); err != nil {
					return err
				}
				if labeled.Annotations[names.JobIDAnnotation] == "" {
					return fmt.Errorf("admitted without the webhook's job id")
				}
				return nil
			})
			plain := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("plain-%d", i)},
				Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: localcluster.TorchRuntime}}}
			p.try("an unlabeled TrainJob", func() error { return cluster.Client.Create(ctx, plain, crclient.DryRunAll) })
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("plain-%d", i)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work", Image: image}}}}
			p.try("an unlabeled pod", func() error { return cluster.Client.Create(ctx, pod, crclient.DryRunAll) })
		}
	}()
	return p
}

func (p *admissionProbe) try(what string, create func() error) {
	p.attempts.Add(1)
	if err := create(); err != nil {
		p.failed.Add(1)
		p.mu.Lock()
		p.errs = append(p.errs, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
		p.mu.Unlock()
	}
}

// finish stops the probe and returns its counts and failures.
func (p *admissionProbe) finish() (attempts, failed int64, errs []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts.Load(), p.failed.Load(), p.errs
}

// replicaLogs follows the log of every control-plane replica that runs
// while it does (new replicas as they start), so that what a replica
// deleted by a roll or a drain logged is kept: its artifact access log
// says which PUTs it took.
type replicaLogs struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	logs   map[string]*bytes.Buffer // by pod name
}

func followReplicaLogs(t *testing.T) *replicaLogs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicaLogs{ctx: ctx, cancel: cancel, logs: map[string]*bytes.Buffer{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for ctx.Err() == nil {
			var pods corev1.PodList
			if err := cluster.Client.List(ctx, &pods, crclient.InNamespace(localcluster.ControlPlaneNamespace), localcluster.ControlPlanePodLabels); err == nil {
				for _, p := range pods.Items {
					r.follow(p)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return r
}

// follow starts following pod p's control-plane container once it has
// started (a stream ends with the container; what it logged until then is
// kept).
func (r *replicaLogs) follow(p corev1.Pod) {
	started := false
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == controlPlaneContainer && (s.State.Running != nil || s.State.Terminated != nil) {
			started = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.logs[p.Name]; ok || !started {
		return
	}
	buf := &bytes.Buffer{}
	r.logs[p.Name] = buf
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		rc, err := cluster.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{
			Container: controlPlaneContainer, Follow: true}).Stream(r.ctx)
		if err != nil {
			r.mu.Lock()
			fmt.Fprintf(buf, "following the log: %v\n", err)
			r.mu.Unlock()
			return
		}
		defer rc.Close()
		chunk := make([]byte, 32<<10)
		for {
			n, err := rc.Read(chunk)
			r.mu.Lock()
			buf.Write(chunk[:n])
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
}

// close stops following; the logs stay readable.
func (r *replicaLogs) close() {
	r.cancel()
	r.wg.Wait()
}

// access is every replica's artifact access log, by replica.
func (r *replicaLogs) access(t *testing.T) map[string][]store.AccessRecord {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]store.AccessRecord{}
	for pod, buf := range r.logs {
		recs, err := soakcheck.ParseAccessLog(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("replica %s's access log: %v", pod, err)
		}
		out[pod] = recs
	}
	return out
}

// replicas are the pods whose logs were followed.
func (r *replicaLogs) replicas() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n := range r.logs {
		names = append(names, n)
	}
	return names
}

// checkNothingResent fails t for a file of the trainer's (files: its
// closing list, path → MD5) that no replica took a good upload of (a PUT,
// or a direct upload's commit, answered ok) for job jobID, and for one
// whose same version more than one upload took: once a version was
// verified, the sidecar must not send it again, whichever replica it talks
// to. A PUT's version is told by its body's length (the object's bytes in
// aws-chunked framing, the same for the same length): a file written once
// has one, a file the trainer appends to (its progress log) a new one at
// each upload. It returns how many good uploads each replica took.
func checkNothingResent(t *testing.T, logs *replicaLogs, jobID string, files map[string]string) map[string]int {
	t.Helper()
	good := map[string][]string{}     // path → the replicas that took an upload of it
	versions := map[string][]string{} // path and version → the replicas that took it
	requests := map[string][]string{} // path → every request for it, for a message
	byReplica := map[string]int{}
	for pod, recs := range logs.access(t) {
		for _, a := range recs {
			rel, ok := strings.CutPrefix(a.Key, jobID+"/")
			if a.JobID != jobID || !ok {
				continue
			}
			requests[rel] = append(requests[rel], fmt.Sprintf("%s %s %d %s %dB", pod, a.Op, a.Status, a.Outcome(), a.BodyBytes))
			if _, mine := files[rel]; !mine || a.Outcome() != "ok" || (a.Op != "put" && a.Op != "commit") {
				continue
			}
			byReplica[pod]++
			good[rel] = append(good[rel], pod)
			version := rel + " (" + a.Op + ")"
			if a.Op == "put" {
				version = fmt.Sprintf("%s (a %d-byte body)", rel, a.BodyBytes)
			}
			versions[version] = append(versions[version], pod)
		}
	}
	for rel := range files {
		if len(good[rel]) == 0 {
			t.Errorf("%s: no replica's access log has a good upload of it (replicas followed: %v; requests: %v)", rel, logs.replicas(), requests[rel])
		}
	}
	for v, pods := range versions {
		if len(pods) > 1 {
			rel, _, _ := strings.Cut(v, " (")
			t.Errorf("%s: uploaded and verified %d times (by %v): a verified version was sent again; requests: %v", v, len(pods), pods, requests[rel])
		}
	}
	return byReplica
}

// sessionReplica is the replica (its pod name) holding rank 0's session
// of binding ns/name as the binding's status last said, "" while none is
// said; lease is the Lease name the status gives.
func sessionReplica(ctx context.Context, ns, name string) (pod, lease string, err error) {
	wb := &tetherv1.WorkerBinding{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: ns, Name: name}, wb); err != nil {
		return "", "", err
	}
	for _, n := range wb.Status.Nodes {
		if n.Rank == 0 && n.SessionReplica != "" {
			return replicaOfLease(n.SessionReplica), n.SessionReplica, nil
		}
	}
	return "", "", nil
}

// replicaOfLease is the pod name in a replica's Lease name
// (replicalease.NewName: tether-binding-<pod>-<8 hex digits>).
func replicaOfLease(lease string) string {
	s := strings.TrimPrefix(lease, "tether-binding-")
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		return s[:i]
	}
	return s
}
