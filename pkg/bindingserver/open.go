package bindingserver

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// Event reasons of session takeovers (docs/platform.md, Events).
const (
	// ReasonSessionRefused: a session open for a worker whose session is
	// open and heartbeating was refused.
	ReasonSessionRefused = "SessionRefused"
	// ReasonSessionReplaced: a new session of the same pod replaced one
	// that had gone silent.
	ReasonSessionReplaced = "SessionReplaced"
)

// takeoverSilence is how long a worker's session must have sent nothing
// (in heartbeat intervals) before another session of the same pod may
// replace it: a sidecar heartbeats every interval, so a live one is never
// replaced, while one that reconnects after its connection broke (it
// notices within 3 intervals) gets in. Below MissedHeartbeats, so a
// takeover happens before the old session is declared lost.
const takeoverSilence = 2

// handleSession opens a worker's session: the gate admits the request (the
// pod must have registered), a live session of the same pod is not taken
// over, and the WebSocket session then outlives the handler.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if ref := s.gate.Limit(r); ref != nil {
		s.reject(w, r, ref, nil)
		return
	}
	pod := binding.PodIdentity{Name: r.Header.Get(names.HeaderPodName), UID: r.Header.Get(names.HeaderPodUID)}
	worker, ref := s.gate.Admit(ctx, r, workerauth.Claim{Namespace: r.Header.Get(names.HeaderPodNamespace),
		JobID: r.Header.Get(names.HeaderJobID), WorkerID: r.Header.Get(names.HeaderWorkerID), Pod: pod, PodInBindingNamespace: true})
	if ref != nil {
		s.reject(w, r, ref, worker.Binding)
		return
	}
	wb, rank := worker.Binding, worker.Rank
	if !s.registered(ctx, wb, rank, pod.UID) {
		s.reject(w, r, workerauth.Refuse(http.StatusConflict, binding.ErrBadRequest, "not_registered",
			"pod %s is not the binding's registered worker: register first", pod.Name), wb)
		return
	}
	key := workerKey{types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}, rank}
	interval := heartbeatInterval(wb)
	if cur := s.hub.current(key); cur != nil && cur.podUID == pod.UID && cur.closedWith() == 0 && !cur.silentFor(takeoverSilence*interval) {
		// Whoever holds the job's token can claim to be the pod: a live
		// session is not handed over (the sidecar's own reconnect comes
		// after its session broke, and so went silent).
		s.refuseTakeover(w, r, wb, cur, pod.Name)
		return
	}
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader has answered the client already.
		s.metrics.refusals.WithLabelValues("bad_upgrade").Inc()
		return
	}
	token, _ := binding.TokenFromHeader(r.Header) // the gate parsed it already
	sess := &session{key: key, podUID: pod.UID, conn: conn, tokenHash: token.Hash(), base: s.log, podName: pod.Name,
		closeSent: make(chan struct{})}
	sess.lastFrame.Store(time.Now().UnixNano())
	var lastSeq uint64
	if n := lifecycle.Node(&wb.Status, rank); n != nil && n.PodUID == pod.UID {
		lastSeq = uint64(n.LastSeq)
	}
	old := s.hub.attach(key, sess, func() *workerState {
		return &workerState{namespace: wb.Namespace, trainJob: wb.Spec.TrainJobName, lastSeq: lastSeq,
			phase: string(wb.Status.Phase)}
	})
	s.hub.update(key, func(st *workerState) {
		if st.podUID != pod.UID {
			// A replacement pod of the node: what the old one reported is not its.
			st.podUID, st.progress, st.uploadedBytes, st.artifactError, st.lost = pod.UID, nil, 0, "", false
			st.lastHeartbeat = time.Time{}
		}
		st.interval = interval
		// The first heartbeat of every session is written, so other replicas
		// see at once that this one has the worker now.
		st.lastWrite = time.Time{}
		// A command left unanswered by the previous session is sent again.
		st.lastCommandID = ""
	})
	if old != nil {
		old.close(binding.CloseReplaced, "replaced by a newer session of the same worker")
		s.metrics.replaced.Inc()
		if old.podUID == pod.UID {
			s.announceTakeover(wb, old, pod.Name)
		}
	}
	s.metrics.sessionsOpened.Inc()
	// A command that arrived while the worker was away is pushed now.
	s.pushPendingCommand(ctx, key, nil)
	sess.debug("session opened", "interval", interval)

	s.startPings(sess, interval)
	// The session outlives this handler: returning lets net/http release the
	// request's state, which thousands of idle sessions would otherwise hold.
	go func() {
		code := s.readLoop(s.baseCtx, sess, interval)
		s.hub.detach(key, sess)
		sess.close(code, closeCodeName(code))
		sess.mu.Lock()
		sess.ping.Stop()
		sess.mu.Unlock()
		// The close frame has its second to go out, then the connection ends.
		<-sess.closeSent
		_ = sess.conn.Close()
		s.metrics.sessionsClosed.WithLabelValues(closeCodeName(code)).Inc()
		sess.debug("session closed", "code", code)
	}()
}

