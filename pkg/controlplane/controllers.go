package controlplane

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/controller/artifactsettle"
	"github.com/tether-dev/tether/pkg/controller/orphan"
	"github.com/tether-dev/tether/pkg/controller/trainerstatus"
	"github.com/tether-dev/tether/pkg/controller/uploadsweep"
	"github.com/tether-dev/tether/pkg/controller/workerbinding"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/logarchive"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/replicaleases"
	"github.com/tether-dev/tether/pkg/mutate"
)

// injectionReporter records, on the TrainJob, each trainer pod created with
// the sidecar (mutate.InjectionReporter).
func (a *assembly) injectionReporter() error {
	return a.mgr.Add(&mutate.InjectionReporter{Cache: a.mgr.GetCache(), TrainJobs: a.mgr.GetClient(), Recorder: a.recorder})
}

// bindingController runs the binding controller, which binds TrainJobs,
// keeps their bindings' phases, promotes their verified artifacts and
// archives their trainer logs, and the controller that drops a final
// binding's leftover pending artifacts.
func (a *assembly) bindingController() error {
	opts, mgr := a.opts, a.mgr
	logSource := opts.LogSource
	if logSource == nil {
		logSource = logarchive.KubeletLogs(a.clientset)
	}
	if err := (&workerbinding.Reconciler{
		Client:   mgr.GetClient(),
		Secrets:  mgr.GetAPIReader(),
		Live:     mgr.GetAPIReader(),
		Scheme:   a.scheme,
		CABundle: lastGoodFile(opts.caBundleFile()),
		Events:   a.recorder,

		StatusInterval:   opts.StatusInterval,
		MissedHeartbeats: opts.MissedHeartbeats,
		Leases: &replicaleases.ReplicaLeases{Client: mgr.GetClient(), Namespace: opts.Namespace,
			Selector: client.MatchingLabels{names.ReplicaLeaseLabel: "true"}, Self: a.replica},
		ArtifactGrace: opts.ArtifactGrace,
		TokenOverlap:  opts.TokenOverlap,
		Pending:       a.artifactStore,
		Manifests:     a.artifactStore,
		Paths:         a.artifactStore,
		Logs:          &logarchive.LogArchiver{Source: logSource, Store: a.backend, MaxBytes: opts.LogCapBytes},
		Claims:        &jobidclaim.JobIDClaims{Namespace: opts.Namespace, Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()},
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the binding controller: %w", err)
	}
	// A final binding's leftover pending artifacts, dropped once the
	// binding controller wrote the final phase.
	if err := (&artifactsettle.Reconciler{Client: mgr.GetClient(), Pending: a.artifactStore, Manifests: a.artifactStore}).
		SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the artifact settlement controller: %w", err)
	}
	return nil
}

// orphanController finalizes bindings whose TrainJob is gone.
func (a *assembly) orphanController() error {
	if err := (&orphan.Reconciler{Client: a.mgr.GetClient(), Live: a.mgr.GetAPIReader(), Events: a.recorder, Pending: a.artifactStore}).
		SetupWithManager(a.mgr); err != nil {
		return fmt.Errorf("setting up the orphaned-binding controller: %w", err)
	}
	return nil
}

// uploadSweeper removes what presigned direct-upload URLs write after their
// binding ended and aborts the job's open multipart uploads
// (UploadSweeper); nothing with a store that neither presigns nor stores
// in parts.
func (a *assembly) uploadSweeper() error {
	if a.artifactStore == nil {
		return nil
	}
	if err := (&uploadsweep.UploadSweeper{Client: a.mgr.GetClient(), Uploads: a.artifactStore, Margin: a.opts.UploadSweepMargin}).
		SetupWithManager(a.mgr); err != nil {
		return fmt.Errorf("setting up the upload sweeper: %w", err)
	}
	return nil
}

// trainerStatus puts a bound job's progress in TrainJob.status.trainerStatus
// and the trainer's own report on the binding (trainerstatus.Reconciler).
func (a *assembly) trainerStatus() error {
	if err := (&trainerstatus.Reconciler{Client: a.mgr.GetClient(), Live: a.mgr.GetAPIReader(), Off: a.opts.TrainerStatus == "off"}).
		SetupWithManager(a.mgr); err != nil {
		return fmt.Errorf("setting up the trainer-status controller: %w", err)
	}
	return nil
}
