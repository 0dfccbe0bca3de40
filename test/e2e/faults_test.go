package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// The fault scenarios each report what a fault cost:
// time to recover, uploads retried and bytes re-sent. The figures come
// from the store's side (localcluster's S3 front counts every PUT that
// reached it, in proxy and direct mode alike) against the trainer's files.

// s3Traffic is what reached the store so far.
func (e *env) s3Traffic(t *testing.T) localcluster.S3Traffic {
	t.Helper()
	tr, err := e.tether.S3Traffic()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// storeCost is what the store was sent for one job's immutable files
// (checkpoints/ and model/: each is written once and renamed into place, so
// any second PUT of one is a retry).
type storeCost struct {
	Files int // distinct files PUT
	// Puts are the uploads of them: whole-object PUTs and multipart
	// uploads (a file stored in parts through the binding server is one,
	// however many parts, a resumed PUT going on in the same upload).
	Puts       int
	Parts      int   // part PUTs of those multipart uploads
	Bytes      int64 // body bytes of those PUTs and parts
	LocalBytes int64 // the files' sizes
	// GonePuts and GoneBytes are PUTs never kept: of files the trainer
	// renamed or removed afterwards (a checkpoint's temporary file), and
	// direct uploads never committed (cut off, or refused). Never verified,
	// never claimed, but sent.
	GonePuts    int
	GoneBytes   int64
	OtherPuts   int // PUTs of the job's other keys (progress, manifests, logs)
	OtherBytes  int64
	TotalPuts   int
	TotalBytes  int64
	Refused     int // requests the store refused (503) meanwhile
	RetriedPuts int
	ResentBytes int64
}

func (c storeCost) String() string {
	return fmt.Sprintf("%d files of checkpoints/model (%d bytes) took %d uploads (%d parts; %d retried, %d bytes re-sent); "+
		"%d PUTs (%d bytes) never kept (cut off, refused, or of files the trainer renamed); %d other PUTs (%d bytes); %d requests refused by the store",
		c.Files, c.LocalBytes, c.Puts, c.Parts, c.RetriedPuts, c.ResentBytes, c.GonePuts, c.GoneBytes, c.OtherPuts, c.OtherBytes, c.Refused)
}

// jobStoreCost sums the store traffic since before for job jobID, whose
// trainer files are in dir.
func jobStoreCost(t *testing.T, since localcluster.S3Traffic, jobID, dir string) storeCost {
	t.Helper()
	var c storeCost
	c.Refused = since.Refused
	sizes := localSizes(t, dir)
	files := map[string]bool{}
	for path, pt := range since.ByPath {
		if !strings.Contains(path, "/"+jobID+"/") {
			continue
		}
		c.TotalPuts += pt.Puts
		c.TotalBytes += pt.Bytes
		// A direct upload's object (.tether-uploads/<job-id>/<id>) is the
		// file it was committed as; one never committed was cut or refused
		// (its <id>.committed marker is the server's, counted as other).
		target := path
		if pt.CopiedTo != "" {
			target = pt.CopiedTo
		}
		rel := immutableRel(target)
		_, exists := sizes[rel]
		switch {
		case strings.Contains(path, "/"+objects.MultipartStatePrefix(jobID)):
			// The binding server's record of a multipart upload, written
			// after each part.
			c.OtherPuts += pt.Puts
			c.OtherBytes += pt.Bytes
		case strings.Contains(path, "/"+upload.UploadsPrefix) && pt.CopiedTo == "" && !strings.HasSuffix(path, ".committed"):
			c.GonePuts += pt.Puts
			c.GoneBytes += pt.Bytes
		case rel == "":
			c.OtherPuts += pt.Puts
			c.OtherBytes += pt.Bytes
		case !exists:
			c.GonePuts += pt.Puts
			c.GoneBytes += pt.Bytes
		default:
			files[rel] = true
			c.Puts += pt.Puts - pt.Parts + pt.Uploads
			c.Parts += pt.Parts
			c.Bytes += pt.Bytes
		}
	}
	c.Files = len(files)
	for rel := range files {
		c.LocalBytes += sizes[rel]
	}
	c.RetriedPuts = c.Puts - c.Files
	c.ResentBytes = c.Bytes - c.LocalBytes
	return c
}

// immutableRel is the trainer path (checkpoints/... or model/...) a store
// request path names, pending or final, or "".
func immutableRel(path string) string {
	for _, dir := range []string{"/checkpoints/", "/model/"} {
		if i := strings.LastIndex(path, dir); i >= 0 {
			return path[i+1:]
		}
	}
	return ""
}

// localSizes is the size of each of the trainer's files under dir.
func localSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitStorePut polls (every 10ms, up to timeout) until an upload of size
// bytes to a key of job jobID (the file's own key, pending key, or direct
// upload) has carried at least n bytes since before; it returns that path.
// An upload of size bytes is a PUT of that size or, from the binding
// server's multipart threshold on, the parts of the key (whose PUTs do not
// tell the object's size): the only files stored in parts in a job must
// then be of size bytes.
func (e *env) waitStorePut(t *testing.T, before localcluster.S3Traffic, size, n int64, timeout time.Duration, jobID string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for path, pt := range e.s3Traffic(t).Since(before).ByPath {
			inParts := pt.Parts > 0 && size >= upload.DefaultMultipartThreshold
			if strings.Contains(path, "/"+jobID+"/") && (pt.Size == size || inParts) && pt.Bytes >= n {
				return path
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: no upload of %d bytes of job %s has carried %d yet", timeout, size, jobID, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replicaMetric is name{labels} scraped from replica i alone: 0 when the
// replica does not answer or has no such sample.
func (e *env) replicaMetric(t *testing.T, i int, name string, labels ...string) float64 {
	t.Helper()
	text, err := e.tether.Replicas()[i].Metrics()
	if err != nil {
		return 0
	}
	v, _ := findMetric(text, name, labels...)
	return v
}

// restartOnCleanup starts killed replicas again when the test ends, so the
// scenarios after it have the whole control plane.
func (e *env) restartOnCleanup(t *testing.T, replicas ...int) {
	t.Cleanup(func() {
		for _, i := range replicas {
			if exited, _ := e.tether.Replicas()[i].Process().Exited(); exited {
				if err := e.tether.StartReplicaAgain(context.Background(), i); err != nil {
					t.Errorf("starting replica %d again: %v", i, err)
				}
			}
		}
	})
}

// retryingSubmitter creates bound TrainJobs as an orchestrator would while
// Tether may be down: each create refused by Tether's webhook is tried
// again every 2s until accepted; any other error stops it.
type retryingSubmitter struct {
	mu   sync.Mutex
	got  submitted
	done chan struct{}
}

// submitted is what a retryingSubmitter achieved.
type submitted struct {
	names                     []string
	refusals                  int // creates refused naming trainjobs.tether.dev
	firstCreated, lastCreated time.Time
	err                       error
}

// submitRetrying submits n bound TrainJobs bound-0..bound-<n-1> in ns (a
// short plan each), retrying refused creates in the background.
func (e *env) submitRetrying(t *testing.T, ns string, n int) *retryingSubmitter {
	t.Helper()
	s := &retryingSubmitter{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	var wg sync.WaitGroup
	for i := range n {
		name := fmt.Sprintf("bound-%d", i)
		setPlans(ns, name, localcluster.TrainerPlan{Steps: 4, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := e.c.Client.Create(ctx, bound(trainJob(name, ns)).Queue("user-queue").Obj())
				s.mu.Lock()
				switch {
				case err == nil:
					now := time.Now()
					if s.got.firstCreated.IsZero() {
						s.got.firstCreated = now
					}
					s.got.lastCreated = now
					s.got.names = append(s.got.names, name)
				case strings.Contains(err.Error(), "trainjobs.tether.dev"):
					s.got.refusals++
				default:
					s.got.err = errors.Join(s.got.err, fmt.Errorf("creating %s: %w", name, err))
				}
				s.mu.Unlock()
				if err == nil || !strings.Contains(err.Error(), "trainjobs.tether.dev") {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(2 * time.Second):
				}
			}
		}()
	}
	go func() { wg.Wait(); close(s.done) }()
	return s
}

// sofar is what the submitter achieved so far.
func (s *retryingSubmitter) sofar() submitted {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.got
	g.names = append([]string(nil), s.got.names...)
	return g
}

// wait waits until every TrainJob is created.
func (s *retryingSubmitter) wait(t *testing.T, timeout time.Duration) submitted {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		t.Fatalf("TrainJobs not all created within %s: %+v", timeout, s.sofar())
	}
	g := s.sofar()
	if g.err != nil {
		t.Fatal(g.err)
	}
	return g
}
