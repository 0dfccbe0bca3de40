package main

import (
	"io"
	"log/slog"
)

// newLogger is the sidecar's JSON logger. Durations print as Go duration
// strings ("1.5s"): slog's JSON handler would print integer nanoseconds,
// which nobody reading a pod's log can take in at a glance.
func newLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsStrings}))
}

func durationsAsStrings(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
