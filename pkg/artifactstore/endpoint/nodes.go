package endpoint

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// Every rank of a job holds the same token, so the token alone cannot tell
// one node from another: a write names its pod (names.HeaderArtifactPodUID), and in a
// multi-node job it may touch only the keys of the rank whose current,
// registered pod that is (rank 0: the job's prefix outside nodes/; rank r:
// nodes/<r>/). A manifest must name its pod, that pod must be its node's
// current one, so no node can vouch for another's files.

// accessRank is the rank an access record names for path: upload.KeyRank's, but
// -1 (not known) for a key under nodes/<r>/ while the binding has not
// recorded the job's node count yet (0): until then such a key is node r's
// in a multi-node job and a plain path of rank 0's in a single-node one,
// and the record must not guess.
func accessRank(path string, nodes int) int {
	if nodes == 0 && upload.KeyRank(path, binding.MaxBoundNodes) > 0 {
		return -1
	}
	return upload.KeyRank(path, nodes)
}

// checkNode checks that the request's pod is the current, registered pod
// of the rank whose key path is, in every binding, and returns that rank:
// a write from a pod the binding has not recorded is a write nothing
// accounts for (the binding would say the job never bound, or leave a
// replaced pod's flush beside its successor's files). Until the binding
// records the job's node count (0), a key under nodes/<r>/ is node r's if
// node r's pod sends it, and otherwise waits for the count: it is rank 0's
// plain path in a single-node job and node r's in a multi-node one.
func checkNode(rq *request, job Job, path string) (int, *apiError) {
	uid := rq.r.Header.Get(names.HeaderArtifactPodUID)
	if uid == "" {
		return 0, &apiError{http.StatusForbidden, "AccessDenied",
			"every write names its pod: send " + names.HeaderArtifactPodUID + " with the pod's UID (the sidecar does; upgrade an older one)"}
	}
	rank := upload.KeyRank(path, job.Nodes)
	if r := upload.KeyRank(path, binding.MaxBoundNodes); job.Nodes == 0 && r > 0 {
		switch registered, ok := rankOf(job.Pods, uid); {
		case job.Pods[r] == uid:
			return r, nil
		case ok && registered > 0:
			// A node r > 0 exists, so the job is multi-node: the key is node r's.
			rank = r
		default:
			rq.retryAfter = time.Second
			return 0, &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
				fmt.Sprintf("the binding has not recorded the job's node count yet, so whose key %s/%d/... is cannot be told; retry", upload.NodesDir, r)}
		}
	}
	want := job.Pods[rank]
	switch {
	case want == "":
		rq.retryAfter = time.Second
		return 0, &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("node %d has no registered pod on the binding yet (its sidecar registers first); retry", rank)}
	case uid != want:
		return 0, &apiError{http.StatusForbidden, "AccessDenied",
			fmt.Sprintf("pod %s is not node %d's current pod: a node writes only its own rank's keys, from its current registered pod (rank 0: <job-id>/<path> outside %s/, rank r: <job-id>/%s/<r>/<path>)",
				uid, rank, upload.NodesDir, upload.NodesDir)}
	}
	return rank, nil
}

// rankOf is the rank whose registered pod uid is.
func rankOf(pods map[int]string, uid string) (int, bool) {
	for r, u := range pods {
		if u == uid {
			return r, true
		}
	}
	return 0, false
}

// checkManifestPod checks that node rank's manifest names its pod, the
// node's current pod, and (when the request names one) the request's.
func checkManifestPod(rq *request, job Job, rank int, m *upload.Manifest) *apiError {
	want := job.Pods[rank]
	switch {
	case m.PodUID == "":
		return &apiError{http.StatusBadRequest, "MalformedManifest",
			"the manifest names no podUID: every manifest carries the UID of the pod whose sidecar wrote it (upgrade the sidecar)"}
	case rq.r.Header.Get(names.HeaderArtifactPodUID) != "" && rq.r.Header.Get(names.HeaderArtifactPodUID) != m.PodUID:
		return &apiError{http.StatusForbidden, "AccessDenied",
			"the manifest's podUID is not the pod the request names (" + names.HeaderArtifactPodUID + "): a pod uploads only its own manifest"}
	case want == "":
		rq.retryAfter = time.Second
		return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("node %d has no registered pod on the binding yet (its sidecar registers first); retry", rank)}
	case m.PodUID != want:
		return &apiError{http.StatusForbidden, "AccessDenied",
			fmt.Sprintf("the manifest's pod %s is not node %d's current pod: a node's manifest is its current pod's, no other node's or attempt's", m.PodUID, rank)}
	}
	return nil
}
