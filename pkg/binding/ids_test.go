package binding

import (
	"strings"
	"testing"
)

func TestScopedJobIDs(t *testing.T) {
	nonce := "0123456789abcdef"
	for _, tc := range []struct {
		id, scope string
	}{
		{"ml-team_" + nonce, "ml-team"},
		{"a_" + nonce, "a"},
		{"ml-team_0123456789ABCDEF", ""},             // not lowercase hex
		{"ml-team_0123456789abcde", ""},              // 15 digits
		{"ml_team_" + nonce, ""},                     // the scope is not a namespace name
		{"-ml_" + nonce, ""},                         // not a valid id
		{"ml-_" + nonce, ""},                         // not a namespace name
		{"nightly-finetune", ""},                     // a chosen id
		{"2f0f1f6e-7c4e-4a57-9d63-6f1d5c1f3a11", ""}, // a UUID (earlier releases)
	} {
		if got := JobIDScope(tc.id); got != tc.scope {
			t.Errorf("JobIDScope(%q) = %q, want %q", tc.id, got, tc.scope)
		}
	}
	if id := ScopedJobID("ml-team", nonce); id != "ml-team_"+nonce || !ValidID(id) {
		t.Errorf("ScopedJobID = %q", id)
	}
	// 46 characters fit (46+1+16 = 63); 47 do not.
	if id := ScopedJobID(strings.Repeat("n", 46), nonce); JobIDScope(id) != strings.Repeat("n", 46) {
		t.Errorf("a 46-character namespace has no scoped id: %q", id)
	}
	if id := ScopedJobID(strings.Repeat("n", 47), nonce); id != "" {
		t.Errorf("ScopedJobID of a 47-character namespace = %q, want none", id)
	}
}
