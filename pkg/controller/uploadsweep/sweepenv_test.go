package uploadsweep_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/controller/internal/keys"
	"github.com/tether-dev/tether/pkg/controller/internal/storeops"
	"github.com/tether-dev/tether/pkg/controller/uploadsweep"
	"github.com/tether-dev/tether/test/framework/s3server"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// The sweeper on a real API server (envtest, the WorkerBinding CRD as
// shipped) and a real versitygw, whose multipart uploads the s3 backend
// makes. The binding controller does not run: the tests write the phases
// it would.

const (
	s3Access = "tether-sweep-access"
	s3Secret = "tether-sweep-secret-0123456789"
	// margin is the sweeper's: the last sweep comes this long after the
	// end (the presigned URLs' TTL added where the store presigns).
	margin = 2 * time.Second
)

// proxiedOnly is a store that presigns nothing (as the fs backend): its
// bodies all go through the endpoint, the large ones in parts.
type proxiedOnly struct{ *store.Store }

func (proxiedOnly) DirectTTL() time.Duration { return 0 }

// namespace holds the tests' bindings.
const namespace = "sweep"

// sweepEnv is a sweeper's world: the API server and the store's backend.
type sweepEnv struct {
	cfg *rest.Config
	c   client.Client
	b   *s3store.S3Backend
}

// newSweepEnv starts versitygw (a bucket whose keys the backend prefixes
// with "tether/") and kube-apiserver with etcd.
func newSweepEnv(t *testing.T) *sweepEnv {
	t.Helper()
	ctx := context.Background()
	assets, err := testenv.Assets()
	if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, err := s3server.Start(ctx, s3server.Options{Dir: t.TempDir(), AccessKey: s3Access, SecretKey: s3Secret})
	if errors.Is(err, s3server.ErrNoBinary) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := srv.MakeBucket(ctx, "artifacts", false); err != nil {
		t.Fatal(err)
	}
	s3b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: srv.Endpoint, AccessKey: s3Access, SecretKey: s3Secret,
		Region: "us-east-1", Bucket: "artifacts", Prefix: "tether/"})
	if err != nil {
		t.Fatal(err)
	}
	b := s3b

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, tetherv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, Scheme: scheme, ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths: []string{filepath.Join(testenv.RepoRoot(), "manifests", "base", "crd")}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	return &sweepEnv{cfg: cfg, c: c, b: b}
}

// runSweeper runs uploads' sweeper on a manager of its own, as the elected
// replica, until the test ends.
func (e *sweepEnv) runSweeper(t *testing.T, uploads storeops.DirectUploads) {
	t.Helper()
	// Each subtest's manager registers the controller anew.
	mgr, err := ctrl.NewManager(e.cfg, ctrl.Options{Scheme: e.c.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &tetherv1.WorkerBinding{}, keys.JobIDIndex, keys.IndexJobID); err != nil {
		t.Fatal(err)
	}
	if err := (&uploadsweep.UploadSweeper{Client: mgr.GetClient(), Uploads: uploads, Margin: margin}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
	})
}

// binding creates WorkerBinding name for job jobID in phase.
func (e *sweepEnv) binding(t *testing.T, name, jobID string, phase tetherv1.WorkerBindingPhase) *tetherv1.WorkerBinding {
	t.Helper()
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: tetherv1.WorkerBindingSpec{TrainJobName: name, JobID: jobID, WorkerID: jobID, TokenSecretName: name + "-token",
			TokenSHA256: strings.Repeat("ab", 32)}}
	if err := e.c.Create(context.Background(), wb); err != nil {
		t.Fatal(err)
	}
	e.setPhase(t, wb, phase, nil)
	return wb
}

// setPhase writes the binding's phase as the binding controller would,
// and du as the sweeper would have (nil: leaves it).
func (e *sweepEnv) setPhase(t *testing.T, wb *tetherv1.WorkerBinding, phase tetherv1.WorkerBindingPhase, du *tetherv1.DirectUploadsStatus) {
	t.Helper()
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(wb), wb); err != nil {
		t.Fatal(err)
	}
	wb.Status.Phase = phase
	if du != nil {
		wb.Status.DirectUploads = du
	}
	if err := e.c.Status().Update(context.Background(), wb); err != nil {
		t.Fatal(err)
	}
}

// directUploads is the binding's recorded sweep.
func (e *sweepEnv) directUploads(t *testing.T, wb *tetherv1.WorkerBinding) *tetherv1.DirectUploadsStatus {
	t.Helper()
	got := &tetherv1.WorkerBinding{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}, got); err != nil {
		t.Fatal(err)
	}
	return got.Status.DirectUploads
}

// upload starts an upload to key with one part stored and, if recorded,
// writes the endpoint's state record of it; it returns the upload's
// "key id".
func (e *sweepEnv) upload(t *testing.T, jobID, key string, recorded bool) string {
	t.Helper()
	ctx := context.Background()
	id, err := e.b.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.PutPart(ctx, key, id, 1, strings.NewReader("a billed part"), 13); err != nil {
		t.Fatal(err)
	}
	if recorded {
		st := &objects.MultipartState{Key: key, Target: key, UploadID: id, Size: 6 << 30, PartSize: 64 << 20,
			Parts: []objects.StatePart{{Number: 1, Size: 13}}, Created: time.Now()}
		if err := objects.WriteMultipartState(ctx, e.b, objects.MultipartStateKey(jobID, key), st); err != nil {
			t.Fatal(err)
		}
	}
	return key + " " + id
}

// open says which of uploads ("key id") the store still lists as open.
func (e *sweepEnv) open(t *testing.T, uploads ...string) []string {
	t.Helper()
	ups, err := e.b.ListMultipartUploads(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range ups {
		if slices.Contains(uploads, u.Key+" "+u.ID) {
			out = append(out, u.Key+" "+u.ID)
		}
	}
	return out
}

// awaitAborted waits until none of uploads is open.
func (e *sweepEnv) awaitAborted(t *testing.T, why string, uploads ...string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		if o := e.open(t, uploads...); len(o) > 0 {
			return fmt.Errorf("%s: still open %q", why, o)
		}
		return nil
	})
}

// records is the multipart state records of job jobID still stored.
func (e *sweepEnv) records(t *testing.T, jobID string) []string {
	t.Helper()
	keys, err := e.b.List(context.Background(), objects.MultipartStatePrefix(jobID))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
