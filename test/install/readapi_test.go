package install

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestReadAPIAsTenant: the read API through the API server, as a tenant
// with only its namespace's RBAC (a ServiceAccount of team A bound to the
// shipped ClusterRole tether-artifact-reader there) and nothing but a
// kubeconfig, from the host: `kubectl tether artifacts get` reads every
// file of team A's finished job, byte for byte what the trainer wrote (the
// store's own files on its volume); team B's job, in another namespace, is
// refused by the API server, through the plugin and by a raw request of the
// read API's path; and a request to a control-plane replica itself, with
// headers that name an administrator but without the API server's
// front-proxy certificate, is refused: the control plane trusts only the
// API server's front proxy.
func TestReadAPIAsTenant(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestReadAPIAsTenant: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	in := cluster.Installed
	if !in.ReadAPI {
		t.Fatal("the installed control plane has no read API: the harness installs it with readAPI.enabled=true")
	}
	plan := localcluster.TrainerPlan{Steps: 4, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond}
	const name = "reads"
	jobA := createBoundJob(t, "reads-team-a", name, plan)
	createBoundJob(t, "reads-team-b", name, plan)
	plugin := filepath.Join(t.TempDir(), "kubectl-tether")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-tether")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	for _, ns := range []string{"reads-team-a", "reads-team-b"} {
		waitBinding(t, ns, name, 180*time.Second, "Succeeded with a verified manifest", func(wb *tetherv1.WorkerBinding) error {
			if wb.Status.Phase != tetherv1.PhaseSucceeded || wb.Status.Artifacts == nil || !wb.Status.Artifacts.ManifestVerified {
				return fmt.Errorf("phase %s/%s, artifacts %+v", wb.Status.Phase, wb.Status.Reason, wb.Status.Artifacts)
			}
			return nil
		})
	}

	// Team A's reader: a ServiceAccount, the shipped ClusterRole bound in
	// its namespace only, and a kubeconfig with its token.
	ns := "reads-team-a"
	token := createAndToken(t, ns, "reader",
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tether-artifact-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns}}})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}
	kc.AuthInfos["reader"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["reader"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "reader", Namespace: ns}
	kc.CurrentContext = "reader"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(plugin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		// Nothing but the kubeconfig: no --tether-url from the environment.
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// Every file of team A's job, through the API server, equals the
	// store's own bytes.
	out, err := run("artifacts", "ls", name, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl tether artifacts ls as team A's reader: %v\n%s", err, out)
	}
	var listed []struct {
		Path     string `json:"path"`
		Verified bool   `json:"verified"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("artifacts ls -o json: %v\n%s", err, out)
	}
	onDisk := storeFiles(t, filepath.Join(in.StoreDir, localcluster.StoreBucket, jobA))
	if len(listed) == 0 || len(listed) != len(onDisk) {
		t.Fatalf("listed %d artifacts through the read API, the store holds %d: %s", len(listed), len(onDisk), out)
	}
	dir := t.TempDir()
	for i, a := range listed {
		dest := filepath.Join(dir, fmt.Sprint(i))
		if out, err := run("artifacts", "get", name, a.Path, "-O", dest); err != nil {
			t.Errorf("kubectl tether artifacts get %s: %v\n%s", a.Path, err, out)
			continue
		}
		b, err := os.ReadFile(dest)
		if err != nil {
			t.Fatal(err)
		}
		sum := md5.Sum(b)
		if !a.Verified || hex.EncodeToString(sum[:]) != onDisk[a.Path] {
			t.Errorf("%s read through the API server: MD5 %x (verified %v), the store holds %s", a.Path, sum, a.Verified, onDisk[a.Path])
		}
	}
	logf("team A's reader read %d files of its job through the API server's read API, byte for byte the store's", len(listed))

	// Team B's job: refused by the API server, through the plugin and at
	// the read API's own path.
	if out, err := run("-n", "reads-team-b", "artifacts", "get", name, "manifest.json", "-O", "-"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("team A's reader getting team B's manifest through the plugin: %v\n%s\nwant a refusal (forbidden)", err, out)
	}
	cfg := &rest.Config{Host: cluster.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData}}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"reads-team-b/workerbindings/" + name + "/objects/manifest.json", "reads-team-b/workerbindings/" + name + "/objects/.tether/logs/x.log"} {
		resp, err := hc.Get(cluster.Config.Host + tetherv1.ReadAPIPathPrefix + target)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `cannot get resource \"workerbindings/objects\" in API group \"artifacts.tether.dev\"`) {
			t.Errorf("GET %s as team A's reader: %s %s, want 403 from the API server for workerbindings/objects", target, resp.Status, body)
		}
	}

	// The control plane itself, bypassing the API server: headers naming
	// an administrator, no front-proxy certificate (the host routes to pod
	// IPs; the webhook port is where the APIService points).
	ips, err := in.ReadyEndpoints(ctx)
	if err != nil || len(ips) == 0 {
		t.Fatalf("no ready endpoint of the control plane (%v)", err)
	}
	forged, _ := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(ips[0], "9443")+tetherv1.ReadAPIPathPrefix+"reads-team-b/workerbindings/"+name+"/objects/manifest.json", nil)
	forged.Header.Set("X-Remote-User", "system:admin")
	forged.Header.Set("X-Remote-Group", "system:masters")
	direct := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the attacker does not care who answers
	resp, err := direct.Do(forged)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "not_proxied") {
		t.Errorf("forged front-proxy headers straight to a replica: %s %s, want 401 not_proxied", resp.Status, body)
	}
}

