package soakcheck

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// Version is one version of one file as the trainer closed it (its durable
// record, ReadRecord).
type Version struct {
	Path string
	MD5  string
	Size int64
}

// Job is what the soak knows of one TrainJob once everything healed.
type Job struct {
	Namespace, Name string
	// Labeled says the job asked to be bound (tether.dev/bind=true).
	Labeled bool
	// JobID is its binding's job id ("" unlabeled).
	JobID string
	// Nodes is how many nodes it ran on.
	Nodes int
	// MinAttempts is how many attempts its trainers' own plan makes (one
	// that fails once and is replaced: 2); faults may add more, never fewer.
	MinAttempts int
	// Wrote is every version of every file each rank's trainer closed.
	Wrote map[int][]Version
	// Binding is its final WorkerBinding (nil: none, as for an unlabeled job).
	Binding *tetherv1.WorkerBinding
	// Ended says the TrainJob reached Complete or Failed.
	Ended bool
	// Running says every pod of an unlabeled job runs (on kwok nodes
	// nothing ends them): it never waited on Tether.
	Running bool
	// Faults are the nemesis's faults while it ran, for the report.
	Faults []string
}

func (j Job) String() string {
	if j.Name == "" {
		return ""
	}
	return j.Namespace + "/" + j.Name
}

