package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// Commands an orchestrator sends to a job's workers: the protocol's
// command names (pkg/binding), which the workers receive as they are.
const (
	// Flush uploads every artifact now and keeps training.
	Flush = binding.CommandFlush
	// Drain asks the worker to wrap up: flush, then report Finishing.
	Drain = binding.CommandDrain
	// Cancel is the command of Client.Cancel: every node runs a final
	// flush, as for Drain. Sent alone (Send) it stops nothing: Client.Cancel
	// stops the trainer after it, with the caller's credentials.
	Cancel = binding.CommandCancel
)

// Send asks the workers of binding namespace/name to run command (Flush,
// Drain or Cancel) and returns the command's id, for WaitCommand. The id is
// new each time, so the same command can be sent again.
func (c *Client) Send(ctx context.Context, namespace, name, command string) (string, error) {
	switch command {
	case Flush, Drain, Cancel:
	default:
		return "", fmt.Errorf("command %q: want %s, %s or %s", command, Flush, Drain, Cancel)
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{names.CommandAnnotation: command + ":" + id}}})
	wb := &tetherv1.WorkerBinding{}
	wb.Namespace, wb.Name = namespace, name
	if err := c.kube.Patch(ctx, wb, crclient.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", fmt.Errorf("sending %s to %s/%s: %w", command, namespace, name, err)
	}
	return id, nil
}

// CommandError is a command a node refused or failed.
type CommandError struct {
	Binding string
	Status  tetherv1.CommandStatus
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s %s on %s failed: %s (sent to nodes %v, acknowledged by %v)", e.Status.Name, e.Status.ID, e.Binding,
		e.Status.Message, e.Status.SentNodes, e.Status.AckedNodes)
}

// WaitCommand waits until command id is acknowledged by every node it was
// sent to, and returns its status. A failed command is a *CommandError; a
// binding that ends before answering is a *PhaseError.
func (c *Client) WaitCommand(ctx context.Context, namespace, name, id string) (*tetherv1.CommandStatus, error) {
	var out *tetherv1.CommandStatus
	_, err := c.WaitUntil(ctx, namespace, name, func(wb *tetherv1.WorkerBinding) (bool, error) {
		lc := wb.Status.LastCommand
		if lc != nil && lc.ID == id {
			switch lc.State {
			case tetherv1.CommandAcknowledged:
				out = lc.DeepCopy()
				return true, nil
			case tetherv1.CommandFailed:
				return false, &CommandError{Binding: namespace + "/" + name, Status: *lc}
			}
		}
		if Final(wb.Status.Phase) {
			return false, &PhaseError{Binding: namespace + "/" + name, Got: wb.Status.Phase, Reason: wb.Status.Reason, Message: wb.Status.Message,
				Before: "command " + id + " was acknowledged: a finished job runs no commands"}
		}
		return false, nil
	})
	return out, err
}