// refuseTakeover answers a session open for a worker whose session (cur)
// is live: 409 SessionActive, counted, and a Warning on the TrainJob, since
// the open came with the job's token from somewhere other than that
// session.
func (s *Server) refuseTakeover(w http.ResponseWriter, r *http.Request, wb *tetherv1.WorkerBinding, cur *session, podName string) {
	ref := workerauth.Refuse(http.StatusConflict, binding.ErrSessionActive, "session_active",
		"node %d's session (pod %s) is open and heartbeating; one session per worker: a sidecar whose connection broke gets in once that session has been silent for %d heartbeat intervals",
		cur.key.rank, cur.podName, takeoverSilence)
	if s.events != nil {
		s.events.Eventf(trainjob.Ref(wb.Namespace, wb.Spec.TrainJobName, ""), nil, corev1.EventTypeWarning, ReasonSessionRefused, lifecycle.EventAction,
			"refused a second session for node %d as pod %s, opened with the job's token while the sidecar's session heartbeats: "+
				"if the sidecar did not open it, someone else holds the token (reissue it by deleting Secret %s)", cur.key.rank, podName, wb.Spec.TokenSecretName)
	}
	s.reject(w, r, ref, wb)
}

// announceTakeover says that a session of the pod replaced old, which had
// gone silent: the sidecar's own reconnect, or someone else with the token.
func (s *Server) announceTakeover(wb *tetherv1.WorkerBinding, old *session, podName string) {
	silent := time.Since(time.Unix(0, old.lastFrame.Load())).Round(time.Second)
	s.log.Info("session replaced by a newer one of the same pod", "binding", old.key.binding.String(), "node", old.key.rank, "pod", podName, "silentFor", silent.String())
	if s.events != nil {
		s.events.Eventf(trainjob.Ref(wb.Namespace, wb.Spec.TrainJobName, ""), nil, corev1.EventTypeWarning, ReasonSessionReplaced, lifecycle.EventAction,
			"node %d's session (pod %s) was replaced by a new one after %s without a frame: the sidecar reconnecting, "+
				"or, if its log shows no reconnect, someone else with the job's token", old.key.rank, podName, silent)
	}
}

// registered reports whether podUID registered as node rank in the
// binding's current attempt, asking the API server when the cache has not
// caught up with a registration that just happened.
func (s *Server) registered(ctx context.Context, wb *tetherv1.WorkerBinding, rank int32, podUID string) bool {
	is := func(st *tetherv1.WorkerBindingStatus) bool {
		n := lifecycle.Node(st, rank)
		return n != nil && n.PodUID == podUID && n.RegisteredTime != nil
	}
	if is(&wb.Status) {
		return true
	}
	if s.live == nil {
		return false
	}
	fresh := &tetherv1.WorkerBinding{}
	if err := s.live.Get(ctx, types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}, fresh); err != nil {
		return false
	}
	return is(&fresh.Status)
}
