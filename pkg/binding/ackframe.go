package binding

import (
	"encoding/json"
	"strconv"
	"time"
)

// AppendAckFrame appends the ack frame for a (Frame{Type: FrameAck, Ack: &a})
// to b: the bytes json.Marshal gives (and its error), without its
// reflection and allocations. The binding server sends one per heartbeat,
// so at 10,000 sessions a heartbeat's garbage is much of what its GC does.
func AppendAckFrame(b []byte, a Ack) ([]byte, error) {
	if y := a.ServerTime.Year(); y < 0 || y > 9999 || !plainJSONString(a.Phase) {
		// What json.Marshal refuses (a year it cannot write) or escapes:
		// never a phase or a clock's time, but the answer stays its own.
		return appendMarshaledAck(b, a)
	}
	b = append(b, `{"type":"ack","ack":{"seq":`...)
	b = strconv.AppendUint(b, a.Seq, 10)
	b = append(b, `,"serverTime":"`...)
	b = a.ServerTime.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","phase":"`...)
	b = append(b, a.Phase...)
	return append(b, `"}}`...), nil
}

// appendMarshaledAck is AppendAckFrame's slow path, apart so that only it
// moves a to the heap.
func appendMarshaledAck(b []byte, a Ack) ([]byte, error) {
	raw, err := json.Marshal(Frame{Type: FrameAck, Ack: &a})
	return append(b, raw...), err
}

// plainJSONString reports whether encoding/json writes s as is between
// quotes: printable ASCII other than '"', '\\' and the HTML characters it
// escapes.
func plainJSONString(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