// Store is the artifact store as the checker reads it: the bytes
// themselves, never an ETag or a status field.
type Store interface {
	// List returns the keys under prefix.
	List(ctx context.Context, prefix string) ([]string, error)
	// Open reads key's bytes (upload.ErrNotFound when there is none).
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// MultipartLister is a Store that also lists the store's open multipart
// uploads (an objects.Multiparter does): nothing left behind then covers
// them, whose parts the store bills until they are aborted.
type MultipartLister interface {
	// ListMultipartUploads returns the open uploads of keys under prefix.
	ListMultipartUploads(ctx context.Context, prefix string) ([]objects.MultipartUpload, error)
}

// Input is everything the checker reads.
type Input struct {
	Jobs  []Job
	Store Store
	// Access is the artifact endpoint's access log of every replica.
	Access []store.AccessRecord
	// Leftovers are objects of ended jobs still in the cluster that the
	// docs do not keep on purpose (sessions, Leases, Secrets), as the runner
	// found them.
	Leftovers []string
}

// The invariants, in the order the report lists them.
const (
	NothingFalselyVerified = "nothing falsely verified"
	NothingLost            = "nothing lost"
	TruthfulEnd            = "truthful end"
	Isolation              = "isolation"
	NothingLeftBehind      = "nothing left behind"
)

// Invariant is one invariant's result.
type Invariant struct {
	Name       string
	Checked    int
	Violations []Violation
}

// Violation is one breach, with what is needed to look at it.
type Violation struct {
	Job, File, Detail string
	Faults            []string
}

// Report is the checker's verdict.
type Report struct{ Invariants []Invariant }

// OK says no invariant was violated.
func (r Report) OK() bool {
	for _, inv := range r.Invariants {
		if len(inv.Violations) > 0 {
			return false
		}
	}
	return true
}

// String is a table per invariant (checked, violated), then each violation.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %8s %8s\n", "INVARIANT", "CHECKED", "VIOLATED")
	for _, inv := range r.Invariants {
		fmt.Fprintf(&b, "%-26s %8d %8d\n", inv.Name, inv.Checked, len(inv.Violations))
	}
	for _, inv := range r.Invariants {
		for _, v := range inv.Violations {
			fmt.Fprintf(&b, "%s: job %s file %q: %s", inv.Name, v.Job, v.File, v.Detail)
			if len(v.Faults) > 0 {
				fmt.Fprintf(&b, " (faults: %s)", strings.Join(v.Faults, "; "))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// checker accumulates one run of Check.
type checker struct {
	ctx context.Context
	in  Input
	inv map[string]*Invariant
	// sums caches the MD5 of each key read.
	sums map[string]stored
}

type stored struct {
	md5  string
	size int64
	err  error
}

// Check checks every invariant against what the store holds.
func Check(ctx context.Context, in Input) Report {
	c := &checker{ctx: ctx, in: in, inv: map[string]*Invariant{}, sums: map[string]stored{}}
	names := []string{NothingFalselyVerified, NothingLost, TruthfulEnd, Isolation, NothingLeftBehind}
	for _, n := range names {
		c.inv[n] = &Invariant{Name: n}
	}
	byID := map[string]Job{}
	for _, j := range in.Jobs {
		if j.JobID != "" {
			byID[j.JobID] = j
		}
		c.truthfulEnd(j)
		if j.Labeled && j.Binding != nil {
			c.verified(j)
			c.leftBehind(j)
		}
	}
	c.lost(byID)
	c.isolation(byID)
	c.openUploads(byID)
	for _, l := range in.Leftovers {
		c.violate(NothingLeftBehind, Job{}, l, "still in the cluster after every job ended")
	}
	var r Report
	for _, n := range names {
		r.Invariants = append(r.Invariants, *c.inv[n])
	}
	return r
}

func (c *checker) check(name string) { c.inv[name].Checked++ }

func (c *checker) violate(name string, j Job, file, format string, args ...any) {
	inv := c.inv[name]
	inv.Violations = append(inv.Violations, Violation{Job: j.String(), File: file, Detail: fmt.Sprintf(format, args...), Faults: j.Faults})
}

// read is the MD5 and size of key's bytes, read from the store.
func (c *checker) read(key string) stored {
	if s, ok := c.sums[key]; ok {
		return s
	}
	var s stored
	rc, err := c.in.Store.Open(c.ctx, key)
	if err != nil {
		s.err = err
	} else {
		h := md5.New()
		s.size, s.err = io.Copy(h, rc)
		_ = rc.Close()
		s.md5 = hex.EncodeToString(h.Sum(nil))
	}
	c.sums[key] = s
	return s
}

// wrote says whether rank's trainer ever closed path with md5.
func wrote(j Job, rank int, path, md5 string) bool {
	return slices.ContainsFunc(j.Wrote[rank], func(v Version) bool { return v.Path == path && v.MD5 == md5 })
}

// closedUnder says whether rank's trainer ever closed a version of path.
func closedUnder(j Job, rank int, path string) bool {
	return slices.ContainsFunc(j.Wrote[rank], func(v Version) bool { return v.Path == path })
}

// wroteBytes says whether rank's trainer closed any file with md5.
func wroteBytes(j Job, rank int, md5 string) bool {
	return slices.ContainsFunc(j.Wrote[rank], func(v Version) bool { return v.MD5 == md5 })
}

// verified: every node manifest the binding calls verified is in the store
// (its SHA-256 the one recorded), and every file it lists is in the store
// byte for byte as listed, and is a version the trainer wrote.
func (c *checker) verified(j Job) {
	for _, n := range j.Binding.Status.Nodes {
		a := n.Artifacts
		if a == nil || !a.Verified {
			continue
		}
		rank := int(n.Rank)
		key := upload.ManifestKey(j.JobID, rank)
		c.check(NothingFalselyVerified)
		m, sum, err := c.manifest(key)
		if err != nil {
			c.violate(NothingFalselyVerified, j, key, "node %d's manifest is called verified: %v", rank, err)
			continue
		}
		if a.ManifestSHA256 != "" && a.ManifestSHA256 != sum {
			c.violate(NothingFalselyVerified, j, key, "the binding records manifest SHA-256 %s, the store holds %s", a.ManifestSHA256, sum)
		}
		for _, f := range m.Files {
			c.check(NothingFalselyVerified)
			fk := j.JobID + "/" + upload.NodePrefix(rank) + f.Path
			s := c.read(fk)
			switch {
			case s.err != nil:
				c.violate(NothingFalselyVerified, j, fk, "listed as verified, not readable from the store: %v", s.err)
			case s.md5 != f.MD5 || s.size != f.Size:
				c.violate(NothingFalselyVerified, j, fk, "listed as MD5 %s (%d bytes), the store holds %s (%d bytes)", f.MD5, f.Size, s.md5, s.size)
			case !wrote(j, rank, f.Path, f.MD5):
				c.violate(NothingFalselyVerified, j, fk, "verified as MD5 %s, which rank %d's trainer never wrote", f.MD5, rank)
			}
		}
	}
}

// manifest reads and parses the manifest at key, with its SHA-256.
func (c *checker) manifest(key string) (*upload.Manifest, string, error) {
	rc, err := c.in.Store.Open(c.ctx, key)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 64<<20))
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	var m upload.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, "", fmt.Errorf("not a manifest: %w", err)
	}
	return &m, hex.EncodeToString(sum[:]), nil
}

// lost: every key a PUT or commit stored (the access log's "ok") is still
// in the store at the end, in a version its trainer wrote: a later version
// may replace it, garbage never may.
func (c *checker) lost(byID map[string]Job) {
	for _, a := range c.in.Access {
		if a.Code != "" || (a.Op != "put" && a.Op != "commit") || a.JobID == "" {
			continue
		}
		j, ok := byID[a.JobID]
		if !ok {
			continue
		}
		rank, path, ok := keyOf(a, j)
		if !ok || path == upload.ManifestName {
			continue
		}
		a.Rank = rank
		c.check(NothingLost)
		s := c.read(a.Key)
		switch {
		case s.err != nil:
			c.violate(NothingLost, j, a.Key, "stored by request %s (%s), gone at the end: %v", a.RequestID, a.Op, s.err)
		case !closedUnder(j, a.Rank, path):
			// A name the trainer never closed a version under: a
			// temporary one (written, closed, renamed), caught between
			// its close and its rename. Its bytes must still be a whole
			// version the trainer wrote, never a part of one.
			if !wroteBytes(j, a.Rank, s.md5) {
				c.violate(NothingLost, j, a.Key, "the store holds MD5 %s under a name rank %d's trainer never closed a file under, and no version it wrote has those bytes", s.md5, a.Rank)
			}
		case !wrote(j, a.Rank, path, s.md5):
			c.violate(NothingLost, j, a.Key, "the store holds MD5 %s, no version rank %d's trainer wrote", s.md5, a.Rank)
		}
	}
}

// keyOf is the rank and the path (relative to that rank's prefix) of an
// access record's key. A record that does not know its rank (-1: the job's
// node count was not recorded yet, and the key lies under nodes/<r>/) is
// node r's when it is node r's manifest or rank r's trainer closed a file
// under that path, else rank 0's.
func keyOf(a store.AccessRecord, j Job) (int, string, bool) {
	rank := a.Rank
	if rank == -1 {
		rank = 0
		whole, _ := strings.CutPrefix(a.Key, a.JobID+"/")
		for r := range j.Nodes {
			if p, ok := strings.CutPrefix(whole, upload.NodePrefix(r)); ok && r > 0 && (p == upload.ManifestName || closedUnder(j, r, p)) {
				rank = r
			}
		}
	}
	path, ok := strings.CutPrefix(a.Key, a.JobID+"/"+upload.NodePrefix(rank))
	return rank, path, ok
}

// isolation: a request that succeeded touched only its own token's job's
// keys; an unlabeled job never got a binding.
func (c *checker) isolation(byID map[string]Job) {
	for _, a := range c.in.Access {
		if a.Code != "" {
			continue
		}
		c.check(Isolation)
		// (Rank -1 alone is no breach: inside the job's prefix it says the
		// node count was not recorded yet.)
		if a.JobID == "" || (a.Key != "" && !strings.HasPrefix(a.Key, a.JobID+"/")) {
			c.violate(Isolation, byID[a.JobID], a.Key, "request %s (%s) of binding %q (job %q, rank %d) succeeded on a key outside its job's", a.RequestID, a.Op, a.Binding, a.JobID, a.Rank)
		}
	}
	for _, j := range c.in.Jobs {
		if j.Labeled {
			continue
		}
		c.check(Isolation)
		if j.Binding != nil {
			c.violate(Isolation, j, "", "an unlabeled TrainJob has WorkerBinding %s", j.Binding.Name)
		}
	}
}

// truthfulEnd: every job ended; a bound job's binding has a final phase,
// Succeeded only with every node's manifest verified.
func (c *checker) truthfulEnd(j Job) {
	c.check(TruthfulEnd)
	if !j.Labeled {
		if !j.Ended && !j.Running {
			c.violate(TruthfulEnd, j, "", "an unlabeled TrainJob neither ended nor ran: it waited on Tether")
		}
		return
	}
	if !j.Ended {
		c.violate(TruthfulEnd, j, "", "the TrainJob never ended")
	}
	if j.Binding == nil {
		c.violate(TruthfulEnd, j, "", "a labeled TrainJob has no WorkerBinding")
		return
	}
	st := j.Binding.Status
	switch st.Phase {
	case tetherv1.PhaseSucceeded:
		verified := 0
		for _, n := range st.Nodes {
			if n.Artifacts != nil && n.Artifacts.Verified {
				verified++
			}
		}
		if verified != j.Nodes {
			c.violate(TruthfulEnd, j, "", "Succeeded with %d of %d nodes' manifests verified", verified, j.Nodes)
		}
		if int(st.Attempt) < j.MinAttempts {
			c.violate(TruthfulEnd, j, "", "Succeeded at attempt %d, but its trainer failed and was replaced: at least %d attempts happened", st.Attempt, j.MinAttempts)
		}
	case tetherv1.PhaseFailed:
		if st.Reason == tetherv1.ReasonNeverBound {
			// NeverBound says no trainer pod ran with the sidecar; a request
			// the endpoint authorized with the job's token and a pod's own
			// pod token (the record names the job only then) says one did,
			// whatever came of it. A stored write is the worse lie: name it.
			var ran *store.AccessRecord
			for i := range c.in.Access {
				a := &c.in.Access[i]
				if a.JobID != j.JobID {
					continue
				}
				if a.Code == "" && (a.Op == "put" || a.Op == "commit") {
					ran = a
					break
				}
				if ran == nil {
					ran = a
				}
			}
			if ran != nil {
				what := "reached the artifact endpoint (" + ran.Op + " " + ran.Outcome() + ")"
				if ran.Code == "" && (ran.Op == "put" || ran.Op == "commit") {
					what = "stored this key"
				}
				c.violate(TruthfulEnd, j, ran.Key, "Failed/NeverBound (%q), but request %s %s with the job's token from pod %s: a sidecar ran", st.Message, ran.RequestID, what, ran.Pod)
			}
		}
	default:
		c.violate(TruthfulEnd, j, "", "binding phase %q after the heal, want Succeeded or Failed (%s: %s)", st.Phase, st.Reason, st.Message)
	}
}

// leftBehind: an ended job has no pending objects left.
func (c *checker) leftBehind(j Job) {
	if !j.Ended {
		return
	}
	c.check(NothingLeftBehind)
	keys, err := c.in.Store.List(c.ctx, j.JobID+"/"+upload.PendingDir)
	if err != nil {
		c.violate(NothingLeftBehind, j, upload.PendingDir, "listing: %v", err)
		return
	}
	for _, k := range keys {
		c.violate(NothingLeftBehind, j, k, "a pending object of an ended job")
	}
}

// openUploads: no multipart upload is left open, when the store lists
// them (MultipartLister): every one Tether starts is completed or aborted.
// An upload of a job that has not ended may still be completed (that the
// job never ended is truthful end's); any other, of an ended job or of no
// job the run knows, is left behind; but the start-up probe's own (under
// s3store.ProbePrefix): a probe cut short (its replica killed mid-probe)
// leaves its upload for a later start-up's probe to abort, as it leaves its
// objects.
func (c *checker) openUploads(byID map[string]Job) {
	ml, ok := c.in.Store.(MultipartLister)
	if !ok {
		return
	}
	c.check(NothingLeftBehind)
	ups, err := ml.ListMultipartUploads(c.ctx, "")
	if err != nil {
		c.violate(NothingLeftBehind, Job{}, "", "listing the open multipart uploads: %v", err)
		return
	}
	for _, u := range ups {
		if strings.HasPrefix(u.Key, s3store.ProbePrefix) {
			continue
		}
		jobID, _, _ := strings.Cut(u.Key, "/")
		j, known := byID[jobID]
		if known && !j.Ended {
			continue
		}
		c.violate(NothingLeftBehind, j, u.Key, "an open multipart upload (id %s, started %s): the store bills its parts until it is aborted",
			u.ID, u.Initiated.UTC().Format(time.RFC3339))
	}
}
