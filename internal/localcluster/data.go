package localcluster

import _ "embed"

var (
	//go:embed data/kwok-stages.yaml
	kwokStages []byte
	//go:embed data/runtime.yaml
	clusterTrainingRuntime []byte
	//go:embed data/kueue-queues.yaml
	kueueQueues []byte
	//go:embed data/local-queue.yaml
	localQueue string
	//go:embed data/real-node-queues.yaml
	realNodeQueues []byte
)

// RuntimeName is the ClusterTrainingRuntime every cluster has.
const RuntimeName = "tether-e2e"
