package localcluster

import _ "embed"

var (
	//go:embed data/kwok-stages.yaml
	kwokStages []byte
	//go:embed data/runtime.yaml
	clusterTrainingRuntime []byte
	//go:embed data/declared-sidecar-runtime.yaml
	declaredSidecarRuntime []byte
	//go:embed data/kueue-queues.yaml
	kueueQueues []byte
	//go:embed data/local-queue.yaml
	localQueue string
	//go:embed data/real-node-queues.yaml
	realNodeQueues []byte
)

// The ClusterTrainingRuntimes every cluster has (data/runtime.yaml; on
// Trainer v2.3, also data/declared-sidecar-runtime.yaml).
const (
	// RuntimeName runs the trainer with Trainer's and JobSet's defaults
	// (restartPolicy OnFailure) but backoffLimit 0: one attempt per admission.
	RuntimeName = "tether-e2e"
	// RuntimeNever has restartPolicy Never and backoffLimit 2: each failure
	// is a new pod of the same completion index.
	RuntimeNever = "tether-e2e-never"
	// RuntimeJobSetRestart restarts the whole JobSet once on a failed Job
	// (failurePolicy maxRestarts 1).
	RuntimeJobSetRestart = "tether-e2e-jobset-restart"
	// RuntimeDeclaredSidecar declares Tether's sidecar with its resources
	// (Kueue mode), so Kueue counts it.
	RuntimeDeclaredSidecar = "tether-e2e-declared-sidecar"
)
