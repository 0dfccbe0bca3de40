package binding

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/upload"
)

// A job's token against the binding server's artifact endpoint, as a
// trainer holding it (or anything that read it from the pod) would use it.
type tokenClient struct {
	t      *testing.T
	hc     *http.Client
	token  string
	prefix string
	// podToken and podUID are the pod's, as its sidecar sends them.
	podToken, podUID string
}

// sign sets the job's token and the pod's identity and token on req.
func (c *tokenClient) sign(req *http.Request) {
	req.Header.Set(names.HeaderArtifactToken, c.token)
	req.Header.Set(names.HeaderArtifactPodUID, c.podUID)
	req.Header.Set(names.HeaderPodToken, c.podToken)
}

func (j *job) tokenClient(t *testing.T) *tokenClient {
	t.Helper()
	ca, err := os.ReadFile(j.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	token, err := os.ReadFile(j.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tokenClient{t: t, token: strings.TrimSpace(string(token)), prefix: j.clientConfig().JobID + "/",
		podToken: j.podToken(t), podUID: string(j.pod.UID),
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: time.Minute}}
}

// put PUTs body (size bytes) to the job's key rel and returns the status and
// the S3 error's message, if any.
func (c *tokenClient) put(rel string, body io.Reader, size int64) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPut, env.BindingURL+"/"+upload.Bucket+"/"+c.prefix+rel, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.ContentLength = size
	c.sign(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("PUT %s: %v", rel, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(msg)
}

// writable asks the authorize endpoint whether the server lets the token
// write (it stores nothing): 200, or 403 once the job's artifacts are final.
func (c *tokenClient) writable() int {
	c.t.Helper()
	b, _ := json.Marshal(upload.AuthorizeRequest{Key: c.prefix + "probe.bin", Size: 1})
	req, _ := http.NewRequest(http.MethodPost, env.BindingURL+upload.PathAuthorize, bytes.NewReader(b))
	c.sign(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// flushVerified uploads files as the sidecar does (files, then the
// manifest) and waits for the verified verdict.
func (j *job) flushVerified(t *testing.T, files map[string][]byte) {
	t.Helper()
	for rel, data := range files {
		j.write(t, rel, data)
	}
	if rep, err := j.syncer(t).Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
	wb := j.waitArtifacts(t)
	if !wb.Status.Artifacts.ManifestVerified {
		t.Fatalf("manifest not verified: %+v", wb.Status.Artifacts)
	}
}

func (j *job) succeed(t *testing.T) *tetherv1.WorkerBinding {
	t.Helper()
	finishTrainer(t, j, 0)
	setTrainJobCondition(t, j, "Complete", "jobset completed")
	return j.waitPhase(t, tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded)
}

func pendingObjects(t *testing.T, jobID string) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{jobID + "/" + upload.PendingDir, upload.UploadsPrefix + jobID} {
		root := filepath.Join(env.ArtifactDir, filepath.FromSlash(dir))
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				out = append(out, strings.TrimPrefix(p, root+string(filepath.Separator)))
			}
			return nil
		})
	}
	return out
}

// A new version of a listed file, PUT with the job's token after the
// manifest was verified, is not promoted: on Succeeded the final key holds
// what the manifest lists. Once the job's artifacts are final, writes are
// refused, saying so.
func TestTokenCannotReplaceAVerifiedArtifact(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	good := bytes.Repeat([]byte("the verified model "), 10_000)
	j.flushVerified(t, map[string][]byte{"model.bin": good})
	c := j.tokenClient(t)

	evil := bytes.Repeat([]byte("a later model, never listed "), 10_000)
	if code, msg := c.put("model.bin", bytes.NewReader(evil), int64(len(evil))); code != http.StatusOK {
		t.Fatalf("a PUT while Running: %d %s (a running job may still write)", code, msg)
	}
	wb := j.succeed(t)
	if got := stored(t, wb.Spec.JobID+"/model.bin"); !bytes.Equal(got, good) {
		sum := md5.Sum(got)
		t.Fatalf("on Succeeded the final model.bin has MD5 %s, not the %d bytes the verified manifest lists: a write after the verdict was promoted", hex.EncodeToString(sum[:]), len(good))
	}
	if left := pendingObjects(t, wb.Spec.JobID); len(left) != 0 {
		t.Errorf("left in the store after Succeeded: %v", left)
	}
	for _, rel := range []string{"model.bin", "unlisted.bin"} {
		code, msg := c.put(rel, bytes.NewReader(evil), int64(len(evil)))
		if code != http.StatusForbidden || !strings.Contains(msg, "final") {
			t.Errorf("PUT %s after Succeeded: %d %s, want 403 saying the artifacts are final", rel, code, msg)
		}
	}
	if got := stored(t, wb.Spec.JobID+"/model.bin"); !bytes.Equal(got, good) {
		t.Error("a PUT after Succeeded changed model.bin")
	}
}

