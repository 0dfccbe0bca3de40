package testenv

import (
	"context"
	"fmt"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OrchestratorRules are the rules docs/orchestrator.md tells a platform team
// to grant an orchestrator in its namespaces. Attack tests run a tenant with
// exactly these plus TenantRules, so a boundary they cross is one a real
// tenant can cross.
var OrchestratorRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"tether.dev"}, Resources: []string{"workerbindings"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"tether.dev"}, Resources: []string{"workerbindings"}, Verbs: []string{"patch"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}},
	{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"create", "get"}},
}

// TenantRules are what a team's own namespace grants it besides the
// orchestrator's rules: its TrainJobs and runtimes in full, and the pods,
// Secrets and Events of its jobs (what the built-in "edit" ClusterRole gives
// a namespace's users).
var TenantRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs", "trainingruntimes"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"pods", "secrets", "events"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"jobset.x-k8s.io"}, Resources: []string{"jobsets"}, Verbs: []string{"get", "list", "watch"}},
}

// Tenant is one team: a ServiceAccount that holds only its namespace's Role.
type Tenant struct {
	Namespace, Name string
	// Config authenticates as the ServiceAccount with a bearer token (the
	// read endpoint reviews bearer tokens, not client certificates).
	Config *rest.Config
	// Client is a controller-runtime client with Config and the env's scheme.
	Client client.Client
	// Token is the ServiceAccount's bearer token.
	Token string
}

// NewTenant creates namespace ns (if missing) with its default
// ServiceAccount, a ServiceAccount "tenant" there, a Role of rules (nil:
// OrchestratorRules and TenantRules) bound to it, and returns its
// credentials. Nothing outside ns is granted.
func (e *Env) NewTenant(ctx context.Context, ns string, rules []rbacv1.PolicyRule) (*Tenant, error) {
	return NewTenant(ctx, e.Client, e.Config, ns, rules)
}

// NewTenant is Env.NewTenant on any cluster: admin and adminConfig are an
// administrator's client and credentials there (a local cluster's too).
func NewTenant(ctx context.Context, admin client.Client, adminConfig *rest.Config, ns string, rules []rbacv1.PolicyRule) (*Tenant, error) {
	if rules == nil {
		rules = append(append([]rbacv1.PolicyRule{}, OrchestratorRules...), TenantRules...)
	}
	const name = "tenant"
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}},
	}
	for _, o := range objs {
		if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("tenant %s: creating %T %s: %w", ns, o, o.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(adminConfig)
	if err != nil {
		return nil, err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("tenant %s: token: %w", ns, err)
	}
	cfg := &rest.Config{Host: adminConfig.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: adminConfig.CAData}}
	c, err := client.New(cfg, client.Options{Scheme: admin.Scheme()})
	if err != nil {
		return nil, err
	}
	return &Tenant{Namespace: ns, Name: name, Config: cfg, Client: c, Token: tr.Status.Token}, nil
}