// TestReadAPIOutageDelaysNamespaceDeletion is why the read API is opt-in
// (docs/platform.md, "The read API and outages"): with every control-plane
// replica gone, the APIService is unavailable and a namespace that has
// nothing to do with Tether is not finished deleting (the namespace
// controller's discovery of artifacts.tether.dev fails); once a replica is
// back, it is deleted without anyone's help.
func TestReadAPIOutageDelaysNamespaceDeletion(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestReadAPIOutageDelaysNamespaceDeletion: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	in := cluster.Installed
	c := cluster.Client
	scale := func(n int32) {
		t.Helper()
		d := &appsv1.Deployment{}
		if err := c.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: localcluster.ControlPlaneService}, d); err != nil {
			t.Fatal(err)
		}
		d.Spec.Replicas = &n
		if err := c.Update(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	restored := false
	defer func() {
		if !restored {
			scale(2)
		}
	}()
	eventually(t, 120*time.Second, "the APIService unavailable with no replica", func() error {
		if ok, err := in.ReadAPIAvailable(ctx); err != nil || ok {
			return fmt.Errorf("available %v (%v)", ok, err)
		}
		return nil
	})
	down := time.Now()
	bystander := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bystander"}}
	if err := c.Create(ctx, bystander); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "bystander"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, bystander); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the bystander namespace held in Terminating by the discovery failure", func() error {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, crclient.ObjectKeyFromObject(bystander), ns); err != nil {
			return err
		}
		for _, cond := range ns.Status.Conditions {
			if cond.Type == corev1.NamespaceDeletionDiscoveryFailure && cond.Status == corev1.ConditionTrue {
				if !strings.Contains(cond.Message, tetherv1.ReadAPIGroup) {
					return fmt.Errorf("discovery failure not about %s: %s", tetherv1.ReadAPIGroup, cond.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %+v", ns.Status.Phase, ns.Status.Conditions)
	})
	held := time.Since(down)
	scale(2)
	restored = true
	back := time.Now()
	eventually(t, 240*time.Second, "the bystander namespace deleted once the read API is back", func() error {
		err := c.Get(ctx, crclient.ObjectKeyFromObject(bystander), &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	gone := time.Since(back)
	eventually(t, 180*time.Second, "both replicas Ready and the APIService Available again", func() error {
		ips, err := in.ReadyEndpoints(ctx)
		if err != nil || len(ips) != 2 {
			return fmt.Errorf("ready endpoints %v (%v)", ips, err)
		}
		if ok, err := in.ReadAPIAvailable(ctx); err != nil || !ok {
			return fmt.Errorf("APIService available %v (%v)", ok, err)
		}
		return nil
	})
	logf("no replica: a bystander namespace held in Terminating (NamespaceDeletionDiscoveryFailure) %.1fs after the APIService went unavailable; deleted %.1fs after scaling back to 2",
		held.Seconds(), gone.Seconds())
}
