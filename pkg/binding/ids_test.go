package binding

import (
	"strings"
	"testing"
)

func TestScopedJobIDs(t *testing.T) {
	nonce := "0123456789abcdef"
	const uid = "5d0c9f57-1b8a-4a57-9d63-6f1d5c1f3a11"
	tag := NamespaceTag(uid)
	for _, tc := range []struct {
		id, scope, tag string
	}{
		{"ml-team_" + tag + nonce, "ml-team", tag},
		{"a_" + tag + nonce, "a", tag},
		{"ml-team_" + nonce, "ml-team", ""},              // the untagged form of earlier releases
		{"ml-team_0123456789ABCDEF", "", ""},             // not lowercase hex
		{"ml-team_0123456789abcde", "", ""},              // 15 digits
		{"ml-team_" + tag[:4] + nonce, "", ""},           // 20 digits
		{"ml_team_" + tag + nonce, "", ""},               // the scope is not a namespace name
		{"-ml_" + nonce, "", ""},                         // not a valid id
		{"ml-_" + nonce, "", ""},                         // not a namespace name
		{"nightly-finetune", "", ""},                     // a chosen id
		{"2f0f1f6e-7c4e-4a57-9d63-6f1d5c1f3a11", "", ""}, // a UUID (earlier releases)
	} {
		if got := JobIDScope(tc.id); got != tc.scope {
			t.Errorf("JobIDScope(%q) = %q, want %q", tc.id, got, tc.scope)
		}
		if got := ScopedJobIDTag(tc.id); got != tc.tag {
			t.Errorf("ScopedJobIDTag(%q) = %q, want %q", tc.id, got, tc.tag)
		}
	}
	id := ScopedJobID("ml-team", uid, nonce)
	if id != "ml-team_"+tag+nonce || !ValidID(id) {
		t.Errorf("ScopedJobID = %q", id)
	}
	// The id belongs to its namespace only while that namespace exists:
	// not to a namespace made again under the same name (another UID), not
	// to another namespace, and no untagged id belongs to any.
	if !ScopedJobIDBelongs(id, "ml-team", uid) {
		t.Errorf("%q does not belong to the namespace it was made for", id)
	}
	for _, tc := range []struct{ id, ns, uid string }{
		{id, "ml-team", "0e6b2b43-9a37-4d2e-8f1c-3b7a9e2d4c55"},
		{id, "other", uid},
		{"ml-team_" + nonce, "ml-team", uid},
	} {
		if ScopedJobIDBelongs(tc.id, tc.ns, tc.uid) {
			t.Errorf("ScopedJobIDBelongs(%q, %q, %q) = true", tc.id, tc.ns, tc.uid)
		}
	}
	// 38 characters fit (38+1+8+16 = 63); 39 do not.
	if id := ScopedJobID(strings.Repeat("n", 38), uid, nonce); JobIDScope(id) != strings.Repeat("n", 38) {
		t.Errorf("a 38-character namespace has no scoped id: %q", id)
	}
	if id := ScopedJobID(strings.Repeat("n", 39), uid, nonce); id != "" {
		t.Errorf("ScopedJobID of a 39-character namespace = %q, want none", id)
	}
	if NamespaceTag(uid) == NamespaceTag("0e6b2b43-9a37-4d2e-8f1c-3b7a9e2d4c55") || len(tag) != NamespaceTagLen {
		t.Errorf("NamespaceTag: %q", tag)
	}
}
