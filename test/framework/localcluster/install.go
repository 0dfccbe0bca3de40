package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/images"
	"github.com/tether-dev/tether/internal/version"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// InstallMode says how Tether's control plane gets into the cluster
// (Options.Install): "" leaves it to StartTether (host processes).
type InstallMode string

// InstallHelm installs charts/tether with `helm install`, as a platform
// team does, once the real nodes and Kueue are up: the control plane runs
// as the chart's Deployment on the cluster network's nodes, the artifact
// store as its in-cluster versitygw.
const InstallHelm InstallMode = "helm"

// InstallKustomize is `kubectl apply -k` of the quick start
// (Installed.InstallQuickStart, after a helm release was uninstalled).
const InstallKustomize InstallMode = "kustomize"

// TeamRegistry is where the installed mode says Tether's images are: a
// platform team's mirror. The nodes' containerd has them under these names
// too (tagged at import, as a pull from the mirror would leave them; no
// pull ever happens), and the install names them through the chart's
// values only, so a value the chart ignored would leave a pod on an image
// the node does not have.
const TeamRegistry = "registry.platform.test/mirror"

// The chart's in-cluster store as charts/tether names it.
const (
	StoreService = "tether-artifacts"
	storeClaim   = "tether-artifacts"
	// storeVolume is the PersistentVolume the harness provides for it.
	storeVolume = "tether-artifacts-store"
	// StoreBucket is the chart's --s3-bucket in in-cluster mode.
	StoreBucket = "tether-artifacts"
	// storeClaimSize is artifacts.inCluster.storage's default.
	storeClaimSize = "50Gi"
	// storeGID is the store pod's fsGroup in the chart.
	storeGID = 1000
)

// Installed is Tether as `helm install` left it (Options.Install): the
// control plane's Deployment behind its Service, the in-cluster store on a
// PersistentVolume of the harness's making.
type Installed struct {
	c *Cluster
	// Method is how Tether was installed.
	Method InstallMode
	// Release is the Helm release, in ControlPlaneNamespace.
	Release string
	// ControlPlaneImage, SidecarImage and StoreImage are what the install
	// set through the chart's values (under TeamRegistry).
	ControlPlaneImage, SidecarImage, StoreImage string
	// StoreDir is the host directory of the store's hostPath
	// PersistentVolume: versitygw's posix root, the bucket is
	// StoreDir/StoreBucket, each object a file.
	StoreDir string
	// ReadAPI says the read API is installed (the chart's readAPI.enabled,
	// the read-api component): every install of the harness has it.
	ReadAPI bool
	// HelmInstall is how long `helm install` (or `kubectl apply -k`) took;
	// Ready how long from its start until every replica was Ready and the
	// webhooks answered.
	HelmInstall, Ready time.Duration
}

// installImages are the images the installed mode adds to the nodes'
// (images.StoreSpec, from hack/testbin.sh's versitygw), and the tags
// under TeamRegistry of the control plane's and the sidecar's.
func (c *Cluster) installImages() (extra []images.Written, tags [][2]string, err error) {
	if c.Opts.Install == "" {
		return nil, nil, nil
	}
	imgs, err := nodeImages()
	if err != nil {
		return nil, nil, err
	}
	for _, s := range []images.Spec{images.ControlPlane(version.Registry), images.Sidecar(version.Registry)} {
		found := false
		for _, w := range imgs {
			if w.Name == s.Repository {
				tags = append(tags, [2]string{w.Ref, teamRef(w.Ref)})
				found = true
			}
		}
		if !found {
			return nil, nil, fmt.Errorf("bin/images has no %s: run `make images` again", s.Repository)
		}
	}
	s := images.StoreSpec(TeamRegistry)
	meta := images.Meta{Version: images.VersitygwVersion, Revision: strings.Repeat("0", 40), Created: time.Unix(0, 0)}
	w, err := c.prebuiltImage(s, meta)
	if err != nil {
		return nil, nil, err
	}
	return []images.Written{w}, tags, nil
}

// teamRef is ref (registry/name:tag) under TeamRegistry.
func teamRef(ref string) string { return TeamRegistry + "/" + path.Base(ref) }

