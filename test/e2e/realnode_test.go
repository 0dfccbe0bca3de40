package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// The real-node scenarios (r*_test.go) run Tether's images under real
// kubelets, containerd and runc on the cluster network's two nodes, in pods
// with addresses of their own (pod networking, no hostNetwork), on
// Trainer's torch-distributed runtime as shipped. All but r2 are shared
// (phases_test.go): they run together, the real nodes' queue holding every
// one of their jobs at once; r2 needs that queue to itself (preemption).

// realNodeQueue is the LocalQueue, in every real-node scenario's namespace,
// whose TrainJobs Kueue places on the real nodes.
const realNodeQueue = "real-node-queue"

// needRealNode skips t when the suite runs without the real nodes
// (TETHER_E2E_REAL_NODE=0); it returns the first (every node has the same
// images).
func needRealNode(t *testing.T) *localcluster.RealNode {
	t.Helper()
	nodes := suite.c.RealNodes()
	if len(nodes) == 0 {
		t.Skip("the real nodes are off (TETHER_E2E_REAL_NODE=0)")
	}
	return nodes[0]
}

// nodeOf is the real node pod runs on.
func nodeOf(t *testing.T, pod *corev1.Pod) *localcluster.RealNode {
	t.Helper()
	n := suite.c.RealNodeNamed(pod.Spec.NodeName)
	if n == nil {
		t.Fatalf("pod %s/%s is on node %q, not a real node", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	return n
}

// realNodeNamespace is newNamespace plus the real node's LocalQueue.
func (e *env) realNodeNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := e.newNamespace(t, prefix)
	if err := e.c.RealNodeQueue(context.Background(), ns, realNodeQueue); err != nil {
		t.Fatal(err)
	}
	return ns
}

// realTrainJob is a TrainJob on Trainer's own torch-distributed runtime as
// shipped (localcluster.TorchRuntime), queued for the real nodes, whose
// trainer is the stand-in image following plan. It requests a quarter CPU:
// Kueue assigns a flavor (and so the real nodes' node selector and
// toleration) only to a workload that requests a covered resource.
func realTrainJob(name, ns string, plan localcluster.TrainerPlan) *testobj.TrainJobWrapper {
	n := suite.c.RealNodes()[0]
	return testobj.MakeTrainJob(name, ns).Runtime(localcluster.TorchRuntime).
		ResourcesPerNode(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}).
		Image(n.Image("tether-trainer-standin")).
		Command("/trainer-standin").
		Args(plan.Args(jobconfig.DefaultArtifactPath)...).
		Queue(realNodeQueue)
}

// podLog reads a container's log through the pods/log API (the apiserver
// asks the kubelet); previous selects the instance before the last restart.
func (e *env) podLog(t *testing.T, pod *corev1.Pod, container string, previous bool) string {
	t.Helper()
	raw, err := e.c.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, Previous: previous}).
		Do(context.Background()).Raw()
	if err != nil {
		t.Fatalf("pods/log of %s/%s container %s (previous=%v): %v", pod.Namespace, pod.Name, container, previous, err)
	}
	return string(raw)
}

// standinFiles parses the stand-in's closing file list from its log:
// relative path → MD5.
func standinFiles(log string) map[string]string {
	files := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 5 && f[0] == "trainer-standin:" && f[1] == "file" {
			files[f[2]] = f[3]
		}
	}
	return files
}

