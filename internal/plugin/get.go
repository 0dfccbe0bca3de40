package plugin

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func (o *options) getCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "get [NAME]",
		Short:             "List WorkerBindings (or show one)",
		Example:           "  kubectl tether get -A\n  kubectl tether get llm-finetune -n team-a -o yaml",
		Args:              cobra.MaximumNArgs(1),
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
			var items []tetherv1.WorkerBinding
			switch {
			case len(args) == 1:
				wb, err := c.Get(cmd.Context(), ns, args[0])
				if err != nil {
					return err
				}
				items = []tetherv1.WorkerBinding{*wb}
			case o.allNamespaces:
				items, err = c.List(cmd.Context(), "")
			default:
				items, err = c.List(cmd.Context(), ns)
			}
			if err != nil {
				return err
			}
			return o.printBindings(o.streams.Out, items, len(args) == 1)
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list the WorkerBindings of every namespace")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: wide, json, yaml or name")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "json", "yaml", "name"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// printBindings prints items in o.output; single prints one object (not a
// List) in json and yaml.
func (o *options) printBindings(w io.Writer, items []tetherv1.WorkerBinding, single bool) error {
	switch o.output {
	case "json", "yaml":
		var obj runtime.Object
		for i := range items {
			items[i].APIVersion, items[i].Kind = tetherv1.GroupVersion.String(), "WorkerBinding"
			items[i].ManagedFields = nil
		}
		if single {
			obj = &items[0]
		} else {
			obj = &tetherv1.WorkerBindingList{Items: items}
			obj.GetObjectKind().SetGroupVersionKind(tetherv1.GroupVersion.WithKind("WorkerBindingList"))
		}
		if o.output == "json" {
			return (&printers.JSONPrinter{}).PrintObj(obj, w)
		}
		return (&printers.YAMLPrinter{}).PrintObj(obj, w)
	case "name":
		for _, wb := range items {
			fmt.Fprintf(w, "workerbinding.tether.dev/%s\n", wb.Name)
		}
		return nil
	case "", "wide":
	default:
		return fmt.Errorf("--output %q: want wide, json, yaml or name", o.output)
	}
	if len(items) == 0 {
		fmt.Fprintln(o.streams.ErrOut, "No WorkerBindings found.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	cols := []string{"NAME", "JOB ID", "PHASE", "ATTEMPT", "NODES", "STEP", "PROGRESS", "ARTIFACTS", "AGE"}
	if o.allNamespaces {
		cols = append([]string{"NAMESPACE"}, cols...)
	}
	if o.output == "wide" {
		cols = append(cols, "REASON", "LAST HEARTBEAT", "COMMAND")
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, wb := range items {
		st := wb.Status
		row := []string{wb.Name, wb.Spec.JobID, orDash(string(st.Phase)), fmt.Sprint(st.Attempt), nodesColumn(&wb),
			step(st.Progress), percent(st.Progress), artifactsColumn(&wb), o.age(wb.CreationTimestamp.Time)}
		if o.allNamespaces {
			row = append([]string{wb.Namespace}, row...)
		}
		if o.output == "wide" {
			hb := "<none>"
			if st.LastHeartbeatTime != nil {
				hb = o.age(st.LastHeartbeatTime.Time) + " ago"
				if leaseHeld(&st) {
					// Recorded at the last status write; a replica's Lease
					// vouches for the heartbeats since (docs/orchestrator.md).
					hb += " (live: replica lease)"
				}
			}
			cmd := "<none>"
			if lc := st.LastCommand; lc != nil {
				cmd = lc.Name + ":" + lc.ID + " " + lc.State
			}
			row = append(row, orDash(st.Reason), hb, cmd)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func (o *options) age(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(o.now().Sub(t))
}

// leaseHeld reports whether a replica's Lease vouches for the binding's
// heartbeats: a live phase, no node lost, and a node recorded as held.
func leaseHeld(st *tetherv1.WorkerBindingStatus) bool {
	if st.Phase != tetherv1.PhaseRegistered && st.Phase != tetherv1.PhaseRunning {
		return false
	}
	held := false
	for i := range st.Nodes {
		if st.Nodes[i].HeartbeatLost {
			return false
		}
		held = held || st.Nodes[i].SessionReplica != ""
	}
	return held
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func step(p *tetherv1.Progress) string {
	if p == nil || p.Step == nil {
		return "-"
	}
	return fmt.Sprint(*p.Step)
}

func percent(p *tetherv1.Progress) string {
	if p == nil || p.Fraction == "" {
		return "-"
	}
	var f float64
	if _, err := fmt.Sscan(p.Fraction, &f); err != nil {
		return p.Fraction
	}
	return fmt.Sprintf("%.0f%%", f*100)
}

// nodesColumn is "<registered>/<bound>".
func nodesColumn(wb *tetherv1.WorkerBinding) string {
	if wb.Status.NodeCount == 0 {
		return "-"
	}
	reg := 0
	for _, n := range wb.Status.Nodes {
		if n.RegisteredTime != nil {
			reg++
		}
	}
	return fmt.Sprintf("%d/%d", reg, wb.Status.NodeCount)
}

// artifactsColumn is "<verified nodes>/<nodes> <files> files".
func artifactsColumn(wb *tetherv1.WorkerBinding) string {
	files, verified, manifests := int32(0), 0, 0
	for _, n := range wb.Status.Nodes {
		if a := n.Artifacts; a != nil && a.Manifest != "" {
			manifests++
			files += a.Files
			if a.Verified {
				verified++
			}
		}
	}
	if manifests == 0 {
		return "-"
	}
	return fmt.Sprintf("%d files, %d/%d verified", files, verified, max(int(wb.Status.NodeCount), manifests))
}