// startInstall is the installed mode's step after the real nodes: `helm
// install` of charts/tether, then the wait for what a platform team
// checks (installWait).
func (c *Cluster) startInstall(ctx context.Context) error {
	if c.Opts.Install != InstallHelm {
		return fmt.Errorf("Options.Install %q: the local cluster knows %q", c.Opts.Install, InstallHelm)
	}
	nodes := c.RealNodes()
	in := &Installed{c: c, Method: InstallHelm, Release: "tether", StoreDir: filepath.Join(c.Dir, "pv", storeClaim), ReadAPI: true}
	for _, t := range nodes[0].Tags {
		switch path.Base(strings.SplitN(t[0], ":", 2)[0]) {
		case images.ControlPlane(version.Registry).Title():
			in.ControlPlaneImage = t[1]
		case images.Sidecar(version.Registry).Title():
			in.SidecarImage = t[1]
		}
	}
	in.StoreImage = nodes[0].Image(images.StoreSpec(TeamRegistry).Title())
	if in.ControlPlaneImage == "" || in.SidecarImage == "" || in.StoreImage == "" {
		return fmt.Errorf("internal: installed images missing (control plane %q, sidecar %q, store %q)", in.ControlPlaneImage, in.SidecarImage, in.StoreImage)
	}
	if err := c.preinstall(ctx, in); err != nil {
		return err
	}
	start := time.Now()
	if err := in.helm(ctx); err != nil {
		return err
	}
	in.HelmInstall = time.Since(start)
	c.logf("helm install %s charts/tether -n %s (%.1fs)", in.Release, ControlPlaneNamespace, in.HelmInstall.Seconds())
	if err := in.wait(ctx); err != nil {
		return fmt.Errorf("%w\n%s", err, in.Diagnose(ctx))
	}
	in.Ready = time.Since(start)
	c.Installed = in
	return nil
}

// preinstall is what the chart's README asks for before `helm install`
// (the namespace, Pod Security restricted) and what the cluster provides
// for the store's claim: a PersistentVolume (hostPath, no StorageClass,
// reserved for the claim by claimRef) whose directory is owned and
// permissioned as a volume the kubelet applies the pod's fsGroup to
// (group 1000, setgid, group-writable; hostPath volumes get no fsGroup).
func (c *Cluster) preinstall(ctx context.Context, in *Installed) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControlPlaneNamespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted",
		"pod-security.kubernetes.io/audit": "restricted"}}}
	if err := c.Client.Create(ctx, ns); err != nil {
		return fmt.Errorf("namespace %s: %w", ControlPlaneNamespace, err)
	}
	if err := os.MkdirAll(in.StoreDir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(in.StoreDir, 0, storeGID); err != nil {
		return err
	}
	if err := os.Chmod(in.StoreDir, 0o770|os.ModeSetgid); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: storeVolume},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(storeClaimSize)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ControlPlaneNamespace, Name: storeClaim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: in.StoreDir, Type: ptrTo(corev1.HostPathDirectory)}},
		},
	}
	return c.Client.Create(ctx, pv)
}

func ptrTo[T any](v T) *T { return &v }

// installValues place Tether's pods on the cluster network's nodes (the
// kwok nodes run nothing), through the chart's nodeSelector and
// tolerations.
const installValues = `nodeSelector:
  ` + RealNodeLabel + `: ` + NetworkNodeLabelValue + `
tolerations:
- key: ` + RealNodeLabel + `
  operator: Equal
  value: ` + NetworkNodeLabelValue + `
  effect: NoSchedule
`

// helm runs `helm install` with the images set by --set, as a team
// pointing at its own registry does.
func (in *Installed) helm(ctx context.Context) error {
	c := in.c
	bin := c.bin("helm")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("the installed mode runs helm: %w; run `hack/testbin.sh helm`", err)
	}
	home := filepath.Join(c.Dir, "helm")
	valuesFile := filepath.Join(home, "values.yaml")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(valuesFile, []byte(installValues), 0o600); err != nil {
		return err
	}
	repo, tag, _ := strings.Cut(in.ControlPlaneImage, ":")
	out, err := in.helmRun(ctx, "install", in.Release, filepath.Join(testenv.RepoRoot(), "charts", "tether"),
		"--namespace", ControlPlaneNamespace,
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "sidecar.image="+in.SidecarImage,
		"--set", "artifacts.inCluster.image="+in.StoreImage,
		"--set", fmt.Sprintf("readAPI.enabled=%t", in.ReadAPI),
		"-f", valuesFile)
	if err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, out)
	}
	return nil
}

