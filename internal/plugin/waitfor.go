package plugin

import (
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

var phases = []string{"Pending", "Registered", "Running", "Finishing", "Succeeded", "Failed"}

// waitFor is a parsed --for of kubectl tether wait: exactly one of a phase,
// a condition (with the status wanted) or a JSONPath expression (with the
// value wanted, or none: the path only has to match).
type waitFor struct {
	phase tetherv1.WorkerBindingPhase

	condition, status string

	path     string
	jsonPath *jsonpath.JSONPath
	value    *string
}

const forSyntax = "want phase=<one of %s>, condition=<type>[=<status>] or jsonpath='{<path>}'[=<value>]"

// parseFor parses --for as kubectl wait does: condition=TYPE means
// status True, condition=TYPE=false another status; jsonpath='{.a.b}'=V
// wants the value V (the quotes are the shell's, and are dropped when they
// reach here).
func parseFor(s string) (*waitFor, error) {
	bad := func(why string) error {
		return fmt.Errorf("--for %q: %s; "+forSyntax, s, why, strings.Join(phases, ", "))
	}
	kind, arg, _ := strings.Cut(s, "=")
	switch kind {
	case "phase":
		if !contains(phases, arg) {
			return nil, bad("unknown phase")
		}
		return &waitFor{phase: tetherv1.WorkerBindingPhase(arg)}, nil
	case "condition":
		typ, status, hasStatus := strings.Cut(arg, "=")
		if !hasStatus {
			status = "True"
		}
		if typ == "" || status == "" {
			return nil, bad("no condition type or status")
		}
		return &waitFor{condition: typ, status: status}, nil
	case "jsonpath":
		path, value, hasValue := splitJSONPath(arg)
		jp := jsonpath.New("for").AllowMissingKeys(true)
		if err := jp.Parse(path); err != nil {
			return nil, bad("JSONPath " + path + ": " + err.Error())
		}
		w := &waitFor{path: path, jsonPath: jp}
		if hasValue {
			w.value = &value
		}
		return w, nil
	}
	return nil, bad("unknown kind " + kind)
}

// splitJSONPath splits '{.status.phase}'=Succeeded into the path in braces
// and the value; a path without braces (.status.phase=Succeeded) ends at
// the first "=", as kubectl's relaxed JSONPath does.
func splitJSONPath(arg string) (path, value string, hasValue bool) {
	trimmed := strings.TrimLeft(arg, `'"`)
	if strings.HasPrefix(trimmed, "{") {
		end := strings.LastIndex(trimmed, "}")
		if end < 0 {
			return trimmed, "", false // unclosed: the parse says so
		}
		path, rest := trimmed[:end+1], strings.TrimLeft(trimmed[end+1:], `'"`)
		value, hasValue = strings.CutPrefix(rest, "=")
		return path, strings.Trim(value, `'"`), hasValue
	}
	path, value, hasValue = strings.Cut(arg, "=")
	if !strings.HasPrefix(path, ".") {
		path = "." + path
	}
	return "{" + path + "}", strings.Trim(value, `'"`), hasValue
}

// met reports whether the JSONPath matches wb (with the value wanted, if
// any). A path that matches several values is an error, as in kubectl; a
// wait on {.status.phase} ends with a *client.PhaseError once the binding
// is final in another phase, as --for=phase does.
func (w *waitFor) met(wb *tetherv1.WorkerBinding) (bool, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wb)
	if err != nil {
		return false, err
	}
	obj["apiVersion"], obj["kind"] = tetherv1.GroupVersion.String(), "WorkerBinding"
	results, err := w.jsonPath.FindResults(obj)
	if err != nil {
		return false, fmt.Errorf("evaluating --for=jsonpath=%s on WorkerBinding %s/%s: %w", w.path, wb.Namespace, wb.Name, err)
	}
	var values []reflect.Value
	for _, r := range results {
		values = append(values, r...)
	}
	switch {
	case len(values) == 0:
		return false, nil
	case w.value == nil:
		return true, nil
	case len(values) > 1:
		return false, fmt.Errorf("--for=jsonpath=%s matches %d values of WorkerBinding %s/%s; it must match one", w.path, len(values), wb.Namespace, wb.Name)
	}
	if fmt.Sprint(values[0].Interface()) == *w.value {
		return true, nil
	}
	if w.path == "{.status.phase}" && client.Final(wb.Status.Phase) {
		return false, &client.PhaseError{Binding: wb.Namespace + "/" + wb.Name, Want: tetherv1.WorkerBindingPhase(*w.value),
			Got: wb.Status.Phase, Reason: wb.Status.Reason, Message: wb.Status.Message}
	}
	return false, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
