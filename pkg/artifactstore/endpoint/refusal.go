package endpoint

import "strings"

// refusalReason is the metric label of a refused request without a reason
// of its own: its S3 error code in snake case ("AccessDenied" is
// "access_denied").
func refusalReason(code string) string {
	var b strings.Builder
	for i, r := range code {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