// helmRun runs helm with args against the cluster, with its own home.
func (in *Installed) helmRun(ctx context.Context, args ...string) (string, error) {
	c := in.c
	home := filepath.Join(c.Dir, "helm")
	args = append(args, "--kubeconfig", c.Kubeconfig)
	cmd := exec.CommandContext(ctx, c.bin("helm"), args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	c.logf("$ helm %s", strings.Join(args, " "))
	err := cmd.Run()
	return out.String(), err
}

// wait waits for what a platform team checks after the install: the
// store's Deployment and both control-plane replicas Ready, on the two
// real nodes; the Service's EndpointSlices holding the replicas' pod IPs
// (what the apiserver dials for the webhooks); and a labeled TrainJob
// admitted by the webhook in a dry run (stamped with its job ID: the
// apiserver reached a pod through the Service).
func (in *Installed) wait(ctx context.Context) error {
	c := in.c
	if err := c.waitFor(ctx, 180*time.Second, "the in-cluster store's Deployment Ready", func() (bool, error) {
		if err := in.stuck(ctx); err != nil {
			return false, err
		}
		return deploymentReady(ctx, c, StoreService, 1)
	}); err != nil {
		return err
	}
	if err := c.waitFor(ctx, 180*time.Second, "both control-plane replicas Ready", func() (bool, error) {
		if err := in.stuck(ctx); err != nil {
			return false, err
		}
		return deploymentReady(ctx, c, ControlPlaneService, 2)
	}); err != nil {
		return err
	}
	pods, err := in.ControlPlanePods(ctx)
	if err != nil {
		return err
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		if c.RealNodeNamed(p.Spec.NodeName) == nil {
			return fmt.Errorf("control-plane pod %s is on node %q, not a real node", p.Name, p.Spec.NodeName)
		}
		nodes[p.Spec.NodeName] = true
	}
	switch {
	case len(pods) != 2:
		return fmt.Errorf("want 2 control-plane replicas, have %d pods on %v", len(pods), nodes)
	case len(nodes) != 2 && in.Method == InstallHelm:
		// The first install, on nodes with nothing of Tether's yet: the
		// chart's spread (soft: anti-affinity and a hostname spread
		// constraint, both preferred) puts one replica on each.
		return fmt.Errorf("want the 2 control-plane replicas on the 2 real nodes, have them on %v", nodes)
	case len(nodes) != 2:
		// A later install (the quick start, after other scenarios moved
		// pods around) may find one node much emptier: the spread is
		// preferred, not required, so that a rollout's surge replica and a
		// single-node cluster still schedule.
		c.logf("the %s install's 2 replicas are both on %v (the chart's spread is preferred, not required)", in.Method, nodes)
	}
	if err := c.waitFor(ctx, 60*time.Second, "the Service's EndpointSlices with both replicas ready", func() (bool, error) {
		ips, err := in.ReadyEndpoints(ctx)
		return len(ips) == 2, err
	}); err != nil {
		return err
	}
	if err := c.retry(ctx, 60*time.Second, func() error { return in.webhookDryRun(ctx) }); err != nil {
		return err
	}
	if !in.ReadAPI {
		return nil
	}
	// What `kubectl get apiservice` shows a team: the API server reaches
	// the read API through the Service and trusts its certificate.
	return c.waitFor(ctx, 60*time.Second, "APIService "+tetherv1.ReadAPIService+" Available", func() (bool, error) {
		return in.ReadAPIAvailable(ctx)
	})
}

// ReadAPIAvailable reports the read API's APIService's Available
// condition, as `kubectl get apiservice` shows it.
func (in *Installed) ReadAPIAvailable(ctx context.Context) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
	if err := in.c.Client.Get(ctx, client.ObjectKey{Name: tetherv1.ReadAPIService}, u); err != nil {
		return false, err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			return m["status"] == "True", nil
		}
	}
	return false, nil
}

// stuckReasons are the container states a pod of Tether's does not leave
// by waiting: a failure to find, create or start its image or command, or
// a crash the kubelet now backs off from.
var stuckReasons = map[string]bool{"ErrImageNeverPull": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "StartError": true, "CrashLoopBackOff": true}

// stuck is an error naming the first container of Tether's pods in a
// state it will not leave by waiting, or nil.
func (in *Installed) stuck(ctx context.Context) error {
	var pods corev1.PodList
	if err := in.c.Client.List(ctx, &pods, client.InNamespace(ControlPlaneNamespace)); err != nil {
		return err
	}
	for _, p := range pods.Items {
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := s.State.Waiting; w != nil && stuckReasons[w.Reason] {
				return fmt.Errorf("pod %s container %s: %s: %s", p.Name, s.Name, w.Reason, w.Message)
			}
			if t := s.State.Terminated; t != nil && stuckReasons[t.Reason] {
				return fmt.Errorf("pod %s container %s: %s (exit %d): %s", p.Name, s.Name, t.Reason, t.ExitCode, t.Message)
			}
		}
	}
	return nil
}

