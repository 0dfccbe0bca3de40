package mutate

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
)

// A generated job id carries its namespace's tag; when the namespace cannot
// be read at admission, the id is a UUID, which the controller claims for
// the namespace's UID, rather than a scoped id without a verified tag.
func TestGeneratedJobIDCarriesTheNamespaceTag(t *testing.T) {
	const uid = "6f1d5c1f-3a11-4a57-9d63-0d6f3e52b7c4"
	obj := &metav1.ObjectMeta{Namespace: "ml-team", Labels: map[string]string{names.BindLabel: names.BindValue}}
	for _, tc := range []struct {
		name    string
		read    func(context.Context, string) (string, error)
		isScope bool
	}{
		{"namespace read", func(context.Context, string) (string, error) { return uid, nil }, true},
		{"namespace not readable", func(context.Context, string) (string, error) { return "", errors.New("timeout") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := TrainJobMutator{NamespaceUID: tc.read}
			add, err := m.Stamp(context.Background(), obj, nil)
			if err != nil {
				t.Fatal(err)
			}
			id := add[names.JobIDAnnotation]
			switch {
			case tc.isScope && !binding.ScopedJobIDBelongs(id, "ml-team", uid):
				t.Errorf("job id %q does not belong to ml-team (UID %s)", id, uid)
			case !tc.isScope && (binding.JobIDScope(id) != "" || strings.Count(id, "-") != 4):
				t.Errorf("job id %q: want a UUID, claimed like a chosen id", id)
			}
		})
	}
}
