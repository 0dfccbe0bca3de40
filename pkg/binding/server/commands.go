package server

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// CommandAnnotation on a WorkerBinding asks the binding server to push a
// command to the worker: "<name>:<id>", e.g. "flush:42". A new id pushes the
// command again; the outcome is status.lastCommand.
const CommandAnnotation = "tether.dev/command"

// Command states in status.lastCommand.
const (
	CommandSent         = "Sent"
	CommandAcknowledged = "Acknowledged"
	CommandFailed       = "Failed"
)

// parseCommand reads CommandAnnotation; ok is false when absent or malformed.
func parseCommand(wb *tetherv1.WorkerBinding) (binding.Command, bool) {
	v := wb.Annotations[CommandAnnotation]
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

// pushPendingCommand sends the binding's requested command to its worker's
// session, unless it was already sent.
func (s *Server) pushPendingCommand(ctx context.Context, key types.NamespacedName, wb *tetherv1.WorkerBinding) {
	if wb == nil {
		wb = &tetherv1.WorkerBinding{}
		if err := s.cache.Get(ctx, key, wb); err != nil {
			return
		}
	}
	cmd, ok := parseCommand(wb)
	if !ok || (wb.Status.LastCommand != nil && wb.Status.LastCommand.ID == cmd.ID && wb.Status.LastCommand.State != CommandSent) {
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
	// Record "Sent" before sending, so the worker's ack always finds it.
	now := metav1.NewTime(s.opts.Now())
	if _, err := s.updateStatus(ctx, key, func(st *tetherv1.WorkerBindingStatus) bool {
		st.LastCommand = &tetherv1.CommandStatus{ID: cmd.ID, Name: cmd.Name, State: CommandSent, Time: &now}
		return true
	}); err != nil {
		s.log.Error(err, "recording a sent command", "binding", key.String())
		s.hub.update(key, func(st *workerState) { st.lastCommandID = "" })
		return
	}
	sess.acks.sent(cmd.ID)
	if !sess.push(binding.Frame{Type: binding.FrameCommand, Command: &cmd}) {
		return
	}
	s.metrics.commands.WithLabelValues(cmd.Name, "sent").Inc()
	sess.log.Info("command sent", "command", cmd.Name, "id", cmd.ID)
}

// commandAcked records the worker's answer to a command; an acknowledged
// cancel ends the binding as Cancelled.
func (s *Server) commandAcked(ctx context.Context, sess *session, ack *binding.CommandAck) {
	now := metav1.NewTime(s.opts.Now())
	var name string
	reader := s.live
	if reader == nil {
		reader = s.cache
	}
	// The "Sent" record was written moments ago: read it from the API server.
	_, err := s.updateStatusFrom(ctx, reader, sess.key, func(st *tetherv1.WorkerBindingStatus) bool {
		c := st.LastCommand
		if c == nil || c.ID != ack.ID || c.State != CommandSent {
			return false
		}
		name = c.Name
		c.Time = &now
		if ack.OK {
			c.State, c.Message = CommandAcknowledged, ""
		} else {
			c.State, c.Message = CommandFailed, ack.Error
		}
		if ack.OK && c.Name == binding.CommandCancel {
			lifecycle.Cancelled(st, "cancelled by the orchestrator (command "+c.ID+")")
		}
		return true
	})
	if err != nil {
		sess.log.Error(err, "recording a command ack")
		return
	}
	if name == "" {
		sess.log.Info("ignoring an ack for an unknown or already answered command", "id", ack.ID)
		return
	}
	result := "acknowledged"
	if !ack.OK {
		result = "failed"
	}
	s.metrics.commands.WithLabelValues(name, result).Inc()
	sess.log.Info("command answered", "command", name, "id", ack.ID, "ok", ack.OK, "error", ack.Error)
}
