package binding

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
)

// syncer is the sidecar's artifact sync for job j, pointed at the control
// plane's binding server (fs backend).
func (j *job) syncer(t *testing.T) *artifacts.Syncer {
	t.Helper()
	cfg := j.clientConfig()
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: cfg.ServerURL, JobID: cfg.JobID, TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile})
	if err != nil {
		t.Fatal(err)
	}
	// Files count as finished 1 ms after their last write (10 s in a pod).
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{Dir: j.artifactDir, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.NewSyncer(artifacts.SyncerConfig{Scanner: sc, Uploader: up, JobID: cfg.JobID, PodUID: cfg.Pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (j *job) write(t *testing.T, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(j.artifactDir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// stored reads an object from the fs backend's directory.
func stored(t *testing.T, key string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.ArtifactDir, filepath.FromSlash(key)))
	if err != nil {
		t.Fatalf("object %s: %v", key, err)
	}
	return b
}

func TestArtifactsVerifiedThenSucceeded(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	files := map[string][]byte{
		"model.safetensors":       bytes.Repeat([]byte("weights"), 300_000),
		"checkpoints/step 100.pt": []byte("ckpt-100"),
		"-odd/ünïcode name.txt":   []byte("kept exact"),
		"empty.bin":               {},
		binding.ProgressFile:      []byte(`{"step":100}` + "\n"),
	}
	for rel, data := range files {
		j.write(t, rel, data)
	}
	rep, err := j.syncer(t).Flush(context.Background())
	if err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
	wb := j.waitArtifacts(t)
	if !wb.Status.Artifacts.ManifestVerified || wb.Status.Artifacts.Files != int32(len(files)) {
		t.Fatalf("artifacts status %+v, want %d verified files", wb.Status.Artifacts, len(files))
	}
	for rel, data := range files {
		if got := stored(t, wb.Spec.JobID+"/"+rel); !bytes.Equal(got, data) {
			t.Errorf("%s stored with different content", rel)
		}
	}
	// Exit 0 and a verified manifest: Succeeded.
	finishTrainer(t, j, 0)
	setTrainJobCondition(t, j, "Complete", "jobset completed")
	j.waitPhase(t, tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded)
}

func TestFailedTrainerNeverOverwritesGoodArtifacts(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	good := []byte("a good checkpoint")
	j.write(t, "model.pt", good)
	time.Sleep(20 * time.Millisecond)
	if rep, err := j.syncer(t).FlushNow(context.Background()); err != nil || rep.Uploaded != 1 {
		t.Fatalf("first upload: %v %+v", err, rep)
	}
	// The trainer then corrupts the file and fails.
	j.write(t, "model.pt", []byte("garbage written while crashing"))
	time.Sleep(20 * time.Millisecond)
	if rep, err := j.syncer(t).FlushNow(context.Background()); err != nil || rep.Uploaded != 1 {
		t.Fatalf("second upload: %v %+v", err, rep)
	}
	finishTrainer(t, j, 1)
	setTrainJobCondition(t, j, "Failed", "jobset failed: BackoffLimitExceeded")
	wb := j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed)
	eventually(t, 10*time.Second, func() error {
		if got := stored(t, wb.Spec.JobID+"/model.pt"); !bytes.Equal(got, good) {
			return errors.New("the failed trainer's model.pt replaced the good one")
		}
		if _, err := os.Stat(filepath.Join(env.ArtifactDir, wb.Spec.JobID, ".tether", "pending", "model.pt")); !os.IsNotExist(err) {
			return errors.New("the failed trainer's pending upload was not dropped")
		}
		return nil
	})
}

// countingBody counts how much of a request body the server read.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func TestCrossJobArtifactTokenRefusedBeforeAnyByte(t *testing.T) {
	a := newJob(t, nil)
	b := newJob(t, nil)
	ca, _ := os.ReadFile(a.caFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	token, _ := os.ReadFile(a.tokenFile)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ExpectContinueTimeout: 5 * time.Second},
		Timeout: 10 * time.Second}
	bJob := b.clientConfig().JobID
	const size = 8 << 20
	body := &countingBody{r: io.LimitReader(zeroReader{}, size)}
	req, _ := http.NewRequest(http.MethodPut, env.BindingURL+"/"+upload.Bucket+"/"+bJob+"/stolen.bin", body)
	req.ContentLength = size
	req.Header.Set(names.HeaderArtifactToken, string(token))
	req.Header.Set(names.HeaderArtifactPodUID, string(a.pod.UID))
	req.Header.Set(names.HeaderPodToken, a.podToken(t))
	req.Header.Set("Expect", "100-continue")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(msg), "AccessDenied") {
		t.Fatalf("job a's token writing into job b: %d %s", resp.StatusCode, msg)
	}
	if n := body.read.Load(); n != 0 {
		t.Errorf("the server read %d body bytes before refusing", n)
	}
	if _, err := os.Stat(filepath.Join(env.ArtifactDir, bJob, "stolen.bin")); !os.IsNotExist(err) {
		t.Error("an object was stored for the refused request")
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (j *job) waitArtifacts(t *testing.T) *tetherv1.WorkerBinding {
	t.Helper()
	var wb *tetherv1.WorkerBinding
	eventually(t, 15*time.Second, func() error {
		wb = j.binding(t)
		if wb.Status.Artifacts == nil || wb.Status.Artifacts.Manifest == "" {
			return errors.New("no manifest recorded yet")
		}
		return nil
	})
	return wb
}
