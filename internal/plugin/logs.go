package plugin

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tether-dev/tether/pkg/client"
)

func (o *options) logsCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "logs NAME [POD]",
		Short:             "Print an archived trainer log (the only one, or POD's); without POD and several logs, list them",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, wb, err := o.binding(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			pods := client.LogPods(wb)
			var pod string
			switch {
			case len(args) == 2:
				pod = args[1]
			case len(pods) == 1:
				pod = pods[0]
			case len(pods) == 0:
				return fmt.Errorf("%s/%s has no archived trainer log yet (one is archived when a trainer container terminates)", ns, args[0])
			default:
				return fmt.Errorf("%s/%s has %d archived logs: name the pod, one of %v", ns, args[0], len(pods), pods)
			}
			r, err := c.Log(cmd.Context(), wb, pod)
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = io.Copy(o.streams.Out, r)
			return err
		},
	}
}
