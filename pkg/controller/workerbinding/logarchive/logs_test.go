package logarchive

import (
	"bytes"
	"strings"
	"testing"
)

func TestTailLogKeepsTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size, max int64
	}{
		{"empty", 0, 100},
		{"fits", 99, 100},
		{"exact", 100, 100},
		{"one over", 101, 100},
		{"much larger", 1 << 20, 1000},
	} {
		log := make([]byte, tc.size)
		for i := range log {
			log[i] = byte('a' + i%26)
		}
		got, err := TailLog(bytes.NewReader(log), tc.max)
		if err != nil {
			t.Fatal(err)
		}
		if tc.size <= tc.max {
			if !bytes.Equal(got, log) {
				t.Errorf("%s: a log within the cap was changed", tc.name)
			}
			continue
		}
		marker, rest, ok := bytes.Cut(got, []byte("\n"))
		if !ok || !strings.Contains(string(marker), "truncated") {
			t.Fatalf("%s: no truncation marker in %q", tc.name, got[:min(len(got), 120)])
		}
		if !bytes.Equal(rest, log[tc.size-tc.max:]) {
			t.Errorf("%s: kept bytes are not the log's last %d", tc.name, tc.max)
		}
	}
}
