package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 3: Pod Security "restricted".
//
// Admission: in a namespace that enforces restricted, a trainer pod of a
// bound TrainJob is created with a server-side dry run (Tether's webhook
// injects, then the PodSecurity admission plugin checks the result; no
// hostNetwork, which is itself a baseline violation). A compliant trainer
// passes with the sidecar in; a non-compliant trainer is refused, naming
// only the trainer's container, never the sidecar.
//
// Runtime: in a namespace that enforces restricted too, a bound TrainJob on
// Trainer's torch-distributed runtime as shipped (its trainer given a
// restricted securityContext by a runtime patch) is admitted for real, not
// by dry run, with no hostNetwork or other exception; on the real node runc
// enforces the sidecar's restricted context: no capabilities, no_new_privs,
// a seccomp filter, a read-only root, user 65532 (read from the running
// process in /proc), and the job succeeds.
func TestRealNode3Restricted(t *testing.T) {
	shared(t)
	node := needRealNode(t)
	timed(t)
	ctx := context.Background()

	t.Run("admission", func(t *testing.T) {
		ns := suite.newNamespace(t, "restricted")
		enforceRestricted(t, ns)
		// Suspended and queued nowhere: Trainer makes no pods; the binding
		// and token Secret exist, so the pod webhook injects.
		const name = "restricted-job"
		tj := bound(trainJob(name, ns)).Suspend(true).Obj()
		suite.create(t, tj)
		suite.waitBinding(t, ns, name, 30*time.Second, "binding created", func(wb *tetherv1.WorkerBinding) error {
			if wb.Spec.JobID == "" {
				return fmt.Errorf("no job id")
			}
			return nil
		})

		compliant := restrictedTrainerPod(ns, name, node.Image("tether-trainer-standin"), true)
		if err := suite.c.Client.Create(ctx, compliant, client.DryRunAll); err != nil {
			t.Fatalf("dry-run of a restricted-compliant trainer pod in an enforce=restricted namespace: %v", err)
		}
		if !hasContainer(compliant.Spec.InitContainers, mutate.SidecarName) {
			t.Fatalf("dry-run passed but the returned pod has no sidecar: init containers %v", compliant.Spec.InitContainers)
		}

		bad := restrictedTrainerPod(ns, name, node.Image("tether-trainer-standin"), false)
		err := suite.c.Client.Create(ctx, bad, client.DryRunAll)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("dry-run of a non-compliant trainer: want Forbidden by PodSecurity, got %v", err)
		}
		if msg := err.Error(); !strings.Contains(msg, `"node"`) || strings.Contains(msg, mutate.SidecarName) {
			t.Fatalf("PodSecurity's refusal must name the trainer container only, not the sidecar: %s", msg)
		}
		logf("restricted: compliant trainer admitted with the sidecar; non-compliant refused: %v", err)
	})

	t.Run("runtime", func(t *testing.T) {
		ns := suite.realNodeNamespace(t, "real-restricted")
		enforceRestricted(t, ns)
		const name = "real-restricted"
		tj := bound(realTrainJob(name, ns, localcluster.TrainerPlan{Steps: 6, StepInterval: time.Second})).
			NodePatch(trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", SecurityContext: restrictedContext()}}}).Obj()
		suite.create(t, tj)
		pod := suite.injectedPod(t, ns, name, "")
		if pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC {
			t.Fatalf("pod admitted under enforce=restricted with host namespaces: network %v pid %v ipc %v", pod.Spec.HostNetwork, pod.Spec.HostPID, pod.Spec.HostIPC)
		}
		pod = suite.waitPod(t, ns, pod.Name, 90*time.Second, "sidecar running", func(p *corev1.Pod) error {
			if s := containerStatus(p, mutate.SidecarName); s == nil || s.State.Running == nil {
				return fmt.Errorf("sidecar not running: %+v", s)
			}
			return nil
		})
		pids, err := nodeOf(t, pod).ContainerPIDs(containerStatus(pod, mutate.SidecarName).ContainerID)
		if err != nil || len(pids) == 0 {
			t.Fatalf("sidecar's processes: %v %v", pids, err)
		}
		status, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pids[0]), "status"))
		if err != nil {
			t.Fatal(err)
		}
		fields := procStatus(string(status))
		want := map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
		for k, v := range want {
			if fields[k] != v {
				t.Errorf("sidecar process %d: %s=%q, want %q", pids[0], k, fields[k], v)
			}
		}
		if uid := strings.Fields(fields["Uid"]); len(uid) == 0 || uid[0] != fmt.Sprint(mutate.SidecarUID) {
			t.Errorf("sidecar runs as uid %v, want %d", uid, mutate.SidecarUID)
		}
		mounts, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pids[0]), "mountinfo"))
		if err != nil {
			t.Fatal(err)
		}
		if opts := rootMountOptions(string(mounts)); !strings.Contains(","+opts+",", ",ro,") {
			t.Errorf("sidecar's root filesystem is mounted %q, want read-only", opts)
		}
		suite.waitBinding(t, ns, name, 90*time.Second, "Succeeded under the restricted context", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
		logf("restricted: sidecar pid %d: CapEff %s NoNewPrivs %s Seccomp %s Uid %s", pids[0], fields["CapEff"], fields["NoNewPrivs"], fields["Seccomp"], fields["Uid"])
	})
}

// restrictedTrainerPod is a trainer pod of TrainJob name as JobSet would
// label it; compliant gives the trainer a restricted securityContext.
func restrictedTrainerPod(ns, name, image string, compliant bool) *corev1.Pod {
	trainer := corev1.Container{Name: "node", Image: image, Command: []string{"/trainer-standin"}}
	if compliant {
		trainer.SecurityContext = restrictedContext()
		trainer.SecurityContext.RunAsUser = ptr.To[int64](1000)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-node-0-0-dryrun", Labels: map[string]string{
			trainjob.JobSetNameLabel: name, trainjob.ReplicatedJobNameLabel: "node",
			trainjob.JobIndexLabel: "0", trainjob.CompletionIndexLabel: "0",
			// What Tether's JobSet webhook puts on a bound job's pod template:
			// only such pods reach the pod webhook.
			names.BindLabel: names.BindValue,
		}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{trainer}},
	}
}

// restrictedContext is a trainer securityContext Pod Security's restricted
// level accepts (the stand-in image runs as 65532).
func restrictedContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		RunAsNonRoot:             ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// enforceRestricted labels namespace ns to enforce Pod Security's
// restricted level.
func enforceRestricted(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	nsObj := &corev1.Namespace{}
	if err := suite.c.Client.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if err := suite.c.Client.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
}

func hasContainer(list []corev1.Container, name string) bool {
	for _, c := range list {
		if c.Name == name {
			return true
		}
	}
	return false
}

// procStatus parses /proc/<pid>/status into key → value.
func procStatus(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// rootMountOptions returns the mount options of "/" in a mountinfo.
func rootMountOptions(mountinfo string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			return f[5]
		}
	}
	return ""
}
