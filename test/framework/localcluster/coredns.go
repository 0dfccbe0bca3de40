package localcluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// corefile serves the cluster zone and nothing else: no forward plugin (it
// is not even linked), so a name outside cluster.local is refused and DNS
// never leaves the cluster. It listens on 5353 so CoreDNS runs without
// privileges; kube-dns maps port 53 there.
const corefile = `cluster.local:5353 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local {
        pods insecure
    }
    cache 30
}
`

// startCoreDNS runs CoreDNS as a Deployment in kube-system behind the
// kube-dns Service (the network's DNSServiceIP, the kubelets' clusterDNS), on the
// network's nodes only, and waits until it is ready.
func (c *Cluster) startCoreDNS(ctx context.Context) error {
	ref := c.Network.Nodes[0].Image("tether-coredns")
	labels := map[string]string{"k8s-app": "kube-dns"}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: "coredns"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}, Data: map[string]string{"Corefile": corefile}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns", Labels: labels},
			Spec: corev1.ServiceSpec{ClusterIP: c.Network.DNSServiceIP.String(), Selector: labels, Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(5353)},
			}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns", Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: "coredns",
						// Its own resolv.conf would point at itself; it forwards
						// nothing, so Default is only the harness's file.
						DNSPolicy:    corev1.DNSDefault,
						NodeSelector: NetworkNodeSelector(),
						Tolerations:  NetworkNodeTolerations(),
						Containers: []corev1.Container{{
							Name: "coredns", Image: ref, ImagePullPolicy: corev1.PullNever,
							Args:         []string{"-conf", "/etc/coredns/Corefile"},
							VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
							Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 5353, Protocol: corev1.ProtocolTCP}},
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
								PeriodSeconds: 1},
							LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
								PeriodSeconds: 10, FailureThreshold: 5},
							SecurityContext: RestrictedContainer(),
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
					},
				},
			}},
	}
	for _, o := range objs {
		if err := c.retry(ctx, 30*time.Second, func() error { return client.IgnoreAlreadyExists(c.Client.Create(ctx, o)) }); err != nil {
			return fmt.Errorf("CoreDNS: creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return c.waitFor(ctx, 120*time.Second, "CoreDNS ready (kube-system/coredns)", func() (bool, error) {
		var d appsv1.Deployment
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &d); err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas >= 1, nil
	})
}

// NetworkNodeSelector places a pod on the network's real nodes.
func NetworkNodeSelector() map[string]string {
	return map[string]string{RealNodeLabel: NetworkNodeLabelValue}
}

// NetworkNodeTolerations tolerate the network nodes' taint.
func NetworkNodeTolerations() []corev1.Toleration {
	return []corev1.Toleration{{Key: RealNodeLabel, Operator: corev1.TolerationOpEqual, Value: NetworkNodeLabelValue, Effect: corev1.TaintEffectNoSchedule}}
}

// RestrictedContainer is a container securityContext Pod Security's
// restricted level accepts (the images run as 65532).
func RestrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
