package localcluster

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// goroutineDumpSummary reads the last Go runtime dump (SIGQUIT) in logFile
// and returns its goroutines grouped by stack, most numerous first, each
// stack once with its count: what a hung shutdown was waiting on, short
// enough for a test log (the log file itself goes with the cluster).
func goroutineDumpSummary(logFile string) string {
	raw, err := os.ReadFile(logFile)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", logFile, err)
	}
	text := string(raw)
	i := strings.LastIndex(text, "SIGQUIT: quit")
	if i < 0 {
		return "(no SIGQUIT dump in the log)"
	}
	type group struct {
		state, stack string
		n            int
	}
	groups := map[string]*group{}
	for _, g := range strings.Split(text[i:], "\n\ngoroutine ")[1:] {
		header, body, _ := strings.Cut(g, "\n")
		state := ""
		if m := goroutineState.FindStringSubmatch(header); m != nil {
			state = m[1]
		}
		var frames []string
		for _, line := range strings.Split(body, "\n") {
			// Function lines only (not "\tfile:line", nor a crash dump's
			// registers), arguments dropped.
			if line == "" || strings.HasPrefix(line, "\t") || dumpRegister.MatchString(line) {
				continue
			}
			if j := strings.LastIndex(line, "("); j > 0 && !strings.HasPrefix(line, "created by ") {
				line = line[:j]
			}
			frames = append(frames, line)
		}
		stack := strings.Join(frames, "\n    ")
		key := state + "\x00" + stack
		if groups[key] == nil {
			groups[key] = &group{state: state, stack: stack}
		}
		groups[key].n++
	}
	list := make([]*group, 0, len(groups))
	for _, g := range groups {
		list = append(list, g)
	}
	slices.SortFunc(list, func(a, b *group) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.stack, b.stack)
	})
	var out strings.Builder
	for _, g := range list {
		fmt.Fprintf(&out, "%d goroutine(s) [%s]:\n    %s\n", g.n, g.state, g.stack)
	}
	return out.String()
}

// dumpRegister is a register line of a dump with GOTRACEBACK=crash.
var dumpRegister = regexp.MustCompile(`^[a-z0-9]+\s+0x[0-9a-f]+$`)

// goroutineState is the state in a dump's goroutine header, e.g. "select"
// in "12 gp=0x... m=nil [select, 2 minutes]:".
var goroutineState = regexp.MustCompile(`\[([^,\]]+)`)
