package controlplane

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLastGoodFileSurvivesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	read := lastGoodFile(path)
	if _, err := read(); err == nil {
		t.Fatal("no file and nothing read before: want an error")
	}
	if err := os.WriteFile(path, []byte("ca-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := read(); err != nil || string(b) != "ca-1" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if b, err := read(); err != nil || string(b) != "ca-1" {
		t.Fatalf("file gone: read %q, %v; want the last good content", b, err)
	}
	if err := os.WriteFile(path, []byte("ca-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := read(); string(b) != "ca-2" {
		t.Fatalf("rotated CA not picked up: %q", b)
	}
}
