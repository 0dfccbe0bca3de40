package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func (o *options) commandCmd(name, short string) *cobra.Command {
	var timeout time.Duration
	var noWait bool
	cmd := &cobra.Command{
		Use:               name + " NAME",
		Short:             short + "; waits for every node's acknowledgement",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			id, err := c.Send(cmd.Context(), ns, args[0], name)
			if err != nil {
				return err
			}
			if noWait {
				fmt.Fprintf(o.streams.Out, "%s:%s sent to %s/%s\n", name, id, ns, args[0])
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, err := c.WaitCommand(ctx, ns, args[0], id)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.Out, "%s:%s acknowledged by nodes %v of %s/%s\n", name, id, st.AckedNodes, ns, args[0])
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the acknowledgement")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "send and return")
	return cmd
}
