package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

var phases = []string{"Pending", "Registered", "Running", "Finishing", "Succeeded", "Failed"}

func (o *options) waitCmd() *cobra.Command {
	var forCond string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "wait NAME --for=phase=PHASE",
		Short:             "Wait until a WorkerBinding is in a phase (exit 1 if it ends in another)",
		Example:           "  kubectl tether wait llm-finetune --for=phase=Succeeded --timeout=1h",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			phase, ok := strings.CutPrefix(forCond, "phase=")
			if !ok || !contains(phases, phase) {
				return fmt.Errorf("--for %q: want phase=<one of %s>", forCond, strings.Join(phases, ", "))
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
			wb, err := c.WaitFor(ctx, ns, args[0], tetherv1.WorkerBindingPhase(phase))
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "workerbinding.tether.dev/%s condition met (phase=%s)\n", wb.Name, wb.Status.Phase)
			return nil
		},
	}
	cmd.Flags().StringVar(&forCond, "for", "phase=Succeeded", "the condition: phase=<phase>")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait")
	_ = cmd.RegisterFlagCompletionFunc("for", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		out := make([]string, len(phases))
		for i, p := range phases {
			out[i] = "phase=" + p
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
