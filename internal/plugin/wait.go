package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

const waitLong = `Wait until a WorkerBinding meets a condition, as kubectl wait does:

  --for=condition=TYPE[=STATUS]   a condition of the binding has STATUS (default True;
                                  compared ignoring case). The outcome conditions are
                                  Ready, Succeeded, Failed, Progressing, Reconciling and
                                  Stalled; once the binding is final they no longer change,
                                  and a wait on one not met then fails at once.
  --for=jsonpath='{PATH}'[=VALUE] the JSONPath matches VALUE (without =VALUE: matches
                                  anything). On {.status.phase}, a binding final in
                                  another phase fails the wait at once.
  --for=phase=PHASE               the binding is in PHASE; one that ends in another
                                  final phase fails the wait at once.

Exit status: 0 when the condition is met; 1 when the wait timed out ("timed out waiting
for the condition on workerbindings/NAME"), the binding ended without meeting it, or
anything else failed.`

func (o *options) waitCmd() *cobra.Command {
	var forArg string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait NAME --for=condition=TYPE[=STATUS] | --for=jsonpath='{PATH}'[=VALUE] | --for=phase=PHASE",
		Short: "Wait until a WorkerBinding meets a condition (exit 1 on timeout or if it ends without)",
		Long:  waitLong,
		Example: "  kubectl tether wait llm-finetune --for=condition=Succeeded --timeout=1h\n" +
			"  kubectl tether wait llm-finetune --for=condition=Ready=false\n" +
			"  kubectl tether wait llm-finetune --for=jsonpath='{.status.phase}'=Succeeded\n" +
			"  kubectl tether wait llm-finetune --for=phase=Running",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := parseFor(forArg)
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			wb, err := w.wait(ctx, c, ns, args[0])
			if err != nil {
				return waitError(err, args[0])
			}
			if w.phase != "" {
				fmt.Fprintf(o.streams.Out, "workerbinding.tether.dev/%s condition met (phase=%s)\n", wb.Name, wb.Status.Phase)
			} else {
				fmt.Fprintf(o.streams.Out, "workerbinding.tether.dev/%s condition met\n", wb.Name)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&forArg, "for", "phase=Succeeded", "the condition: condition=TYPE[=STATUS], jsonpath='{PATH}'[=VALUE] or phase=PHASE")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait")
	_ = cmd.RegisterFlagCompletionFunc("for", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, t := range tetherv1.OutcomeConditionTypes() {
			out = append(out, "condition="+t)
		}
		for _, p := range phases {
			out = append(out, "phase="+p)
		}
		return append(out, "jsonpath="), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// wait waits for w on the binding namespace/name.
func (w *waitFor) wait(ctx context.Context, c *client.Client, namespace, name string) (*tetherv1.WorkerBinding, error) {
	switch {
	case w.phase != "":
		return c.WaitFor(ctx, namespace, name, w.phase)
	case w.condition != "":
		return c.WaitCondition(ctx, namespace, name, w.condition, w.status)
	}
	return c.WaitUntil(ctx, namespace, name, w.met)
}

// waitError says a timeout as kubectl wait does; other errors say what
// ended the wait.
func waitError(err error, name string) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := "timed out waiting for the condition on workerbindings/" + name
	if errors.Is(err, client.ErrBindingNotFound) {
		msg += " (the WorkerBinding does not exist: is its TrainJob labeled tether.dev/bind=true?)"
	}
	return errors.New(msg)
}
