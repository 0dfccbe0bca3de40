package localcluster

import (
	"context"
	"encoding/base64"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// componentService is the Service through which the API server reaches a
// component's webhooks, named as the component's own install names it
// (its manifests' webhook-service/system, after their kustomize prefixes).
type componentService struct{ namespace, name string }

var (
	jobSetWebhookService  = componentService{"jobset-system", "jobset-webhook-service"}
	trainerWebhookService = componentService{"kubeflow-system", "kubeflow-trainer-controller-manager"}
	kueueWebhookService   = componentService{"kueue-system", "kueue-webhook-service"}
)

// webhookServicePort is the port of those Services (the manifests name none:
// the API server's default, 443).
const webhookServicePort = 443

// componentWebhookAddr is where a component run as a host process serves
// its webhooks: on the cluster network, the host's veth address, behind its
// Service (exposeComponent), as its pods would be; without it, loopback,
// registered by URL.
func (c *Cluster) componentWebhookAddr() (string, error) {
	if c.Network != nil {
		return freeAddrOn(c.Network.HostIP)
	}
	return testenv.FreeAddr()
}

// exposeComponent creates svc without a selector, and the EndpointSlice
// that puts addr (on the network's HostIP) behind it: the Deployment and Service
// the component's install would have. The API server resolves the Service
// to that endpoint (--enable-aggregator-routing), as it does a pod's.
func (c *Cluster) exposeComponent(ctx context.Context, svc componentService, addr string) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(portStr)
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svc.namespace}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.namespace, Name: svc.name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: webhookServicePort, Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromInt32(int32(port))}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.namespace, Name: svc.name + "-localcluster", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.name, discoveryv1.LabelManagedBy: endpointsManager}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, o := range []client.Object{service, slice} {
		if err := c.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// webhookService points every webhook of configuration o (renamed name)
// at svc, path as the manifest has it, with caBundle; keep, if given,
// keeps only the webhooks whose path contains one of them.
func webhookService(o *unstructured.Unstructured, name string, svc componentService, caBundle []byte, keep ...string) error {
	return rewriteWebhooks(o, name, keep, func(path string) map[string]any {
		return map[string]any{"service": serviceRef(svc, path), "caBundle": base64.StdEncoding.EncodeToString(caBundle)}
	})
}

// conversionService points a CRD's conversion webhook at svc's /convert.
func conversionService(crd *unstructured.Unstructured, svc componentService, caBundle []byte) error {
	return unstructured.SetNestedField(crd.Object, map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"clientConfig":             map[string]any{"service": serviceRef(svc, "/convert"), "caBundle": base64.StdEncoding.EncodeToString(caBundle)},
			"conversionReviewVersions": []any{"v1"},
		},
	}, "spec", "conversion")
}

func serviceRef(svc componentService, path string) map[string]any {
	return map[string]any{"namespace": svc.namespace, "name": svc.name, "path": path, "port": int64(webhookServicePort)}
}
