package plugin

import (
	"encoding/json"
	"fmt"
	"path"
	"text/tabwriter"

	"github.com/spf13/cobra"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func (o *options) artifactsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifacts",
		Short: "List and download a job's artifacts",
		Long: "List and download a job's artifacts, each file checked against its node's manifest.\n\n" +
			"Without --tether-url the reads go through your kubeconfig's API server to Tether's read API\n" +
			"(APIService " + tetherv1.ReadAPIService + "; the chart's readAPI.enabled=true or the component\n" +
			"manifests/overlays/read-api): you need get on " + tetherv1.ReadAPIResource + "/" + tetherv1.ReadAPISubresource + "\n" +
			"in the API group " + tetherv1.ReadAPIGroup + " in the job's namespace (ClusterRole tether-artifact-reader,\n" +
			"bound there), and the control plane streams every object through the API server, whatever\n" +
			"its store. With --tether-url (inside the cluster) the binding Service answers instead, and may\n" +
			"redirect to a presigned URL of the store.\n" +
			"A failed read says why: the read API not installed, the permission missing, the store unavailable.",
	}
	ls := &cobra.Command{
		Use:               "ls NAME",
		Short:             "List the artifacts of every node's manifest (path, size, MD5, verified)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, wb, err := o.binding(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			list, err := c.Artifacts(cmd.Context(), wb)
			if err != nil {
				return err
			}
			switch o.output {
			case "json":
				enc := json.NewEncoder(o.streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			case "":
			default:
				return fmt.Errorf("--output %q: want json (or nothing, for a table)", o.output)
			}
			if len(list) == 0 {
				fmt.Fprintf(o.streams.ErrOut, "%s/%s has no manifest yet.\n", ns, args[0])
				return nil
			}
			tw := tabwriter.NewWriter(o.streams.Out, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "NODE\tPATH\tSIZE\tMD5\tVERIFIED")
			for _, a := range list {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%v\n", a.Rank, a.Path, a.Size, a.MD5, a.Verified)
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVarP(&o.output, "output", "o", "", "output format: json")
	var dest string
	get := &cobra.Command{
		Use:   "get NAME PATH",
		Short: "Download a verified artifact, its MD5 checked against the manifest (a changed object is refused)",
		Example: "  kubectl tether artifacts get llm-finetune model/final.safetensors -O final.safetensors\n" +
			"  kubectl tether artifacts get llm-finetune nodes/1/shard-1.pt -O -   # to stdout",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, wb, err := o.binding(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if dest == "-" {
				// Bytes reach stdout before the MD5 is known: a refusal
				// still exits non-zero, and says so.
				_, err = c.Download(cmd.Context(), wb, args[1], o.streams.Out)
				return err
			}
			if dest == "" {
				dest = path.Base(args[1])
			}
			a, err := c.DownloadFile(cmd.Context(), wb, args[1], dest)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.streams.ErrOut, "%s: %d bytes, MD5 %s verified\n", dest, a.Size, a.MD5)
			return nil
		},
	}
	get.Flags().StringVarP(&dest, "output-file", "O", "", "file to write (default: the path's base name; - for stdout)")
	cmd.AddCommand(ls, get)
	return cmd
}
