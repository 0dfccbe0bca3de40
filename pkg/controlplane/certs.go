package controlplane

import (
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// certs arranges the serving certificate and closes the control plane's
// certsReady when it is in place: the rotator's (self-managed), or at once
// (external, e.g. cert-manager).
func (a *assembly) certs() error {
	opts, ready := a.opts, a.cp.certsReady
	if opts.CertMode == CertModeExternal {
		close(ready)
		return nil
	}
	svc := opts.ServiceName + "." + opts.Namespace + ".svc"
	webhooks := []rotator.WebhookInfo{{Name: opts.WebhookConfig, Type: rotator.Mutating}}
	if opts.ReadAPI {
		// The API server verifies the read API's certificate with the
		// APIService's caBundle.
		webhooks = append(webhooks, rotator.WebhookInfo{Name: tetherv1.ReadAPIService, Type: rotator.APIService})
	}
	return rotator.AddRotator(a.mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: opts.Namespace, Name: opts.CertSecret},
		CertDir:        opts.CertDir,
		CAName:         "tether-ca",
		CAOrganization: "tether",
		DNSName:        svc,
		ExtraDNSNames:  append([]string{svc + ".cluster.local", opts.ServiceName + "." + opts.Namespace, opts.ServiceName}, opts.ExtraDNSNames...),
		IsReady:        ready,
		Webhooks:       webhooks,
		// Every replica serves webhooks, so every replica keeps the
		// certificate fresh; writes to the Secret are conflict-checked.
		RequireLeaderElection: false,
		FieldOwner:            "tether",
	})
}
