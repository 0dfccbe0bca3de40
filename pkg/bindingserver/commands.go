package bindingserver

import (
	"context"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// parseCommand reads names.CommandAnnotation; ok is false when absent or malformed.
func parseCommand(wb *tetherv1.WorkerBinding) (binding.Command, bool) {
	v := wb.Annotations[names.CommandAnnotation]
	name, id, ok := strings.Cut(v, ":")
	if !ok || id == "" {
		return binding.Command{}, false
	}
	switch name {
	case binding.CommandFlush, binding.CommandCancel, binding.CommandDrain:
		return binding.Command{ID: id, Name: name}, true
	}
	return binding.Command{}, false
}

// pushPendingCommand sends the binding's requested command to node key's
// session, unless it was sent there already or it is answered.
func (s *Server) pushPendingCommand(ctx context.Context, key workerKey, wb *tetherv1.WorkerBinding) {
	if wb == nil {
		wb = &tetherv1.WorkerBinding{}
		if err := s.cache.Get(ctx, key.binding, wb); err != nil {
			return
		}
	}
	cmd, ok := parseCommand(wb)
	if !ok {
		return
	}
	if c := wb.Status.LastCommand; c != nil && c.ID == cmd.ID && c.State != tetherv1.CommandSent {
		// Answered already. A command still "Sent" (its session dropped
		// before the ack) is sent again on the next session: commands are
		// delivered at least once, and workers de-duplicate by id.
		return
	}
	var sess *session
	fresh := false
	s.hub.update(key, func(st *workerState) {
		sess = st.session
		if sess != nil && st.lastCommandID != cmd.ID {
			st.lastCommandID = cmd.ID
			fresh = true
		}
	})
	if !fresh {
		return
	}
	// Record "Sent" to this node before sending, so its ack always finds it.
	now := metav1.NewTime(s.opts.Now())
	if _, err := s.updateStatus(ctx, key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
		c := st.LastCommand
		if c == nil || c.ID != cmd.ID {
			st.LastCommand = &tetherv1.CommandStatus{ID: cmd.ID, Name: cmd.Name, State: tetherv1.CommandSent, Time: &now, SentNodes: []int32{key.rank},
				Attempt: st.Attempt}
			return true
		}
		if slices.Contains(c.SentNodes, key.rank) {
			return false
		}
		c.SentNodes = append(c.SentNodes, key.rank)
		slices.Sort(c.SentNodes)
		if c.State == tetherv1.CommandAcknowledged {
			c.State = tetherv1.CommandSent // another node has it to answer now
		}
		return true
	}); err != nil {
		s.log.Error(err, "recording a sent command", "binding", key.binding.String(), "node", key.rank)
		s.hub.update(key, func(st *workerState) { st.lastCommandID = "" })
		return
	}
	sess.acks.sent(cmd.ID)
	// A copy goes out: were cmd itself to escape, every call (the liveness
	// loop's, per worker per second) would allocate it.
	out := cmd
	if !sess.push(binding.Frame{Type: binding.FrameCommand, Command: &out}) {
		return
	}
	s.metrics.commands.WithLabelValues(cmd.Name, "sent").Inc()
	sess.log().Info("command sent", "command", cmd.Name, "id", cmd.ID)
}

// commandAcked records a node's answer to a command. The command is
// Acknowledged once every node it was sent to answered OK, Failed as soon
// as one answered with an error. An answered cancel ends nothing here: the
// orchestrator stops the job, and the controller says Cancelling, then
// Cancelled once it sees no trainer pod left (lifecycle, cancel.go).
func (s *Server) commandAcked(ctx context.Context, sess *session, ack *binding.CommandAck) {
	now := metav1.NewTime(s.opts.Now())
	var name, state string
	reader := s.live
	if reader == nil {
		reader = s.cache
	}
	rank := sess.key.rank
	// The "Sent" record was written moments ago: read it from the API server.
	_, err := s.updateStatusFrom(ctx, reader, sess.key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
		c := st.LastCommand
		if c == nil || c.ID != ack.ID || c.State == tetherv1.CommandFailed || !slices.Contains(c.SentNodes, rank) || slices.Contains(c.AckedNodes, rank) {
			return false
		}
		name = c.Name
		c.Time = &now
		if !ack.OK {
			c.State, c.Message = tetherv1.CommandFailed, nodeTag(st, rank)+ack.Error
			state = c.State
			return true
		}
		c.AckedNodes = append(c.AckedNodes, rank)
		slices.Sort(c.AckedNodes)
		if len(c.AckedNodes) >= len(c.SentNodes) {
			c.State, c.Message = tetherv1.CommandAcknowledged, ""
		}
		state = c.State
		return true
	})
	if err != nil {
		sess.log().Error(err, "recording a command ack")
		return
	}
	if name == "" {
		sess.log().Info("ignoring an ack for an unknown or already answered command", "id", ack.ID)
		return
	}
	result := "acknowledged"
	if !ack.OK {
		result = "failed"
	}
	s.metrics.commands.WithLabelValues(name, result).Inc()
	sess.log().Info("command answered", "command", name, "id", ack.ID, "ok", ack.OK, "error", ack.Error, "state", state)
}

// nodeTag prefixes a multi-node job's messages with the node.
func nodeTag(st *tetherv1.WorkerBindingStatus, rank int32) string {
	if st.NodeCount <= 1 {
		return ""
	}
	return "node " + strconv.Itoa(int(rank)) + ": "
}
