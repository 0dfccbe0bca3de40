package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/plugin"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 9: a file past S3's 5 GiB single PUT, by the default
// path. The trainer (the stand-in image under the real kubelet) ends its
// run with a final model of 5 GiB and one part (5 GiB + 64 MiB: the
// control plane's default 64 MiB parts make it 81), real bytes (ChaCha8
// from a random seed: every part different, so a part stored in another's
// place fails the checksums), after a 2 MiB checkpoint, two 4 KiB files and
// its progress file. The real nodes' default setup is the s3 store
// (versitygw) with direct uploads on, the sidecars reaching the store: the
// checkpoint goes as one presigned PUT, the small files through the binding
// server, and the model, past the multipart threshold, straight to the
// store in parts: authorize creates the multipart upload and signs its
// parts, the sidecar streams the file to them, and a replica completes the
// upload once every part is the one the sidecar sent. The job ends Succeeded with the model
// in the verified manifest, stored in parts with the trainer's bytes (the
// MD5 the trainer computed, the store's CRC-64/NVME the manifest's); then
// kubectl tether artifacts get downloads it to disk, where it is hashed
// again (MD5 and CRC-64/NVME, streamed), and removed. The disk the file
// takes (node, store with its multipart staging, download) is sampled and
// logged.
//
// The model is still uploading when the trainer exits: the sidecar's final
// flush has the pod's terminationGracePeriodSeconds less 5s, so the job
// runs on Trainer's torch-distributed runtime copied into a TrainingRuntime
// of its namespace with 10 minutes of grace, as a platform whose jobs save
// large files at their end would ship it. (The same grace set by the
// TrainJob's runtime patch, Trainer v2.3, does not survive Kueue v0.17,
// whose TrainJob types, Trainer v2.2's, drop it on its update; JobSet then
// refuses the changed pod template.) The trainer requests memory only:
// Kueue admits it by a covered resource while the real nodes' queue, 2
// CPUs, still holds the other shared real-node jobs' eight quarter CPUs,
// so it runs beside them; with no CPU limit its 5 GiB are not written at a
// quarter core.
func TestRealNode9LargeFile(t *testing.T) {
	shared(t)
	needRealNode(t)
	timed(t)
	start := time.Now()
	ctx := context.Background()
	ns := suite.realNodeNamespace(t, "real-large")
	const name = "real-large-file"
	const largeRel = "model/final.safetensors"
	const largeBytes = upload.MaxSinglePutSize + upload.DefaultPartSize
	partSize := upload.PartSize(largeBytes, upload.DefaultPartSize)
	parts := int((largeBytes + partSize - 1) / partSize)
	plan := localcluster.TrainerPlan{Steps: 2, CheckpointEvery: 2, StepInterval: time.Second,
		CheckpointBytes: 2 << 20, ModelBytes: int(largeBytes), SmallFiles: 2}
	tj := bound(realTrainJob(name, ns, plan)).
		ResourcesPerNode(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}).Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: suite.torchRuntimeWithGrace(t, ns, 600), Kind: ptr.To(trainer.TrainingRuntimeKind)}
	before := suite.s3Traffic(t)
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	key := jobID + "/" + largeRel
	storePath := "/" + suite.tether.S3.Bucket + "/" + key
	// The store's copy of the model is removed when the test ends: 5 GiB
	// the scenarios after it need not keep.
	t.Cleanup(func() {
		_ = suite.tether.S3.Admin.RemoveObject(ctx, suite.tether.S3.Bucket, key, minio.RemoveObjectOptions{})
	})

	pod := suite.waitRunningOnRealNode(t, suite.injectedPod(t, ns, name, ""))
	if got := injectedEnv(pod, names.EnvFlushBudget); got != "9m55s" {
		t.Fatalf("the sidecar's flush budget is %q, want the runtime's 10 minutes of grace less 5s (9m55s)", got)
	}
	downloads := t.TempDir()
	disk := sampleDisk(suite.c.Dir, hostArtifactDir(t, pod), filepath.Join(suite.c.Dir, "s3-data"), downloads)
	defer func() { logf("real node 9: disk: %s", disk.end()) }()

	// Succeeded, the model in the verified manifest.
	wb := suite.waitBinding(t, ns, name, 10*time.Minute, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	succeeded := time.Since(start)
	a := wb.Status.Artifacts
	if a == nil || !a.ManifestVerified || ptr.Deref(wb.Status.TrainerExitCode, -1) != 0 {
		t.Fatalf("succeeded without a verified manifest or exit 0: artifacts %+v, exit code %v", a, wb.Status.TrainerExitCode)
	}
	pod = suite.waitPodSucceeded(t, pod)
	files := standinFiles(suite.podLog(t, pod, "node", false))
	trainerMD5 := files[largeRel]
	if trainerMD5 == "" || len(files) != 5 {
		t.Fatalf("trainer's file list %v: want the model and four more", files)
	}
	entry := manifestEntry(t, jobID, largeRel)
	if entry.Size != largeBytes || entry.MD5 != trainerMD5 || entry.CRC64NVME == "" {
		t.Fatalf("the manifest lists %+v, want %d bytes with the trainer's MD5 %s and a CRC-64/NVME", entry, int64(largeBytes), trainerMD5)
	}
	if int(a.Files) != len(files) || a.Bytes < largeBytes {
		t.Errorf("manifest lists %d files of %d bytes, the trainer left %d (%v)", a.Files, a.Bytes, len(files), files)
	}

	// Stored in parts, by the store's own checksum; every other file with
	// its MD5 as ETag.
	info, err := suite.tether.S3.Admin.StatObject(ctx, suite.tether.S3.Bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != largeBytes || info.ChecksumCRC64NVME != entry.CRC64NVME || !strings.HasSuffix(info.ETag, fmt.Sprintf("-%d", parts)) {
		t.Fatalf("stored %s: %d bytes, ETag %s, CRC-64/NVME %q; want %d bytes in %d parts with the manifest's %s",
			key, info.Size, info.ETag, info.ChecksumCRC64NVME, int64(largeBytes), parts, entry.CRC64NVME)
	}
	small, stored := map[string]string{}, storedETags(t, jobID)
	for rel, sum := range files {
		if rel != largeRel {
			small[rel] = sum
		}
	}
	delete(stored, largeRel)
	if err := sameAsStored(small, stored); err != nil {
		t.Fatalf("stored artifacts differ from the trainer's files: %v", err)
	}
	// The model in parts straight to the store; the 2 MiB checkpoint as a
	// direct upload (a presigned PUT, committed to its key).
	since := suite.s3Traffic(t).Since(before)
	traffic := since.ByPath[storePath]
	if traffic.Uploads < 1 || traffic.Parts < parts || traffic.Bytes < largeBytes {
		t.Fatalf("the store got %+v for %s: want a multipart upload of at least %d parts, %d bytes", traffic, key, parts, int64(largeBytes))
	}
	direct := false
	for _, pt := range since.ByPath {
		direct = direct || pt.CopiedTo == "/"+suite.tether.S3.Bucket+"/"+jobID+"/checkpoints/step-0002.pt"
	}
	if !direct {
		t.Errorf("checkpoints/step-0002.pt was not a direct upload (the real nodes' default path for files from 1 MiB): %+v", since.ByPath)
	}
	logf("real node 9: %s (%d bytes) stored in %d part PUTs of %d uploads (%d bytes re-sent), Succeeded %.1fs after the TrainJob was created",
		largeRel, int64(largeBytes), traffic.Parts, traffic.Uploads, traffic.Bytes-largeBytes, succeeded.Seconds())

	// kubectl tether artifacts get, then the file hashed again from disk.
	dest := filepath.Join(downloads, "final.safetensors")
	got := time.Now()
	pluginGet(t, ns, name, largeRel, dest)
	downloaded := time.Since(got)
	hashStart := time.Now()
	sum, crc, n := hashFile(t, dest)
	hashed := time.Since(hashStart)
	if err := os.Remove(dest); err != nil {
		t.Errorf("removing the download: %v", err)
	}
	if n != largeBytes || sum != trainerMD5 || crc != entry.CRC64NVME {
		t.Fatalf("downloaded %d bytes, MD5 %s, CRC-64/NVME %s; the manifest lists %d bytes, %s, %s", n, sum, crc, entry.Size, entry.MD5, entry.CRC64NVME)
	}
	logf("real node 9: kubectl tether artifacts get wrote %s in %.1fs, hashed again (MD5, CRC-64/NVME) in %.1fs; the scenario took %.1fs",
		largeRel, downloaded.Seconds(), hashed.Seconds(), time.Since(start).Seconds())
}

// manifestEntry is rel's entry in the job's (single-node) manifest, read
// from the store.
func manifestEntry(t *testing.T, jobID, rel string) upload.ManifestFile {
	t.Helper()
	raw, _, err := suite.tether.S3.Get(context.Background(), jobID+"/"+upload.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	var m upload.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("the manifest: %v", err)
	}
	for _, f := range m.Files {
		if f.Path == rel {
			return f
		}
	}
	t.Fatalf("the manifest does not list %s: %s", rel, raw)
	return upload.ManifestFile{}
}

// storedETags is stored without reading any object: each of the job's
// trainer files with its ETag, from the listing.
func storedETags(t *testing.T, jobID string) map[string]string {
	t.Helper()
	s3 := suite.tether.S3
	out := map[string]string{}
	for o := range s3.Admin.ListObjects(context.Background(), s3.Bucket, minio.ListObjectsOptions{Prefix: jobID + "/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if rel := strings.TrimPrefix(o.Key, jobID+"/"); !skipServerKeys(rel) {
			out[rel] = strings.Trim(o.ETag, `"`)
		}
	}
	return out
}

// pluginGet runs kubectl tether artifacts get NAME PATH -O dest as an
// orchestrator's ServiceAccount of ns.
func pluginGet(t *testing.T, ns, name, rel, dest string) {
	t.Helper()
	kubeconfig := writeKubeconfig(t, suite.orchestratorConfig(t, ns, "downloader", true))
	var o, e bytes.Buffer
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &o, ErrOut: &e})
	args := []string{"artifacts", "get", name, rel, "-O", dest}
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "-n", ns, "--tether-url", suite.tether.BindingURL(),
		"--tether-ca", writeFile(t, "ca.crt", suite.bindingCA(t))}, args...))
	err := cmd.ExecuteContext(context.Background())
	logf("$ kubectl tether %s\n%s%s(err: %v)", strings.Join(args, " "), o.String(), e.String(), err)
	if err != nil {
		t.Fatalf("kubectl tether %v: %v", args, err)
	}
}

