package testenv

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// JobController is the identity kube-controller-manager's Job controller
// creates pods as (with --use-service-account-credentials): one of the
// ValidatingAdmissionPolicy tether-bound-pods' default pod creators.
const JobController = "system:serviceaccount:kube-system:job-controller"

// JobControllerClient is a client that acts as the Job controller (the
// admin's credentials, impersonating it): envtest runs no
// kube-controller-manager, so tests that stand in for a bound job's Jobs
// create its trainer pods with it, as the Job controller would, under the
// permissions the API server's bootstrap policy gives that controller.
func (e *Env) JobControllerClient() (client.Client, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: JobController,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	return client.New(cfg, client.Options{Scheme: e.Client.Scheme()})
}
