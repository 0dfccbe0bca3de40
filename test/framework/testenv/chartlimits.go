package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// ChartMemoryLimit is the control plane's resources.limits.memory in
// charts/tether/values.yaml, in bytes: what tests and benchmarks hold the
// replica's memory to.
func ChartMemoryLimit() (int64, error) {
	path := filepath.Join(RepoRoot(), "charts", "tether", "values.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var v struct {
		Resources struct {
			Limits struct {
				Memory string `json:"memory"`
			} `json:"limits"`
		} `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	q, err := resource.ParseQuantity(v.Resources.Limits.Memory)
	if err != nil {
		return 0, fmt.Errorf("%s resources.limits.memory %q: %w", path, v.Resources.Limits.Memory, err)
	}
	return q.Value(), nil
}
