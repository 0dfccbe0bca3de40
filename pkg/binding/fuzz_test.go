package binding

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// FuzzDecodeFrame: any input either decodes into a frame that satisfies the
// protocol's invariants and survives a re-encode, or fails with
// ErrMalformedFrame. It never panics.
func FuzzDecodeFrame(f *testing.F) {
	for _, seed := range []string{
		`{"type":"heartbeat","heartbeat":{"seq":1,"sentAt":"2026-11-29T12:00:00Z","progress":{"step":10,"loss":0.5,"fraction":0.1}}}`,
		`{"type":"ack","ack":{"seq":1,"serverTime":"2026-11-29T12:00:00Z","phase":"Running"}}`,
		`{"type":"command","command":{"id":"1","name":"flush"}}`,
		`{"type":"commandAck","commandAck":{"id":"1","ok":false,"error":"x"}}`,
		`{"type":"finishing","finishing":{"reason":"SIGTERM"}}`,
		`{"type":"heartbeat","heartbeat":{"seq":0}}`,
		`{"type":"heartbeat","ack":{"seq":1}}`,
		`{"type":"nope"}`,
		`[]`, `null`, ``, `{"type":"heartbeat","heartbeat":{"seq":1,"progress":{"fraction":2}}}`,
		`{"type":"heartbeat","heartbeat":{"seq":18446744073709551615,"uploadedBytes":-1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("error %v does not wrap ErrMalformedFrame", err)
			}
			return
		}
		switch fr.Type {
		case FrameHeartbeat:
			if fr.Heartbeat == nil || fr.Heartbeat.Seq == 0 || fr.Heartbeat.UploadedBytes < 0 {
				t.Fatalf("invalid heartbeat accepted: %+v", fr.Heartbeat)
			}
		case FrameCommand:
			if fr.Command == nil || fr.Command.ID == "" {
				t.Fatalf("invalid command accepted: %+v", fr.Command)
			}
		case FrameAck, FrameCommandAck, FrameFinishing:
		default:
			t.Fatalf("unknown type %q accepted", fr.Type)
		}
		out, err := json.Marshal(fr)
		if err != nil {
			t.Fatalf("re-encoding an accepted frame: %v", err)
		}
		if _, err := DecodeFrame(out); err != nil {
			t.Fatalf("re-encoded frame %s no longer decodes: %v", out, err)
		}
	})
}

// FuzzTokenFromHeader: only "Bearer <64 lowercase hex>" is accepted, and the
// token returned is exactly those 64 characters.
func FuzzTokenFromHeader(f *testing.F) {
	good := strings.Repeat("ab", 32)
	for _, seed := range []string{"Bearer " + good, "bearer " + good, "Bearer " + strings.ToUpper(good), "Basic " + good,
		"Bearer  " + good, "Bearer " + good + " ", "Bearer", "", "Bearer " + good[:63] + "g"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set(HeaderAuthorization, v)
		token, err := TokenFromHeader(h)
		if err != nil {
			return
		}
		if len(token) != 64 || strings.Trim(string(token), "0123456789abcdef") != "" {
			t.Fatalf("accepted token %q from %q", token, v)
		}
		if !strings.HasSuffix(h.Get(HeaderAuthorization), " "+string(token)) {
			t.Fatalf("token %q is not the header's credential %q", token, v)
		}
	})
}
