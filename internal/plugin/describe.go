package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

func (o *options) describeCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "describe NAME",
		Short:             "Show a WorkerBinding: nodes, attempt, artifacts, last command and its timeline",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeBindings,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, wb, err := o.binding(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			events, err := trainJobEvents(cmd.Context(), c, ns, wb.Spec.TrainJobName)
			if err != nil {
				return err
			}
			return o.describe(o.streams.Out, wb, events)
		},
	}
}

// trainJobEvents lists the Events about the binding's TrainJob, where
// Tether records every transition.
func trainJobEvents(ctx context.Context, c *client.Client, ns, name string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := c.Kube().List(ctx, &list, crclient.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing Events: %w", err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "TrainJob" && ev.Regarding.Name == name {
			out = append(out, ev)
		}
	}
	return out, nil
}

// entry is one line of the timeline.
type entry struct {
	t            time.Time
	source, what string
}

func eventTime(ev *eventsv1.Event) time.Time {
	switch {
	case ev.Series != nil:
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.DeprecatedLastTimestamp.Time
}

// describe writes the binding's summary, its nodes, and its timeline.
func (o *options) describe(w io.Writer, wb *tetherv1.WorkerBinding, events []eventsv1.Event) error {
	if err := describeSummary(w, wb); err != nil {
		return err
	}
	if err := o.describeNodes(w, &wb.Status); err != nil {
		return err
	}
	fmt.Fprintln(w, "Timeline:")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, e := range timeline(wb, events) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.t.UTC().Format(time.RFC3339), e.source, e.what)
	}
	return tw.Flush()
}

// describeSummary writes the binding's fields, one per line.
func describeSummary(w io.Writer, wb *tetherv1.WorkerBinding) error {
	st := wb.Status
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	p("Name", wb.Name)
	p("Namespace", wb.Namespace)
	p("TrainJob", wb.Spec.TrainJobName)
	p("Job ID", wb.Spec.JobID)
	p("Phase", orDash(string(st.Phase)))
	p("Reason", orDash(st.Reason))
	p("Message", orDash(st.Message))
	attempt := fmt.Sprint(st.Attempt)
	if st.AttemptStartedBy != "" {
		attempt += " (started by " + st.AttemptStartedBy
		if st.AttemptNode != nil {
			attempt += fmt.Sprintf(" on node %d", *st.AttemptNode)
		}
		attempt += ")"
	}
	p("Attempt", attempt)
	if pr := st.Progress; pr != nil {
		p("Progress", fmt.Sprintf("step %s, %s, epoch %s, loss %s", step(pr), percent(pr), orDash(pr.Epoch), orDash(pr.Loss)))
	}
	if a := st.Artifacts; a != nil {
		p("Artifacts", fmt.Sprintf("%d files, %d bytes; manifest %s verified=%v; %d missing", a.Files, a.Bytes, orDash(a.Manifest), a.ManifestVerified, a.MissingCount))
		if a.LastError != "" {
			p("Artifact error", a.LastError)
		}
		if a.SkippedCount > 0 || len(a.Skipped) > 0 {
			// Not uploaded by policy (symlinks, FIFOs, sockets, devices): the
			// binding names at most 5.
			skipped := strings.Join(a.Skipped, "; ")
			if n := int(a.SkippedCount) - len(a.Skipped); n > 0 {
				skipped += fmt.Sprintf("; and %d more", n)
			}
			p("Skipped", fmt.Sprintf("%d not uploaded: %s", max(int(a.SkippedCount), len(a.Skipped)), skipped))
		}
		if len(a.Logs) > 0 {
			p("Logs", strings.Join(client.LogPods(wb), ", "))
		}
	}
	if lc := st.LastCommand; lc != nil {
		p("Last command", fmt.Sprintf("%s:%s %s (sent to %v, acknowledged by %v) %s", lc.Name, lc.ID, lc.State, lc.SentNodes, lc.AckedNodes, lc.Message))
	}
	return tw.Flush()
}

// describeNodes writes the table of bound nodes.
func (o *options) describeNodes(w io.Writer, st *tetherv1.WorkerBindingStatus) error {
	fmt.Fprintf(w, "Nodes (%d bound):\n", st.NodeCount)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  RANK\tPOD\tREGISTERED\tHEARTBEAT\tRESTARTS\tLAST EXIT\tARTIFACTS")
	for _, n := range st.Nodes {
		reg, hb := "-", "-"
		if n.RegisteredTime != nil {
			reg = o.age(n.RegisteredTime.Time) + " ago"
		}
		if n.LastHeartbeatTime != nil {
			hb = o.age(n.LastHeartbeatTime.Time) + " ago"
			switch {
			case n.HeartbeatLost:
				hb += " (lost)"
			case n.SessionReplica != "" && (st.Phase == tetherv1.PhaseRegistered || st.Phase == tetherv1.PhaseRunning):
				// Recorded at the last status write; the holder's Lease
				// vouches for the heartbeats since.
				hb += " (live: held by " + n.SessionReplica + ")"
			}
		}
		exit := "-"
		if e := n.LastExit; e != nil {
			exit = fmt.Sprintf("%d %s (attempt %d)", e.ExitCode, e.Reason, e.Attempt)
		}
		arts := "-"
		if a := n.Artifacts; a != nil && a.Manifest != "" {
			arts = fmt.Sprintf("%d files verified=%v", a.Files, a.Verified)
			if a.MissingCount > 0 {
				arts += fmt.Sprintf(", %d missing (%s)", a.MissingCount, strings.Join(a.Missing, ", "))
			}
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\t%s\n", n.Rank, orDash(n.PodName), reg, hb, n.Restarts, exit, arts)
	}
	return tw.Flush()
}

// timeline is Tether's Events on the TrainJob (every transition, per node
// and attempt) and what the status dates that no Event carries, oldest
// first.
func timeline(wb *tetherv1.WorkerBinding, events []eventsv1.Event) []entry {
	st := &wb.Status
	var tl []entry
	for i := range events {
		ev := &events[i]
		what := ev.Reason + ": " + ev.Note
		if ev.Series != nil && ev.Series.Count > 1 {
			what += fmt.Sprintf(" (x%d)", ev.Series.Count)
		}
		tl = append(tl, entry{eventTime(ev), "Event", what})
	}
	tl = append(tl, entry{wb.CreationTimestamp.Time, "Status", "binding created"})
	if st.AttemptStartTime != nil {
		tl = append(tl, entry{st.AttemptStartTime.Time, "Status", fmt.Sprintf("attempt %d started (%s)", st.Attempt, orDash(st.AttemptStartedBy))})
	}
	for _, n := range st.Nodes {
		if n.RegisteredTime != nil {
			tl = append(tl, entry{n.RegisteredTime.Time, "Status", fmt.Sprintf("node %d registered (pod %s)", n.Rank, n.PodName)})
		}
	}
	if e := st.LastTrainerExit; e != nil {
		tl = append(tl, entry{e.FinishedAt.Time, "Status", fmt.Sprintf("node %d's trainer exited %d (%s), attempt %d", e.Rank, e.ExitCode, orDash(e.Reason), e.Attempt)})
	}
	if lc := st.LastCommand; lc != nil && lc.Time != nil {
		tl = append(tl, entry{lc.Time.Time, "Status", fmt.Sprintf("command %s:%s %s", lc.Name, lc.ID, lc.State)})
	}
	sort.SliceStable(tl, func(i, j int) bool { return tl[i].t.Before(tl[j].t) })
	return tl
}
