package client

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// ConditionError is a binding that ended (Succeeded or Failed) without the
// condition waited for: an outcome condition no longer changes then.
type ConditionError struct {
	Binding   string
	Condition string
	// Want is the status waited for; Got the condition's last status ("":
	// the binding has no such condition).
	Want, Got string
	Phase     tetherv1.WorkerBindingPhase
	Reason    string
	Message   string
}

func (e *ConditionError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("WorkerBinding %s ended %s (%s: %s) without condition %s (the control plane that finished it predates the outcome conditions; wait with --for=phase=%s instead)",
			e.Binding, e.Phase, e.Reason, e.Message, e.Condition, tetherv1.PhaseSucceeded)
	}
	return fmt.Sprintf("WorkerBinding %s ended %s (%s: %s) with condition %s=%s, which can no longer become %s",
		e.Binding, e.Phase, e.Reason, e.Message, e.Condition, e.Got, e.Want)
}

// WaitCondition waits until the binding namespace/name has condition typ
// with status want (True, False or Unknown, compared ignoring case, as
// kubectl wait --for=condition=TYPE=STATUS does) and returns it. The
// outcome conditions (tetherv1.OutcomeConditionTypes: Ready, Succeeded,
// Failed, ...) are fixed once the binding is final: one not met then is a
// *ConditionError, at once. Any other condition is waited for until ctx
// ends, as kubectl does.
func (c *Client) WaitCondition(ctx context.Context, namespace, name, typ, want string) (*tetherv1.WorkerBinding, error) {
	outcome := slices.Contains(tetherv1.OutcomeConditionTypes(), typ)
	return c.WaitUntil(ctx, namespace, name, func(wb *tetherv1.WorkerBinding) (bool, error) {
		cond := meta.FindStatusCondition(wb.Status.Conditions, typ)
		switch {
		case cond != nil && strings.EqualFold(string(cond.Status), want):
			return true, nil
		case outcome && Final(wb.Status.Phase):
			got := ""
			if cond != nil {
				got = string(cond.Status)
			}
			return false, &ConditionError{Binding: namespace + "/" + name, Condition: typ, Want: want, Got: got,
				Phase: wb.Status.Phase, Reason: wb.Status.Reason, Message: wb.Status.Message}
		}
		return false, nil
	})
}
