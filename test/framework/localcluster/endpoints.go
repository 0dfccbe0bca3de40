package localcluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// The control plane's Service as manifests/ and charts/tether ship it.
const (
	ControlPlaneNamespace = "tether-system"
	ControlPlaneService   = "tether-control-plane"
	// ControlPlaneBindingURL is the binding server's URL as installed
	// (--binding-server-url of the shipped Deployment): the Service's DNS
	// name, which CoreDNS answers in pods.
	ControlPlaneBindingURL = "https://" + ControlPlaneService + "." + ControlPlaneNamespace + ".svc:8443"
	// endpointsManager is the EndpointSlices' managed-by label: not the
	// endpointslice controller's, which leaves them alone.
	endpointsManager = "localcluster.tether.dev"
)

// serviceEndpoints are the EndpointSlices of the selector-less Service
// tether-control-plane while the replicas run as host processes on the
// cluster network (the install issue moves them into pods): the endpoints
// controller's part. Each replica has two slices, both at the network's HostIP
// with the replica's ports, since replicas share the address: one with its
// webhook and metrics ports, one with its binding port, so a preferred
// replica (PreferBindingReplica) takes the binding traffic while every
// replica still serves the webhooks. kube-proxy routes the pods' traffic by
// them, the apiserver (--enable-aggregator-routing) its webhook calls.
type serviceEndpoints struct {
	c *Cluster
	// syncMu makes syncs one at a time: the readiness poll's and a test's
	// (PreferBindingReplica) raced on the same slices and lost to each
	// other's resourceVersion.
	syncMu sync.Mutex
	mu     sync.Mutex
	// state is what each replica should be: ready, or terminating.
	ready, terminating map[int]bool
	// ports are each replica's webhook, metrics and binding ports.
	ports map[int][3]int32
	// prefer is the replica that takes all binding traffic while ready (-1: none).
	prefer int
	// written is the readiness each slice was last written with.
	written map[string]bool
}

func newServiceEndpoints(c *Cluster) *serviceEndpoints {
	return &serviceEndpoints{c: c, ready: map[int]bool{}, terminating: map[int]bool{}, ports: map[int][3]int32{},
		prefer: -1, written: map[string]bool{}}
}

// add records replica i's addresses (all on the network's HostIP).
func (e *serviceEndpoints) add(i int, webhook, metrics, binding string) error {
	var ports [3]int32
	for k, addr := range []string{webhook, metrics, binding} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != e.c.Network.HostIP.String() {
			return fmt.Errorf("replica %d listens on %s, not on the host's veth address %s", i, addr, e.c.Network.HostIP)
		}
		p, _ := strconv.Atoi(port)
		ports[k] = int32(p)
	}
	e.mu.Lock()
	e.ports[i] = ports
	e.mu.Unlock()
	return nil
}

// set records replica i's state; sync writes it.
func (e *serviceEndpoints) set(i int, ready, terminating bool) {
	e.mu.Lock()
	e.ready[i], e.terminating[i] = ready, terminating
	e.mu.Unlock()
}

func (e *serviceEndpoints) setPrefer(i int) {
	e.mu.Lock()
	e.prefer = i
	e.mu.Unlock()
}

// bindingPorts are the binding ports of the replicas whose binding slice
// should say ready (sorted): every ready replica's, or the preferred one's
// alone while it is ready.
func (e *serviceEndpoints) bindingPorts() []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ports []int32
	for i, p := range e.ports {
		if e.bindingReadyLocked(i) {
			ports = append(ports, p[2])
		}
	}
	slices.Sort(ports)
	return ports
}

// bindingReadyLocked says whether replica i's binding slice should say
// ready: it is ready and no other ready replica is preferred. e.mu is held.
func (e *serviceEndpoints) bindingReadyLocked(i int) bool {
	preferReady := e.prefer >= 0 && e.ready[e.prefer]
	return e.ready[i] && (!preferReady || e.prefer == i)
}

// isWritten says whether replica i's slices say it is ready.
func (e *serviceEndpoints) isWritten(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ready, ok := e.written[sliceName(i, "")]
	return ok && ready
}

func sliceName(i int, suffix string) string {
	return fmt.Sprintf("%s-replica-%d%s", ControlPlaneService, i, suffix)
}

// sync writes every slice whose readiness changed.
func (e *serviceEndpoints) sync(ctx context.Context) error {
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	type want struct {
		name               string
		ready, terminating bool
		ports              map[string]int32
	}
	e.mu.Lock()
	var wants []want
	for i, p := range e.ports {
		binding := e.bindingReadyLocked(i)
		wants = append(wants,
			want{sliceName(i, ""), e.ready[i], e.terminating[i], map[string]int32{"webhook": p[0], "metrics": p[1]}},
			want{sliceName(i, "-binding"), binding, e.terminating[i], map[string]int32{"binding": p[2]}})
	}
	written := map[string]bool{}
	for k, v := range e.written {
		written[k] = v
	}
	e.mu.Unlock()
	var errs []string
	for _, w := range wants {
		if ready, ok := written[w.name]; ok && ready == w.ready {
			continue
		}
		if err := e.write(ctx, w.name, w.ready, w.terminating, w.ports); err != nil {
			errs = append(errs, fmt.Sprintf("EndpointSlice %s: %v", w.name, err))
			continue
		}
		e.mu.Lock()
		e.written[w.name] = w.ready
		e.mu.Unlock()
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func (e *serviceEndpoints) write(ctx context.Context, name string, ready, terminating bool, ports map[string]int32) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ControlPlaneNamespace, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: ControlPlaneService, discoveryv1.LabelManagedBy: endpointsManager}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{e.c.Network.HostIP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(terminating)}}},
	}
	for _, n := range []string{"webhook", "metrics", "binding"} {
		if p, ok := ports[n]; ok {
			slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Port: ptr.To(p), Protocol: ptr.To(corev1.ProtocolTCP)})
		}
	}
	var cur discoveryv1.EndpointSlice
	err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(slice), &cur)
	if apierrors.IsNotFound(err) {
		return e.c.Client.Create(ctx, slice)
	}
	if err != nil {
		return err
	}
	cur.Labels, cur.Endpoints, cur.Ports = slice.Labels, slice.Endpoints, slice.Ports
	return e.c.Client.Update(ctx, &cur)
}

// freeAddrOn is a TCP address on ip with a port that was free, below the
// ephemeral range (testenv.FreeAddrOn).
func freeAddrOn(ip net.IP) (string, error) { return testenv.FreeAddrOn(ip) }