// hostArtifactDir is where the pod's node's kubelet keeps its artifact
// emptyDir on the host (only while the pod runs: the kubelet tears it down
// after).
func hostArtifactDir(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	return filepath.Join(nodeOf(t, pod).Dir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", mutate.ArtifactVolumeName)
}

// containerStatus finds a container's status (init containers included).
func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// waitRunningOnRealNode waits until the pod runs on a real node with its
// sidecar and trainer started, on pod networking: an address of its own
// from that node's pod CIDR, never the host's.
func (e *env) waitRunningOnRealNode(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	return e.waitPod(t, pod.Namespace, pod.Name, 120*time.Second, "sidecar and trainer running on a real node", func(p *corev1.Pod) error {
		n := e.c.RealNodeNamed(p.Spec.NodeName)
		if n == nil {
			return fmt.Errorf("on node %q, not a real node", p.Spec.NodeName)
		}
		if p.Spec.HostNetwork {
			return fmt.Errorf("hostNetwork pod on %s: the real nodes run pods on pod networking only", n.Name)
		}
		if ip := net.ParseIP(p.Status.PodIP); ip == nil || !n.PodCIDR().Contains(ip) {
			return fmt.Errorf("pod IP %q not (yet) from node %s's pod CIDR %s", p.Status.PodIP, n.Name, n.PodCIDR())
		}
		sc, tr := containerStatus(p, mutate.SidecarName), containerStatus(p, "node")
		if sc == nil || sc.State.Running == nil || tr == nil || tr.State.Running == nil {
			return fmt.Errorf("not both running yet: sidecar %+v trainer %+v", sc, tr)
		}
		return nil
	})
}

// waitPod waits until the pod satisfies ok and returns it.
func (e *env) waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, ok func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, timeout, what, func() error {
		pod = &corev1.Pod{}
		if err := e.c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil {
			return err
		}
		return ok(pod)
	})
	logf("%s/%s: %s", ns, name, what)
	return pod
}

// sameAsStored says whether each file is stored with its MD5 as ETag, and
// nothing else of the trainer's is stored.
func sameAsStored(files, stored map[string]string) error {
	if err := sameFiles(files, stored); err != nil {
		return err
	}
	for rel := range stored {
		if _, ok := files[rel]; !ok {
			return fmt.Errorf("%s is stored but the trainer did not leave it", rel)
		}
	}
	return nil
}

// persistentArtifacts makes a hostPath PersistentVolume on the real nodes
// (a directory on the host, which both nodes see; writable by the
// stand-in's uid) and a claim
// bound to it, and returns the runtime patch that mounts the claim at the
// artifact path, and the directory on the host. The files outlive each pod,
// as on any PersistentVolumeClaim.
func (e *env) persistentArtifacts(t *testing.T, ns, name string) (trainer.PodSpecPatch, string) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(e.c.Dir, "pv", ns, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	class := "e2e-" + ns
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: size, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: class,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
			ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: name},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(class), VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: size},
		},
	}
	e.create(t, pv)
	t.Cleanup(func() { _ = e.c.Client.Delete(ctx, pv) })
	e.create(t, pvc)
	eventually(t, 30*time.Second, "claim "+name+" bound", func() error {
		if err := e.c.Client.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
			return err
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("phase %s", pvc.Status.Phase)
		}
		return nil
	})
	return trainer.PodSpecPatch{
		Volumes: []corev1.Volume{{Name: "checkpoints", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		Containers: []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{{Name: "checkpoints", MountPath: jobconfig.DefaultArtifactPath}}}},
	}, dir
}

// waitPodSucceeded waits until the pod's phase is Succeeded.
func (e *env) waitPodSucceeded(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	return e.waitPod(t, pod.Namespace, pod.Name, 60*time.Second, "pod Succeeded", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
}

// expectStoredAsTrainerLeft reads the stand-in's closing file list from its
// log (through the kubelet) and checks that exactly those files are stored,
// each with its MD5; it returns the list.
func (e *env) expectStoredAsTrainerLeft(t *testing.T, pod *corev1.Pod, jobID string) map[string]string {
	t.Helper()
	log := e.podLog(t, pod, "node", false)
	files := standinFiles(log)
	if len(files) == 0 {
		t.Fatalf("no file list in the trainer's log:\n%s", log)
	}
	if err := sameAsStored(files, e.stored(t, jobID)); err != nil {
		t.Fatalf("stored artifacts differ from the trainer's files: %v", err)
	}
	return files
}

// injectedEnv is the value of the injected sidecar's environment variable
// name ("" if unset).
func injectedEnv(pod *corev1.Pod, name string) string {
	return testenv.SidecarEnv(pod)[name]
}
