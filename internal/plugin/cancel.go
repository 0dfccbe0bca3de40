package plugin

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tether-dev/tether/pkg/client"
)

// cancelCmd is kubectl tether cancel: client.Cancel, the same call an
// orchestrator makes.
func (o *options) cancelCmd() *cobra.Command {
	var opts client.CancelOptions
	cmd := &cobra.Command{
		Use:   "cancel NAME",
		Short: "Flush and stop the trainer: a final flush, then the job stopped with your credentials",
		Long: "Flush and stop the trainer. First checks (a server-side dry run) that you may stop the job, and sends nothing\n" +
			"if not. Then every node runs a final flush, acknowledged within --timeout, and the job is stopped with your\n" +
			"own credentials: a TrainJob Kueue manages has its Workload deactivated (spec.active=false: Kueue evicts it,\n" +
			"suspends the job and frees its quota), any other TrainJob is suspended (spec.suspend=true); both can be\n" +
			"resumed. With --delete the TrainJob is deleted. A flush that failed or timed out still stops the job, names\n" +
			"the files not verified and exits 1. The binding says Finishing/Cancelling until no trainer pod remains,\n" +
			"then Failed/Cancelled.\n\n" +
			"RBAC: patch on workerbindings.tether.dev, get on trainjobs.trainer.kubeflow.org, and list+patch on\n" +
			"workloads.kueue.x-k8s.io (Kueue), patch on trainjobs (no Kueue) or delete on trainjobs (--delete).",
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
			res, err := c.Cancel(cmd.Context(), ns, args[0], opts)
			var fe *client.CancelFlushError
			switch {
			case errors.As(err, &fe):
				fmt.Fprintf(o.streams.Out, "cancel:%s sent to %s/%s; its final flush did not complete\n", res.CommandID, ns, args[0])
			case err != nil:
				return err
			default:
				fmt.Fprintf(o.streams.Out, "cancel:%s acknowledged by nodes %v of %s/%s (every node flushed)\n", res.CommandID, res.Command.AckedNodes, ns, args[0])
			}
			fmt.Fprintf(o.streams.Out, "stopped: %s\n", res.Stop)
			if res.Stop.Action != client.StopDeleteTrainJob {
				fmt.Fprintf(o.streams.Out, "the binding says Finishing/Cancelling until no trainer pod remains, then Failed/Cancelled\n")
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "how long to wait for the final flush's acknowledgement before stopping the job anyway")
	cmd.Flags().BoolVar(&opts.Delete, "delete", false, "delete the TrainJob instead of deactivating its Kueue Workload or suspending it")
	return cmd
}
