package install

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// sdRefresh is how often Prometheus asks endpointSliceSD (kubernetes_sd
// watches; a short poll is as close as http_sd gets).
const sdRefresh = 5 * time.Second

// endpointSliceSD serves Prometheus's http_sd what kubernetes_sd_configs
// with role endpointslice discovers (Prometheus 2.42's
// discovery/kubernetes/endpointslice.go): one target per EndpointSlice
// endpoint address and port in namespaces, labelled with the slice's,
// its Service's and its Pod's __meta_kubernetes_* labels, the Pod's
// container port matching the endpoint's. It reads the API server with
// Prometheus's ServiceAccount token, so that account's RBAC is what
// discovery gets. (kubernetes_sd also adds targets for the Pods' container
// ports no Service port names; a ServiceMonitor keeps a named Service
// port only, so they are left out.)
type endpointSliceSD struct {
	cs         kubernetes.Interface
	namespaces []string
	url        string
}

type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// startEndpointSliceSD serves discovery on loopback until t ends.
func startEndpointSliceSD(t *testing.T, token string, namespaces []string) *endpointSliceSD {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: cluster.Config.Host, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	d := &endpointSliceSD{cs: cs, namespaces: namespaces, url: "http://" + addr + "/"}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		groups, err := d.groups(r.Context())
		if err != nil {
			// Prometheus keeps its last targets and logs this.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(groups)
	})}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("endpointslice discovery server: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return d
}

func (d *endpointSliceSD) groups(ctx context.Context) ([]targetGroup, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	groups := []targetGroup{}
	for _, ns := range d.namespaces {
		slices, err := d.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		svcs, err := d.cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		pods, err := d.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		podNamed := map[string]*corev1.Pod{}
		for i := range pods.Items {
			podNamed[pods.Items[i].Name] = &pods.Items[i]
		}
		for _, s := range slices.Items {
			base := map[string]string{
				"__meta_kubernetes_namespace":                  ns,
				"__meta_kubernetes_endpointslice_name":         s.Name,
				"__meta_kubernetes_endpointslice_address_type": string(s.AddressType),
			}
			for _, svc := range svcs.Items {
				if svc.Name == s.Labels[discoveryv1.LabelServiceName] {
					base["__meta_kubernetes_service_name"] = svc.Name
					metaLabels(base, "service", svc.Labels, svc.Annotations)
				}
			}
			for _, ep := range s.Endpoints {
				for _, port := range s.Ports {
					for _, addr := range ep.Addresses {
						groups = append(groups, endpointTarget(base, addr, ep, port, podNamed))
					}
				}
			}
		}
	}
	return groups, nil
}

func endpointTarget(base map[string]string, addr string, ep discoveryv1.Endpoint, port discoveryv1.EndpointPort, podNamed map[string]*corev1.Pod) targetGroup {
	l := map[string]string{}
	for k, v := range base {
		l[k] = v
	}
	a := addr
	if port.Port != nil {
		a = net.JoinHostPort(addr, strconv.Itoa(int(*port.Port)))
		l["__meta_kubernetes_endpointslice_port"] = strconv.Itoa(int(*port.Port))
	}
	if port.Name != nil {
		l["__meta_kubernetes_endpointslice_port_name"] = *port.Name
	}
	if port.Protocol != nil {
		l["__meta_kubernetes_endpointslice_port_protocol"] = string(*port.Protocol)
	}
	if port.AppProtocol != nil {
		l["__meta_kubernetes_endpointslice_port_app_protocol"] = *port.AppProtocol
	}
	for name, c := range map[string]*bool{"ready": ep.Conditions.Ready, "serving": ep.Conditions.Serving, "terminating": ep.Conditions.Terminating} {
		if c != nil {
			l["__meta_kubernetes_endpointslice_endpoint_conditions_"+name] = strconv.FormatBool(*c)
		}
	}
	if ep.Hostname != nil {
		l["__meta_kubernetes_endpointslice_endpoint_hostname"] = *ep.Hostname
	}
	if ep.TargetRef != nil {
		l["__meta_kubernetes_endpointslice_address_target_kind"] = ep.TargetRef.Kind
		l["__meta_kubernetes_endpointslice_address_target_name"] = ep.TargetRef.Name
		if p := podNamed[ep.TargetRef.Name]; ep.TargetRef.Kind == "Pod" && p != nil {
			podMeta(l, p)
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if port.Port != nil && cp.ContainerPort == *port.Port {
						l["__meta_kubernetes_pod_container_name"] = c.Name
						l["__meta_kubernetes_pod_container_image"] = c.Image
						l["__meta_kubernetes_pod_container_port_name"] = cp.Name
						l["__meta_kubernetes_pod_container_port_number"] = strconv.Itoa(int(cp.ContainerPort))
						l["__meta_kubernetes_pod_container_port_protocol"] = string(cp.Protocol)
					}
				}
			}
		}
	}
	return targetGroup{Targets: []string{a}, Labels: l}
}

// podMeta adds kubernetes_sd's pod labels.
func podMeta(l map[string]string, p *corev1.Pod) {
	ready := "unknown"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = map[corev1.ConditionStatus]string{corev1.ConditionTrue: "true", corev1.ConditionFalse: "false"}[c.Status]
			if ready == "" {
				ready = "unknown"
			}
		}
	}
	l["__meta_kubernetes_pod_name"] = p.Name
	l["__meta_kubernetes_pod_ip"] = p.Status.PodIP
	l["__meta_kubernetes_pod_ready"] = ready
	l["__meta_kubernetes_pod_phase"] = string(p.Status.Phase)
	l["__meta_kubernetes_pod_node_name"] = p.Spec.NodeName
	l["__meta_kubernetes_pod_host_ip"] = p.Status.HostIP
	l["__meta_kubernetes_pod_uid"] = string(p.UID)
	if ref := metav1.GetControllerOf(p); ref != nil {
		l["__meta_kubernetes_pod_controller_kind"] = ref.Kind
		l["__meta_kubernetes_pod_controller_name"] = ref.Name
	}
	metaLabels(l, "pod", p.Labels, p.Annotations)
}

// metaLabels adds an object's labels and annotations as kubernetes_sd
// names them (__meta_kubernetes_<role>_label_<name>, ..._labelpresent_...).
func metaLabels(l map[string]string, role string, labels, annotations map[string]string) {
	for k, v := range labels {
		n := invalidLabelChars.ReplaceAllString(k, "_")
		l["__meta_kubernetes_"+role+"_label_"+n] = v
		l["__meta_kubernetes_"+role+"_labelpresent_"+n] = "true"
	}
	for k, v := range annotations {
		n := invalidLabelChars.ReplaceAllString(k, "_")
		l["__meta_kubernetes_"+role+"_annotation_"+n] = v
		l["__meta_kubernetes_"+role+"_annotationpresent_"+n] = "true"
	}
}
