package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

func TestLoggerPrintsDurationsAsStrings(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, slog.LevelInfo).Info("round", "duration", 1500*time.Millisecond, "group", slog.GroupValue(slog.Duration("inner", time.Minute)))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["duration"] != "1.5s" {
		t.Errorf("duration logged as %#v, want \"1.5s\"", line["duration"])
	}
	if g, _ := line["group"].(map[string]any); g["inner"] != "1m0s" {
		t.Errorf("grouped duration logged as %#v, want \"1m0s\"", line["group"])
	}
}
