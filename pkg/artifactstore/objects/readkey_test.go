package objects

import "testing"

// Readers may read the archived trainer logs under the reserved prefix,
// and nothing else there.
func TestCheckReadKeyReservedPrefix(t *testing.T) {
	for key, ok := range map[string]bool{
		"job-a/.tether/logs/train-0.log":           true,
		"job-a/.tether/logs/train-0.restart-1.log": true,
		"job-a/logs/train-0.log":                   true,
		"job-a/.tether/logs/":                      false,
		"job-a/.tether/logs/a/b.log":               false,
		"job-a/.tether/logs/..":                    false,
		"job-a/.tether/pending/model.bin":          false,
		"job-a/.tether/uploads/x":                  false,
	} {
		if err := CheckReadKey(key); (err == nil) != ok {
			t.Errorf("CheckReadKey(%q) = %v, want allowed %v", key, err, ok)
		}
	}
}
