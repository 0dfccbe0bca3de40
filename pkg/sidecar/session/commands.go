package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/retry"
)

func (c *Client) commandLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.cmds:
			ack := binding.CommandAck{ID: r.cmd.ID}
			if err := c.execute(ctx, r.cmd); err != nil {
				ack.Error = err.Error()
				c.log.Warn("command failed", "id", r.cmd.ID, "command", r.cmd.Name, "error", err)
			} else {
				ack.OK = true
				c.log.Info("command done", "id", r.cmd.ID, "command", r.cmd.Name)
			}
			c.sendAck(ctx, r.s, ack)
		}
	}
}

func (c *Client) execute(ctx context.Context, cmd binding.Command) (err error) {
	if c.cfg.OnCommand == nil {
		return errors.New("this sidecar executes no commands")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("command handler panicked: %v", r)
		}
	}()
	return c.cfg.OnCommand(ctx, cmd)
}

// sendAck answers on the session the command came from. If that session has
// ended the ack is lost; the server has to push the command again.
func (c *Client) sendAck(ctx context.Context, s *session, ack binding.CommandAck) {
	ack.Error = truncate(ack.Error, maxAckError)
	if err := s.send(ctx, binding.Frame{Type: binding.FrameCommandAck, CommandAck: &ack}); err != nil {
		c.log.Warn("could not acknowledge a command", "id", ack.ID, "error", err)
	}
}

func (c *Client) sampleLoop(ctx context.Context) {
	for {
		smp := &progressSample{}
		if c.cfg.Progress != nil {
			smp.progress = c.cfg.Progress()
		}
		if c.cfg.UploadedBytes != nil {
			smp.uploaded = c.cfg.UploadedBytes()
		}
		if c.cfg.ArtifactError != nil {
			smp.artifactError = truncateUTF8(c.cfg.ArtifactError(), binding.MaxArtifactErrorLength)
		}
		if c.cfg.Skipped != nil {
			list, n := c.cfg.Skipped()
			smp.skipped, _ = binding.BoundSkipped(list)
			smp.skippedCount = max(n, len(smp.skipped))
		}
		if c.cfg.Checkpoint != nil {
			smp.checkpoint = c.cfg.Checkpoint()
		}
		c.sample.Store(smp)
		if retry.Sleep(ctx, c.HeartbeatInterval()) != nil {
			return
		}
	}
}
