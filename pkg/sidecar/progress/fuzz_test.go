package progress

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// FuzzLastProgressLine: whatever a trainer appends to its progress file,
// the progress the sidecar reports is nil or fits in a heartbeat the server
// accepts: finite numbers, a fraction in [0, 1].
func FuzzLastProgressLine(f *testing.F) {
	for _, seed := range []string{
		"{\"step\":10,\"loss\":1.5}\n{\"step\":120,\"epoch\":1.5,\"loss\":0.25,\"fraction\":0.4}\n",
		"{\"step\":1e300}\n", "{\"fraction\":2}\n", "{\"loss\":NaN}\n", "not json\n{\"step\":1}\n", "{\"step\":1}", "\n\n\n",
		"{\"step\":-9.3e18}\n", "{\"step\":\"7\"}\n",
	} {
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, buf []byte, cutStart bool) {
		p := lastProgressLine(buf, cutStart)
		if p == nil {
			return
		}
		for _, v := range []*float64{p.Epoch, p.Loss, p.Fraction} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				t.Fatalf("non-finite value reported: %+v", p)
			}
		}
		if p.Fraction != nil && (*p.Fraction < 0 || *p.Fraction > 1) {
			t.Fatalf("fraction %v reported", *p.Fraction)
		}
		raw, err := json.Marshal(binding.Frame{Type: binding.FrameHeartbeat, Heartbeat: &binding.Heartbeat{Seq: 1, SentAt: time.Unix(0, 0).UTC(), Progress: p}})
		if err != nil {
			t.Fatalf("progress %+v cannot be sent: %v", p, err)
		}
		if _, err := binding.DecodeFrame(raw); err != nil {
			t.Fatalf("the server would refuse this progress: %v (%s)", err, raw)
		}
	})
}
