package upload

import (
	"strconv"
	"strings"
)

// PendingDir is where, under a job's prefix, the server keeps a PUT that
// would replace an existing object until the binding's outcome is known:
// <job-id>/.tether/pending/<path>.
const PendingDir = ReservedDir + "/pending/"

// LogsDir is where, under a job's prefix, the controller archives trainer
// logs: <job-id>/.tether/logs/<pod>.log. Under ReservedDir, so no sidecar
// can write there and a trainer's own logs/<pod>.log never collides.
const LogsDir = ReservedDir + "/logs/"

// MaxKeyLength is the longest key a client may PUT (bytes). S3 limits keys to
// 1024 bytes; a key must still fit when it is stored as pending, so the limit
// is 1024 minus len(PendingDir) = 1008.
const MaxKeyLength = 1024 - len(PendingDir)

// NodesDir holds, under a multi-node job's prefix, the artifacts of every
// node but rank 0: <job-id>/nodes/<rank>/<path>. Rank 0 keeps the job's
// prefix itself (<job-id>/<path>), as a single-node job does, so the files a
// job gathers on rank 0 (its final model) are where they always were, and
// two nodes writing the same relative path never share a key.
const NodesDir = "nodes"

// NodePrefix is where node rank's artifacts go under the job's prefix: ""
// for rank 0, "nodes/<rank>/" otherwise.
func NodePrefix(rank int) string {
	if rank <= 0 {
		return ""
	}
	return NodesDir + "/" + strconv.Itoa(rank) + "/"
}

// ManifestKey is node rank's manifest key.
func ManifestKey(jobID string, rank int) string {
	return jobID + "/" + NodePrefix(rank) + ManifestName
}

// KeyRank is the rank whose keys path (relative to the job's prefix) is in
// a job of nodes bound nodes: r for nodes/<r>/... with 0 < r < nodes, else
// 0 (in a single-node job nodes/ is a plain path of rank 0's).
func KeyRank(path string, nodes int) int {
	if nodes <= 1 {
		return 0
	}
	rest, ok := strings.CutPrefix(path, NodesDir+"/")
	if !ok {
		return 0
	}
	r, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0
	}
	rank, err := strconv.Atoi(r)
	if err != nil || rank <= 0 || rank >= nodes || strconv.Itoa(rank) != r {
		return 0
	}
	return rank
}

// ManifestRank reports whether path (relative to the job's prefix) is a
// node's manifest in a job of nodes bound nodes, and which node's. With one
// node only ManifestName is; with more, nodes/<rank>/manifest.json too.
func ManifestRank(path string, nodes int) (int, bool) {
	if path == ManifestName {
		return 0, true
	}
	if nodes <= 1 {
		return 0, false
	}
	rest, ok := strings.CutPrefix(path, NodesDir+"/")
	if !ok {
		return 0, false
	}
	r, name, ok := strings.Cut(rest, "/")
	if !ok || name != ManifestName {
		return 0, false
	}
	rank, err := strconv.Atoi(r)
	if err != nil || rank <= 0 || rank >= nodes || strconv.Itoa(rank) != r {
		return 0, false
	}
	return rank, true
}
