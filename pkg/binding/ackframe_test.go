package binding

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// AppendAckFrame writes what json.Marshal writes, allocation-free.
func TestAppendAckFrameIsJSONMarshal(t *testing.T) {
	est := time.FixedZone("EST", -5*3600)
	for _, a := range []Ack{
		{Seq: 1, ServerTime: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Phase: "Running"},
		{Seq: 18446744073709551615, ServerTime: time.Date(2026, 12, 1, 12, 0, 0, 123456789, est), Phase: "Registered"},
		{Seq: 42, ServerTime: time.Now(), Phase: ""},
		{ServerTime: time.Date(2026, 12, 1, 12, 0, 0, 120000000, time.FixedZone("", 5*3600+1800))},
		{Seq: 7, Phase: `<a & "b"\c>`},
		{Seq: 7, Phase: "Ünïcode\u2028\x01"},
	} {
		want, wantErr := json.Marshal(Frame{Type: FrameAck, Ack: &a})
		got, err := AppendAckFrame([]byte("x"), a)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("%+v: got %s (%v), want x%s (%v)", a, got, err, want, wantErr)
		}
	}
	if _, err := AppendAckFrame(nil, Ack{Seq: 1, ServerTime: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("a year json.Marshal refuses: want its error")
	}
	buf := make([]byte, 0, 256)
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		buf, _ = AppendAckFrame(buf[:0], Ack{Seq: 123456, ServerTime: now, Phase: "Running"})
	}); n != 0 {
		t.Errorf("AppendAckFrame allocates %v times per ack, want 0", n)
	}
}

// FuzzAppendAckFrame: for any ack, the bytes json.Marshal writes.
func FuzzAppendAckFrame(f *testing.F) {
	f.Add(uint64(1), int64(1764590400123456789), 0, "Running")
	f.Add(uint64(0), int64(0), -18000, `"<&>"`)
	f.Fuzz(func(t *testing.T, seq uint64, nanos int64, offset int, phase string) {
		a := Ack{Seq: seq, ServerTime: time.Unix(0, nanos).In(time.FixedZone("", offset%(24*3600))), Phase: phase}
		want, wantErr := json.Marshal(Frame{Type: FrameAck, Ack: &a})
		got, err := AppendAckFrame(nil, a)
		if (err != nil) != (wantErr != nil) || (err == nil && !bytes.Equal(got, want)) {
			t.Fatalf("%+v: got %s (%v), want %s (%v)", a, got, err, want, wantErr)
		}
	})
}
