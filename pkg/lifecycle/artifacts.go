package lifecycle

import (
	"fmt"
	"slices"
	"strings"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// maxMissing bounds status.artifacts.missing (its CRD MaxItems).
const maxMissing = binding.MaxReportedUnverified

// boundRanks is how many nodes must have a verified manifest: NodeCount
// once known, else every node seen so far (at least one).
func boundRanks(st *tetherv1.WorkerBindingStatus) int32 {
	if st.NodeCount > 0 {
		return st.NodeCount
	}
	return max(int32(len(st.Nodes)), 1)
}

// ManifestVerified reports whether every bound node's manifest is verified.
func ManifestVerified(st *tetherv1.WorkerBindingStatus) bool {
	for r := range boundRanks(st) {
		n := Node(st, r)
		if n == nil || n.Artifacts == nil || !n.Artifacts.Verified {
			return false
		}
	}
	return true
}

// UnverifiedRanks are the bound nodes whose manifest is not verified.
func UnverifiedRanks(st *tetherv1.WorkerBindingStatus) []int32 {
	var ranks []int32
	for r := range boundRanks(st) {
		if n := Node(st, r); n == nil || n.Artifacts == nil || !n.Artifacts.Verified {
			ranks = append(ranks, r)
		}
	}
	return ranks
}

// unverifiedNodes names the manifests still missing a verdict.
func unverifiedNodes(st *tetherv1.WorkerBindingStatus) string {
	var ranks []string
	for r := range boundRanks(st) {
		if n := Node(st, r); n == nil || n.Artifacts == nil || !n.Artifacts.Verified {
			ranks = append(ranks, fmt.Sprint(r))
		}
	}
	if st.NodeCount <= 1 {
		return "the artifact manifest"
	}
	if len(ranks) > 5 {
		ranks = append(ranks[:5], fmt.Sprintf("and %d more", len(ranks)-5))
	}
	return "the manifests of node(s) " + strings.Join(ranks, ", ")
}

// ArtifactsRecorded stores the server's verdict on node rank's manifest,
// written by pod podUID, and, once the TrainJob is complete, completes the
// binding when every node's is verified. A manifest that names no pod, or a
// pod that is not the node's in this attempt (replaced, flushed after a
// preemption, or another node's), says nothing about the current attempt's
// files: one node cannot vouch for another. Nor does any manifest override
// the node's own final flush naming files it could not verify
// (FlushUnverified): whoever holds the job's token can mint the pod's
// token and upload a manifest for it, but only the node's sidecar knows
// what its flush left behind.
func ArtifactsRecorded(st *tetherv1.WorkerBindingStatus, rank int32, podUID string, a tetherv1.NodeArtifacts) bool {
	if IsFinal(st.Phase) {
		return false
	}
	if n := Node(st, rank); podUID == "" || n == nil || n.PodUID != podUID || flushReported(n) {
		return false
	}
	if st.Phase == tetherv1.PhasePending && st.Reason == tetherv1.ReasonPreempted {
		a.Verified = false
	}
	n := node(st, rank)
	if n == nil {
		return false
	}
	a.Missing = prefixed(rank, a.Missing)
	BoundNodeArtifacts(&a)
	changed := n.Artifacts == nil || !equalNodeArtifacts(n.Artifacts, &a)
	n.Artifacts = &a
	aggregateArtifacts(st)
	if st.Phase == tetherv1.PhaseFinishing && (st.Reason == tetherv1.ReasonAwaitingArtifacts || st.Reason == tetherv1.ReasonPromotingArtifacts) {
		return gate(st) || changed
	}
	return changed
}

// VerdictRetracted takes back node rank's verdict on a binding that ended
// without succeeding, once the versions its manifest listed are gone from
// the store (dropped, never promoted): a says what the store holds instead.
func VerdictRetracted(st *tetherv1.WorkerBindingStatus, rank int32, a tetherv1.NodeArtifacts) bool {
	if !IsFinal(st.Phase) || st.Phase == tetherv1.PhaseSucceeded {
		return false
	}
	n := node(st, rank)
	if n == nil || n.Artifacts == nil || !n.Artifacts.Verified {
		return false
	}
	a.Verified = false
	a.Missing = prefixed(rank, a.Missing)
	BoundNodeArtifacts(&a)
	n.Artifacts = &a
	aggregateArtifacts(st)
	return true
}

// VerifiedRanks are the ranks whose manifest the binding calls verified.
func VerifiedRanks(st *tetherv1.WorkerBindingStatus) []int32 {
	var out []int32
	for i := range st.Nodes {
		if a := st.Nodes[i].Artifacts; a != nil && a.Verified {
			out = append(out, st.Nodes[i].Rank)
		}
	}
	return out
}

func equalNodeArtifacts(a, b *tetherv1.NodeArtifacts) bool {
	return a.Manifest == b.Manifest && a.ManifestSHA256 == b.ManifestSHA256 && a.Verified == b.Verified && a.Files == b.Files && a.Bytes == b.Bytes &&
		slices.Equal(a.Missing, b.Missing) && a.MissingCount == b.MissingCount && a.LastError == b.LastError
}

// NodePods are the nodes' current pods' UIDs by rank (the artifact
// endpoint lets a pod write only its own rank's keys).
func NodePods(st *tetherv1.WorkerBindingStatus) map[int]string {
	out := make(map[int]string, len(st.Nodes))
	for i := range st.Nodes {
		if n := &st.Nodes[i]; n.PodUID != "" {
			out[int(n.Rank)] = n.PodUID
		}
	}
	return out
}

// VerifiedNodes are the nodes whose manifest for the current attempt is
// verified, by rank, with the manifest's recorded SHA-256: the artifact
// endpoint lets such a node write only what that manifest lists. A new
// attempt (resetNodes, a replaced pod) forgets the verdict, and the node
// writes again.
func VerifiedNodes(st *tetherv1.WorkerBindingStatus) map[int]string {
	var out map[int]string
	for i := range st.Nodes {
		if n := &st.Nodes[i]; n.PodUID != "" && n.Artifacts != nil && n.Artifacts.Verified {
			if out == nil {
				out = map[int]string{}
			}
			out[int(n.Rank)] = n.Artifacts.ManifestSHA256
		}
	}
	return out
}

// ArtifactsWritable says whether the job's artifacts may still change: not
// once every manifest is verified with the TrainJob complete (they are being
// promoted, exactly as listed), nor once the binding is final. The artifact
// endpoint refuses writes then, so what the manifests list is what stays.
func ArtifactsWritable(st *tetherv1.WorkerBindingStatus) bool {
	return !IsFinal(st.Phase) && !Promoting(st)
}

// ArtifactsState names, for a refused write, the state that made the
// artifacts final ("Succeeded", "Finishing/PromotingArtifacts").
func ArtifactsState(st *tetherv1.WorkerBindingStatus) string {
	if st.Reason == "" || IsFinal(st.Phase) {
		return string(st.Phase)
	}
	return string(st.Phase) + "/" + st.Reason
}

// VerifiedManifests are the bound nodes' verified manifests (rank and
// recorded SHA-256), what promotion puts in place.
func VerifiedManifests(st *tetherv1.WorkerBindingStatus) map[int32]string {
	out := map[int32]string{}
	for r := range boundRanks(st) {
		if n := Node(st, r); n != nil && n.Artifacts != nil && n.Artifacts.Verified {
			out[r] = n.Artifacts.ManifestSHA256
		}
	}
	return out
}

// ArtifactsNotAsListed takes back node rank's verdict: promotion found a
// file its verified manifest lists (path, relative to the node's prefix), or
// the manifest itself, no longer stored as listed. A promoting binding
// waits for artifacts again (and fails ArtifactsIncomplete once its grace is
// over): Succeeded would promise final keys that do not hold what the
// manifest lists.
func ArtifactsNotAsListed(st *tetherv1.WorkerBindingStatus, rank int32, path, why string) bool {
	if IsFinal(st.Phase) {
		return false
	}
	n := node(st, rank)
	if n == nil {
		return false
	}
	a := tetherv1.NodeArtifacts{}
	if n.Artifacts != nil {
		a = *n.Artifacts
	}
	a.Verified = false
	a.Missing = prefixed(rank, []string{path})
	a.MissingCount = 1
	a.LastError = why
	n.Artifacts = &a
	aggregateArtifacts(st)
	if Promoting(st) {
		gate(st)
	}
	return true
}

// prefixed turns node-relative paths into paths relative to the job's prefix.
func prefixed(rank int32, paths []string) []string {
	p := upload.NodePrefix(int(rank))
	if p == "" || len(paths) == 0 {
		return paths
	}
	out := make([]string, len(paths))
	for i, s := range paths {
		out[i] = p + s
	}
	return out
}

// FlushUnverified records what node rank's final flush could not verify:
// up to ten paths, how many in all, and why the first failed. The report
// is the node's own word on its attempt and outranks any manifest: it
// replaces a manifest's verdict, verified or not (a manifest listing fewer
// files than the flush had is not the node's), and no manifest recorded
// after it replaces it (ArtifactsRecorded), until the node's next pod. It
// counts only while the node's current pod has said it is terminating
// (Finishing, which the same finishing frame records first): a report that
// lands after the node went on with another pod is the old pod's. A binding
// already failed as ArtifactsIncomplete gets its message told again with
// the files named; a Succeeded one is final.
func FlushUnverified(st *tetherv1.WorkerBindingStatus, rank int32, paths []string, count int, lastError string) bool {
	if len(paths) == 0 || st.Phase == tetherv1.PhaseSucceeded {
		return false
	}
	n := node(st, rank)
	if n == nil || !n.Terminating && !IsFinal(st.Phase) {
		return false
	}
	paths = prefixed(rank, paths[:min(len(paths), maxMissing)])
	a := tetherv1.NodeArtifacts{Missing: slices.Clone(paths), MissingCount: int32(max(count, len(paths))), LastError: lastError}
	BoundNodeArtifacts(&a)
	if n.Artifacts != nil && equalNodeArtifacts(n.Artifacts, &a) {
		return false
	}
	n.Artifacts = &a
	aggregateArtifacts(st)
	switch {
	case st.Phase == tetherv1.PhaseFailed && st.Reason == tetherv1.ReasonArtifactsIncomplete:
		st.Message = "artifacts incomplete: " + MissingArtifacts(st)
	case st.Phase == tetherv1.PhaseFinishing && (st.Reason == tetherv1.ReasonAwaitingArtifacts || st.Reason == tetherv1.ReasonPromotingArtifacts):
		// A verdict taken back: promotion waits for the node again.
		gate(st)
	}
	return true
}

// flushReported says whether node n's artifacts are its final flush's
// report of unverified files (FlushUnverified) rather than a manifest's
// verdict: only a report has missing files and no manifest.
func flushReported(n *tetherv1.NodeStatus) bool {
	return n.Artifacts != nil && n.Artifacts.Manifest == "" && len(n.Artifacts.Missing) > 0
}

// UploadReported records what node rank's sidecar says of its uploads: the
// bytes it has had verified and its last upload failure ("" when none).
func UploadReported(st *tetherv1.WorkerBindingStatus, rank int32, podUID string, uploadedBytes int64, lastError string) bool {
	n := current(st, rank, podUID)
	if n == nil {
		return false
	}
	if st.Artifacts == nil {
		if uploadedBytes == 0 && lastError == "" {
			return false
		}
		st.Artifacts = &tetherv1.ArtifactsStatus{}
	}
	a := st.Artifacts
	before := *a
	n.UploadedBytes = uploadedBytes
	var sum int64
	for i := range st.Nodes {
		sum += st.Nodes[i].UploadedBytes
	}
	// Counters the worker reports survive a new attempt's restart from 0.
	a.UploadedBytes = max(sum, a.UploadedBytes)
	tag := ""
	if st.NodeCount > 1 {
		tag = fmt.Sprintf("node %d: ", rank)
	}
	switch {
	case lastError != "":
		a.LastError = Truncate(tag+lastError, MaxErrorBytes)
	case a.LastError != "" && (tag == "" || strings.HasPrefix(a.LastError, tag)):
		a.LastError = ""
	}
	return a.UploadedBytes != before.UploadedBytes || a.LastError != before.LastError
}

// aggregateArtifacts sums the nodes' verdicts into status.artifacts: rank
// 0's manifest key, verified when every bound node's is, the files, bytes
// and missing files of all nodes (missing bounded).
func aggregateArtifacts(st *tetherv1.WorkerBindingStatus) {
	found := false
	var agg tetherv1.ArtifactsStatus
	for i := range st.Nodes {
		na := st.Nodes[i].Artifacts
		if na == nil {
			continue
		}
		found = true
		if st.Nodes[i].Rank == 0 {
			agg.Manifest = na.Manifest
		}
		agg.Files += na.Files
		agg.Bytes += na.Bytes
		agg.MissingCount += max(na.MissingCount, int32(len(na.Missing)))
		for _, m := range na.Missing {
			if len(agg.Missing) < maxMissing {
				agg.Missing = append(agg.Missing, m)
			}
		}
		if agg.LastError == "" && na.LastError != "" {
			agg.LastError = na.LastError
			if st.NodeCount > 1 {
				agg.LastError = fmt.Sprintf("node %d: %s", st.Nodes[i].Rank, na.LastError)
			}
		}
	}
	if !found && st.Artifacts == nil {
		return
	}
	agg.ManifestVerified = found && ManifestVerified(st)
	if prev := st.Artifacts; prev != nil {
		// What the workers report beyond their manifests is kept.
		agg.UploadedBytes, agg.Logs = prev.UploadedBytes, prev.Logs
		agg.Skipped, agg.SkippedCount = prev.Skipped, prev.SkippedCount
		if agg.LastError == "" {
			agg.LastError = prev.LastError
		}
	}
	st.Artifacts = &agg
}

// ArtifactsIncomplete fails a binding whose TrainJob completed but whose
// nodes' manifests were not all verified in time.
func ArtifactsIncomplete(st *tetherv1.WorkerBindingStatus, detail string) bool {
	if IsFinal(st.Phase) || ManifestVerified(st) {
		return false
	}
	return finish(st, tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete, "artifacts incomplete: "+detail)
}

// MissingArtifacts describes what keeps the bound nodes' manifests from
// being verified, naming each node (at most three) and its files or cause.
func MissingArtifacts(st *tetherv1.WorkerBindingStatus) string {
	var parts []string
	more := 0
	for r := range boundRanks(st) {
		n := Node(st, r)
		if n != nil && n.Artifacts != nil && n.Artifacts.Verified {
			continue
		}
		if len(parts) == 3 {
			more++
			continue
		}
		d := nodeMissing(n, reportedError(st, r))
		if st.NodeCount > 1 {
			d = fmt.Sprintf("node %d: %s", r, d)
		}
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		return "the manifest was not verified"
	}
	out := strings.Join(parts, "; ")
	if more > 0 {
		out += fmt.Sprintf("; and %d more nodes", more)
	}
	return out
}

// reportedError is node rank's last upload failure as its heartbeats
// reported it (status.artifacts.lastError, tagged "node r: " in a
// multi-node job), or "".
func reportedError(st *tetherv1.WorkerBindingStatus, rank int32) string {
	if st.Artifacts == nil || st.Artifacts.LastError == "" {
		return ""
	}
	if st.NodeCount <= 1 {
		return st.Artifacts.LastError
	}
	e, ok := strings.CutPrefix(st.Artifacts.LastError, fmt.Sprintf("node %d: ", rank))
	if !ok {
		return ""
	}
	return e
}

// noManifestUnexplained is a node's lack when no upload error of its
// reached the binding. That is what the binding knows, not that the worker
// had none: a final flush that met a failing store can go unreported when
// the binding server is unreachable too.
const noManifestUnexplained = "no manifest was uploaded, and no upload error of the node's sidecar reached the binding (did the sidecar run its final flush, and could it reach the binding server?)"

// nodeMissing says what a node lacks; reported is its last upload error
// from heartbeats, the cause when it sent no final report.
func nodeMissing(n *tetherv1.NodeStatus, reported string) string {
	var a *tetherv1.NodeArtifacts
	if n != nil {
		a = n.Artifacts
	}
	switch {
	case a == nil && reported != "":
		// The worker named no file, but said why it uploaded no manifest.
		return "no manifest was uploaded: " + reported
	case a == nil:
		return noManifestUnexplained
	case a.Manifest == "" && len(a.Missing) > 0:
		shown := a.Missing[:min(len(a.Missing), 3)]
		more := ""
		if k := int(a.MissingCount) - len(shown); k > 0 {
			more = fmt.Sprintf(" and %d more", k)
		}
		// A manifest may have been uploaded too: the report outranks it.
		return fmt.Sprintf("no verified manifest: the worker's final flush could not verify %d file(s), %s%s; first error: %s",
			max(int(a.MissingCount), len(a.Missing)), strings.Join(shown, ", "), more, a.LastError)
	case a.Manifest == "" && a.LastError != "":
		// The worker named no file, but said why it uploaded no manifest.
		return "no manifest was uploaded: " + a.LastError
	case a.Manifest == "":
		return noManifestUnexplained
	case len(a.Missing) > 0:
		return fmt.Sprintf("%s is not stored as the manifest lists it", a.Missing[0])
	case a.LastError != "":
		return a.LastError
	default:
		return "the manifest was not verified"
	}
}
