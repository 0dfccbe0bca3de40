package binding

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeFinishingBounds(t *testing.T) {
	frame := func(fin Finishing) []byte {
		b, _ := json.Marshal(Frame{Type: FrameFinishing, Finishing: &fin})
		return b
	}
	eleven := make([]string, MaxReportedUnverified+1)
	for i := range eleven {
		eleven[i] = "f"
	}
	for name, tc := range map[string]struct {
		fin  Finishing
		want string // "" = accepted
	}{
		"reason only":       {Finishing{Reason: "SIGTERM"}, ""},
		"report":            {Finishing{Reason: "SIGTERM", Unverified: []string{"a", "b"}, UnverifiedCount: 30, ArtifactError: "permission denied"}, ""},
		"too many paths":    {Finishing{Unverified: eleven, UnverifiedCount: 11}, "at most 10"},
		"count below paths": {Finishing{Unverified: []string{"a", "b"}, UnverifiedCount: 1}, "below the 2 paths"},
		"empty path":        {Finishing{Unverified: []string{""}, UnverifiedCount: 1}, "unverified path of 0 bytes"},
		"path too long":     {Finishing{Unverified: []string{strings.Repeat("p", MaxReportedPathLength+1)}, UnverifiedCount: 1}, "unverified path of 1025 bytes"},
		"error too long":    {Finishing{ArtifactError: strings.Repeat("e", MaxArtifactErrorLength+1)}, "artifactError longer"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeFrame(frame(tc.fin))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ErrMalformedFrame) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a malformed-frame error with %q", err, tc.want)
			}
		})
	}
}