// hashFile streams a file through MD5 and CRC-64/NVME.
func hashFile(t *testing.T, path string) (md5hex, crc string, n int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, c := md5.New(), upload.NewCRC64NVME()
	n, err = io.CopyBuffer(io.MultiWriter(h, c), f, make([]byte, 1<<20))
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), upload.EncodeChecksum(c.Sum(nil)), n
}

// torchRuntimeWithGrace copies Trainer's torch-distributed runtime as
// installed into a TrainingRuntime of ns whose trainer pods have grace
// seconds of termination grace, and returns its name.
func (e *env) torchRuntimeWithGrace(t *testing.T, ns string, grace int64) string {
	t.Helper()
	shipped := &trainer.ClusterTrainingRuntime{}
	if err := e.c.Client.Get(context.Background(), types.NamespacedName{Name: localcluster.TorchRuntime}, shipped); err != nil {
		t.Fatal(err)
	}
	rt := &trainer.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{Name: localcluster.TorchRuntime + "-long-grace", Namespace: ns, Labels: shipped.Labels},
		Spec: *shipped.Spec.DeepCopy()}
	found := false
	for i := range rt.Spec.Template.Spec.ReplicatedJobs {
		if rj := &rt.Spec.Template.Spec.ReplicatedJobs[i]; rj.Name == "node" {
			rj.Template.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
			found = true
		}
	}
	if !found {
		t.Fatalf("Trainer's %s runtime has no replicated job \"node\"", localcluster.TorchRuntime)
	}
	e.create(t, rt)
	return rt.Name
}