// A PUT authorized while the job runs whose body ends after the binding
// Succeeded is refused and nothing it sent is kept: not as the listed
// file's next version, not as a new key (begun before the manifest was
// verified: after, a key the manifest does not list is refused at once).
func TestTokenCannotLandASlowPutAfterSucceeded(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	good := bytes.Repeat([]byte("the verified model "), 10_000)
	c := j.tokenClient(t)

	late := bytes.Repeat([]byte("late bytes "), 20_000)
	type result struct {
		rel  string
		code int
		msg  string
	}
	results := make(chan result, 2)
	var writers []*io.PipeWriter
	slowPut := func(rel string) {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		go func() {
			code, msg := c.put(rel, pr, int64(len(late)))
			results <- result{rel, code, msg}
		}()
		if _, err := pw.Write(late[:len(late)/2]); err != nil {
			t.Fatal(err)
		}
	}
	slowPut("late.bin")
	j.flushVerified(t, map[string][]byte{"model.bin": good})
	slowPut("model.bin")
	wb := j.succeed(t)
	// The server's cache has seen it once the token may no longer write.
	eventually(t, 10*time.Second, func() error {
		if code := c.writable(); code != http.StatusForbidden {
			return fmt.Errorf("authorize answers %d", code)
		}
		return nil
	})
	for _, pw := range writers {
		go func() { _, _ = pw.Write(late[len(late)/2:]); _ = pw.Close() }()
	}
	for range writers {
		r := <-results
		if r.code != http.StatusForbidden || !strings.Contains(r.msg, "Succeeded") {
			t.Errorf("a PUT of %s begun while Running, ended after Succeeded: %d %s, want 403 naming Succeeded", r.rel, r.code, r.msg)
		}
	}
	if got := stored(t, wb.Spec.JobID+"/model.bin"); !bytes.Equal(got, good) {
		t.Error("the final model.bin is not what the verified manifest lists")
	}
	if _, err := os.Stat(filepath.Join(env.ArtifactDir, wb.Spec.JobID, "late.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("late.bin was kept (%v)", err)
	}
	if left := pendingObjects(t, wb.Spec.JobID); len(left) != 0 {
		t.Errorf("left in the store: %v", left)
	}
}

// An object and manifest.json rewritten together in the store (by someone
// with the store's credentials) are refused by pkg/client: the manifest is
// not the one whose digest the binding recorded.
func TestClientRefusesAManifestRewrittenInTheStore(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	good := bytes.Repeat([]byte("the verified model "), 10_000)
	j.flushVerified(t, map[string][]byte{"model.bin": good})
	wb := j.succeed(t)

	ca, err := os.ReadFile(j.caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(readerConfig(t, j.ns, "reader", true), client.Options{ReadURL: env.BindingURL, ReadCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := c.Download(ctx, wb, "model.bin", &got); err != nil || !bytes.Equal(got.Bytes(), good) {
		t.Fatalf("Download before the rewrite: %v", err)
	}

	// Both rewritten, consistent with each other.
	forged := bytes.Repeat([]byte("a forged model "), 10_000)
	sum := md5.Sum(forged)
	m, _ := json.Marshal(upload.Manifest{Version: upload.ManifestVersion, JobID: wb.Spec.JobID,
		Files: []upload.ManifestFile{{Path: "model.bin", Size: int64(len(forged)), MD5: hex.EncodeToString(sum[:])}}})
	dir := filepath.Join(env.ArtifactDir, wb.Spec.JobID)
	for name, data := range map[string][]byte{"model.bin": forged, upload.ManifestName: m} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dest := filepath.Join(t.TempDir(), "model.bin")
	_, err = c.DownloadFile(ctx, wb, "model.bin", dest)
	var de *client.ManifestDigestError
	if !errors.As(err, &de) || de.Want == de.Got {
		t.Fatalf("DownloadFile after the object and its manifest were rewritten in the store: %v, want a *client.ManifestDigestError", err)
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused download left %s", dest)
	}
	if _, err := c.Artifacts(ctx, wb); !errors.As(err, &de) {
		t.Errorf("Artifacts: %v, want a *client.ManifestDigestError", err)
	}
}