// deploymentReady says whether Deployment name in ControlPlaneNamespace has
// want ready, updated replicas.
func deploymentReady(ctx context.Context, c *Cluster, name string, want int32) (bool, error) {
	var d appsv1.Deployment
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ControlPlaneNamespace, Name: name}, &d); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return d.Status.ReadyReplicas == want && d.Status.UpdatedReplicas == want, nil
}

// ControlPlanePodLabels select the control plane's pods (the chart's and
// the manifests' Deployment labels them so).
var ControlPlanePodLabels = client.MatchingLabels{"app.kubernetes.io/name": "tether", "app.kubernetes.io/component": "control-plane"}

// AllControlPlanePods are every pod of the control plane's, terminating and
// ended ones included: what a watcher of a roll or a drain counts.
func (in *Installed) AllControlPlanePods(ctx context.Context) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := in.c.Client.List(ctx, &pods, client.InNamespace(ControlPlaneNamespace), ControlPlanePodLabels); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// ControlPlanePods are the control plane's running pods, by name.
func (in *Installed) ControlPlanePods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := in.AllControlPlanePods(ctx)
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PodReady says whether p's Ready condition is True.
func PodReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ServingReplicas counts the pods that are Ready and not being deleted: the
// replicas a roll or a drain must never take below the budget.
func ServingReplicas(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp == nil && PodReady(p) {
			n++
		}
	}
	return n
}

// ReadyEndpoints are the ready addresses of the control plane's Service,
// as the endpointslice controller wrote them from the pods.
func (in *Installed) ReadyEndpoints(ctx context.Context) ([]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := in.c.Client.List(ctx, &slices, client.InNamespace(ControlPlaneNamespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: ControlPlaneService}); err != nil {
		return nil, err
	}
	var ips []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ips = append(ips, e.Addresses...)
			}
		}
	}
	sort.Strings(ips)
	return ips, nil
}

// Diagnose describes Tether's pods and the namespace's recent Events, for
// an install that did not come up.
func (in *Installed) Diagnose(ctx context.Context) string {
	var b strings.Builder
	var pods corev1.PodList
	if err := in.c.Client.List(ctx, &pods, client.InNamespace(ControlPlaneNamespace)); err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				fmt.Fprintf(&b, "; %s: %s", cond.Type, cond.Message)
			}
		}
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			switch {
			case s.State.Waiting != nil:
				fmt.Fprintf(&b, "; %s waiting %s: %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
			case s.State.Terminated != nil:
				fmt.Fprintf(&b, "; %s terminated %s (exit %d): %s", s.Name, s.State.Terminated.Reason, s.State.Terminated.ExitCode, s.State.Terminated.Message)
			}
			if s.LastTerminationState.Terminated != nil {
				fmt.Fprintf(&b, "; %s last exit %d: %s", s.Name, s.LastTerminationState.Terminated.ExitCode, s.LastTerminationState.Terminated.Message)
			}
		}
		b.WriteString("\n")
	}
	var events corev1.EventList
	if err := in.c.Client.List(ctx, &events, client.InNamespace(ControlPlaneNamespace)); err == nil {
		for _, e := range events.Items {
			if e.Type != corev1.EventTypeNormal {
				fmt.Fprintf(&b, "event %s %s/%s: %s (x%d)\n", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message, e.Count)
			}
		}
	}
	var pvcs corev1.PersistentVolumeClaimList
	if err := in.c.Client.List(ctx, &pvcs, client.InNamespace(ControlPlaneNamespace)); err == nil {
		for _, p := range pvcs.Items {
			fmt.Fprintf(&b, "claim %s: %s (volume %q)\n", p.Name, p.Status.Phase, p.Spec.VolumeName)
		}
	}
	return b.String()
}

// webhookDryRun creates a labeled TrainJob in a dry run: the apiserver
// calls the TrainJob webhook through the Service (a replica's pod IP), and
// the answer carries the job ID the webhook stamps.
func (in *Installed) webhookDryRun(ctx context.Context) error {
	tj := &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tether-install-check", Labels: map[string]string{names.BindLabel: "true"}},
		Spec:       trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: TorchRuntime}},
	}
	if err := in.c.Client.Create(ctx, tj, client.DryRunAll); err != nil {
		return fmt.Errorf("dry-run create of a labeled TrainJob: %w", err)
	}
	if tj.Annotations[names.JobIDAnnotation] == "" {
		return errors.New("a labeled TrainJob was admitted without a job ID: the webhook did not mutate it")
	}
	return nil
}

