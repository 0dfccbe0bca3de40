package workerbinding

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/upload"
)

// A job with required outputs is checked against the paths its final
// verified manifest lists, read from the store (files on disk here), before
// anything is promoted: a job that lacks one fails and its pending uploads
// never replace the final objects; one that has them is promoted and
// succeeds.
func TestRequiredOutputsCheckedBeforePromotion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		require    []string
		wantPhase  tetherv1.WorkerBindingPhase
		wantReason string
		messageHas string
		promoted   bool
	}{
		{"every required output listed", []string{"model/*.safetensors", "config.json"},
			tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded, "", true},
		{"a required output missing", []string{"model/*.safetensors", "tokenizer.json"},
			tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing, `"tokenizer.json" matched no verified file (closest verified: config.json`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			backend, err := fsstore.NewFSBackend(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			put := func(key string, body []byte) {
				t.Helper()
				if _, err := backend.Put(ctx, key, bytes.NewReader(body), int64(len(body))); err != nil {
					t.Fatal(err)
				}
			}
			// The model was stored before; the final run's version waits
			// under its pending key until promoted.
			files := map[string][]byte{"model/model.safetensors": []byte("final weights"), "config.json": []byte(`{"layers":2}`)}
			put("job-1/model/model.safetensors", []byte("earlier weights"))
			put(objects.PendingKey("job-1/model/model.safetensors"), files["model/model.safetensors"])
			put("job-1/config.json", files["config.json"])
			m := upload.Manifest{Version: upload.ManifestVersion, JobID: "job-1", PodUID: "a"}
			for _, p := range []string{"model/model.safetensors", "config.json"} {
				sum := md5.Sum(files[p])
				m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: int64(len(files[p])), MD5: hex.EncodeToString(sum[:])})
			}
			buf, _ := json.Marshal(m)
			put("job-1/manifest.json", buf)

			st := store.New(backend, store.Options{})
			wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
			wb.Spec.JobID = "job-1"
			wb.Spec.Settings = lifecycle.RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node",
				Nodes: jobconfig.NodesAll, Require: tc.require})
			lifecycle.Initial(&wb.Status)
			r := &Reconciler{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second,
				Live: jobSetReader{nodes: 1}, Pending: st, Paths: st}
			register(&wb.Status, at(1))
			lifecycle.ArtifactsRecorded(&wb.Status, 0, "a", tetherv1.NodeArtifacts{Manifest: "job-1/manifest.json", ManifestSHA256: verify.ManifestDigest(buf),
				Verified: true, Files: 2})
			pods := []corev1.Pod{*pod(0, "a").Exited(0, at(19)).Obj()}

			r.decideRequeue(ctx, trainJob(complete(21)), wb, pods, at(22))
			if wb.Status.Phase != tc.wantPhase || wb.Status.Reason != tc.wantReason || !strings.Contains(wb.Status.Message, tc.messageHas) {
				t.Fatalf("%s/%s (%s), want %s/%s with %q", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, tc.wantPhase, tc.wantReason, tc.messageHas)
			}
			info, err := backend.Head(ctx, "job-1/model/model.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			if promoted := info.Size == int64(len(files["model/model.safetensors"])); promoted != tc.promoted {
				t.Errorf("final model.safetensors holds %d bytes: promoted %v, want %v", info.Size, promoted, tc.promoted)
			}
		})
	}
}
