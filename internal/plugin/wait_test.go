package plugin

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

func TestParseFor(t *testing.T) {
	for _, c := range []struct {
		arg                 string
		phase, cond, status string
		path, value         string
		hasValue            bool
	}{
		{arg: "phase=Running", phase: "Running"},
		{arg: "condition=Succeeded", cond: "Succeeded", status: "True"},
		{arg: "condition=Ready=false", cond: "Ready", status: "false"},
		{arg: "jsonpath={.status.phase}=Succeeded", path: "{.status.phase}", value: "Succeeded", hasValue: true},
		{arg: "jsonpath='{.status.phase}'=Succeeded", path: "{.status.phase}", value: "Succeeded", hasValue: true},
		{arg: `jsonpath={.status.conditions[?(@.type=="Ready")].status}=True`, path: `{.status.conditions[?(@.type=="Ready")].status}`, value: "True", hasValue: true},
		{arg: "jsonpath=.status.phase=Failed", path: "{.status.phase}", value: "Failed", hasValue: true},
		{arg: "jsonpath={.status.artifacts.manifest}", path: "{.status.artifacts.manifest}"},
	} {
		w, err := parseFor(c.arg)
		if err != nil {
			t.Errorf("%s: %v", c.arg, err)
			continue
		}
		hasValue, value := w.value != nil, ""
		if hasValue {
			value = *w.value
		}
		if string(w.phase) != c.phase || w.condition != c.cond || w.status != c.status || w.path != c.path || value != c.value || hasValue != c.hasValue {
			t.Errorf("%s: parsed %+v (value %q, %v)", c.arg, w, value, hasValue)
		}
	}
	for _, arg := range []string{"phase=Done", "condition=", "condition=Ready=", "jsonpath={.status.phase", "shape=round", "Succeeded"} {
		if _, err := parseFor(arg); err == nil || !strings.Contains(err.Error(), "want phase=") {
			t.Errorf("--for=%s: error %v, want one saying what --for takes", arg, err)
		}
	}
}

// The JSONPath wait on the golden bindings: a Succeeded job and a queued one.
func TestJSONPathMet(t *testing.T) {
	items := bindings()
	done, queued := &items[0], &items[1]
	for _, c := range []struct {
		arg     string
		wb      *tetherv1.WorkerBinding
		met     bool
		wantErr string
	}{
		{arg: "jsonpath={.status.phase}=Succeeded", wb: done, met: true},
		{arg: "jsonpath={.status.phase}=Succeeded", wb: queued},
		{arg: "jsonpath={.status.phase}=Failed", wb: done, wantErr: "ended Succeeded"},
		{arg: "jsonpath={.status.progress.step}=1000", wb: done, met: true},
		{arg: "jsonpath={.status.progress.step}=999", wb: done},
		{arg: "jsonpath={.kind}=WorkerBinding", wb: done, met: true},
		{arg: "jsonpath={.status.artifacts.manifest}", wb: done, met: true},
		{arg: "jsonpath={.status.artifacts.manifest}", wb: queued},
		{arg: "jsonpath={.status.nodes[*].rank}=0", wb: done, wantErr: "matches 2 values"},
	} {
		w, err := parseFor(c.arg)
		if err != nil {
			t.Fatal(err)
		}
		met, err := w.met(c.wb)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s on %s: error %v, want one with %q", c.arg, c.wb.Name, err, c.wantErr)
		case c.wantErr == "" && err != nil:
			t.Errorf("%s on %s: %v", c.arg, c.wb.Name, err)
		case met != c.met:
			t.Errorf("%s on %s: met %v, want %v", c.arg, c.wb.Name, met, c.met)
		}
	}
	w, _ := parseFor("jsonpath={.status.phase}=Failed")
	if _, err := w.met(done); !errors.As(err, new(*client.PhaseError)) {
		t.Errorf("a phase JSONPath on a binding final in another phase: %v, want a *client.PhaseError", err)
	}
}

// The help says every --for form and the exit status.
func TestWaitHelp(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	cmd.SetArgs([]string{"wait", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	// The global flags' defaults depend on the machine ($HOME).
	help, _, _ := bytes.Cut(out.Bytes(), []byte("\nGlobal Flags:"))
	golden(t, "wait-help.txt", help)
}