// quickStartOverlay is the kustomization a platform team applies for the
// quick start (kubectl apply -k manifests/overlays/quick-start).
const quickStartOverlay = "manifests/overlays/quick-start"

// quickStartPatch places Tether's Deployments (control plane and store) on
// the cluster network's nodes: installValues, as a kustomize patch.
func quickStartPatch() string {
	return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: any}\nspec:\n  template:\n    spec:\n" + indent(installValues, "      ")
}

// Uninstall removes the Helm release (`helm uninstall --wait`), as a team
// leaving Tether (or switching to kustomize) does; the store's claim is
// kept (helm.sh/resource-policy: keep), its volume and StoreDir with it.
func (in *Installed) Uninstall(ctx context.Context) error {
	if in.Method != InstallHelm {
		return fmt.Errorf("Uninstall: Tether was installed by %q, not helm", in.Method)
	}
	out, err := in.helmRun(ctx, "uninstall", in.Release, "--namespace", ControlPlaneNamespace, "--wait", "--timeout", "2m")
	if err != nil {
		return fmt.Errorf("helm uninstall: %w\n%s", err, out)
	}
	in.c.logf("helm uninstall %s (%s)", in.Release, strings.TrimSpace(out))
	return nil
}

// InstallQuickStart installs the quick start as its README says, `kubectl
// apply -k` of a team's kustomization over manifests/overlays/quick-start
// that sets every image (the control plane's, the sidecar's, the store's)
// through kustomize's images: under TeamRegistry, after a helm release of
// the same cluster was uninstalled: its kept claim is used again (a volume
// left Released is bound anew, its claimRef's uid cleared, as an
// administrator does).
// It waits as the helm install does and returns the new Installed.
func (in *Installed) InstallQuickStart(ctx context.Context) (*Installed, error) {
	c := in.c
	q := &Installed{c: c, Method: InstallKustomize, ControlPlaneImage: in.ControlPlaneImage, SidecarImage: in.SidecarImage,
		StoreImage: in.StoreImage, StoreDir: in.StoreDir, ReadAPI: in.ReadAPI}
	pv := &corev1.PersistentVolume{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: storeVolume}, pv); err != nil {
		return nil, err
	}
	if pv.Status.Phase == corev1.VolumeReleased {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ControlPlaneNamespace, Name: storeClaim}
		if err := c.Client.Update(ctx, pv); err != nil {
			return nil, fmt.Errorf("releasing the retained store volume for the new claim: %w", err)
		}
	}
	dir := filepath.Join(c.Dir, "kustomize")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), quickStartOverlay))
	if err != nil {
		return nil, err
	}
	var imageList strings.Builder
	for _, ref := range []string{q.ControlPlaneImage, q.SidecarImage, q.StoreImage} {
		repo, tag, _ := strings.Cut(ref, ":")
		fmt.Fprintf(&imageList, "  - name: %s\n    newName: %s\n    newTag: %q\n", upstreamImage(path.Base(repo)), repo, tag)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + filepath.ToSlash(rel) + "\n"
	if q.ReadAPI {
		k += "components:\n  - " + filepath.ToSlash(filepath.Join(filepath.Dir(rel), "read-api")) + "\n"
	}
	k += "images:\n" + imageList.String() + "patches:\n  - target: {kind: Deployment}\n    patch: |\n" + indent(quickStartPatch(), "      ")
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		return nil, err
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), "--kubeconfig", c.Kubeconfig, "apply", "-k", dir)
	out, err := cmd.CombinedOutput()
	c.logf("$ kubectl apply -k %s (%.1fs)", dir, time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("kubectl apply -k: %w\n%s\n%s", err, out, k)
	}
	q.HelmInstall = time.Since(start)
	if err := q.wait(ctx); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, q.Diagnose(ctx))
	}
	q.Ready = time.Since(start)
	c.Installed = q
	return q, nil
}

// upstreamImage is the repository the shipped manifests name for an image
// of that base name.
func upstreamImage(name string) string {
	if name == images.StoreSpec(TeamRegistry).Title() {
		return "ghcr.io/versity/versitygw"
	}
	return version.Registry + "/" + name
}

func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}
