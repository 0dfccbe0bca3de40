package jobconfig_test

import (
	"fmt"

	"github.com/tether-dev/tether/pkg/jobconfig"
)

func ExampleParse() {
	// The annotations of a bound TrainJob: unset settings take their defaults.
	s, err := jobconfig.Parse(map[string]string{
		"tether.dev/job-id":             "llama-finetune-0042",
		"tether.dev/include":            "checkpoints/**, *.safetensors",
		"tether.dev/heartbeat-interval": "30s",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("artifact path:", s.ArtifactPath)
	fmt.Println("include:", s.Include)
	fmt.Println("exclude:", s.Exclude)
	fmt.Println("heartbeat:", s.HeartbeatInterval)
	fmt.Println("trainer container:", s.TrainerContainer)
	fmt.Printf("sidecar image override: %q\n", s.SidecarImage)

	// Every invalid annotation is reported, with an example of a good value.
	_, err = jobconfig.Parse(map[string]string{
		"tether.dev/artifact-path":      "artifacts",
		"tether.dev/heartbeat-interval": "soon",
	})
	fmt.Println(err)
	// Output:
	// artifact path: /workspace/artifacts
	// include: [checkpoints/** *.safetensors]
	// exclude: []
	// heartbeat: 30s
	// trainer container: node
	// sidecar image override: ""
	// annotation tether.dev/artifact-path="artifacts" is invalid: must be an absolute path (example: tether.dev/artifact-path: "/workspace/artifacts")
	// annotation tether.dev/heartbeat-interval="soon" is invalid: not a duration (example: tether.dev/heartbeat-interval: "10s")
}
