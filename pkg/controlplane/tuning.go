package controlplane

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/pkg/controlplane/internal/tuning"
)

// The process tuning that the control plane's callers apply themselves
// (cmd/tether-control-plane, the test environment, the benchmarks), from
// internal/tuning, which documents each.

// MemoryLimitRatio is the share of the container's memory limit the Go
// runtime is given as its soft limit (tuning.MemoryLimitRatio).
const MemoryLimitRatio = tuning.MemoryLimitRatio

// GoMemoryLimit sets the Go runtime's soft memory limit from the
// container's and keeps it following that limit until ctx ends
// (tuning.GoMemoryLimit); it returns the limit set.
func GoMemoryLimit(ctx context.Context, log logr.Logger) int64 {
	return tuning.GoMemoryLimit(ctx, log)
}

// LazyValues returns l with values kept until a line is written
// (tuning.LazyValues).
func LazyValues(l logr.Logger) logr.Logger { return tuning.LazyValues(l) }

// ClientSettings returns a copy of cfg with the client settings the control
// plane runs with (tuning.ClientSettings).
func ClientSettings(cfg *rest.Config) *rest.Config { return tuning.ClientSettings(cfg) }
