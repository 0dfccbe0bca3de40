package controlplane

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLastGoodFileSurvivesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	now := time.Unix(1000, 0)
	read := lastGoodFileAt(path, func() time.Time { return now })
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
	now = now.Add(fileRecheck)
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

// Within fileRecheck of a read the file is not read again: a burst of
// reconciles or admissions shares one read; after it, a rotation shows.
func TestLastGoodFileReadsOncePerRecheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.crt")
	now := time.Unix(1000, 0)
	read := lastGoodFileAt(path, func() time.Time { return now })
	if err := os.WriteFile(path, []byte("ca-1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := read(); string(b) != "ca-1" {
		t.Fatalf("read %q", b)
	}
	if err := os.WriteFile(path, []byte("ca-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(fileRecheck - time.Millisecond)
	if b, _ := read(); string(b) != "ca-1" {
		t.Fatalf("read %q within fileRecheck of the last read, want the content read then", b)
	}
	now = now.Add(time.Millisecond)
	if b, _ := read(); string(b) != "ca-2" {
		t.Fatalf("read %q fileRecheck after the last read, want the rotated content", b)
	}
}
