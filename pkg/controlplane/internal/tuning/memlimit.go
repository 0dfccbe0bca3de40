package tuning

import (
	"context"
	"log/slog"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// MemoryLimitRatio is the share of the container's memory limit the Go
// runtime is given as its soft limit (GOMEMLIMIT): the rest is headroom for
// what the Go runtime does not count (thread stacks outside the heap's
// accounting, the kernel's page cache charged to the container) so that the
// collector works harder before the kernel's OOM killer acts.
const MemoryLimitRatio = 0.9

// memoryLimitRefresh is how often the container's limit is read again, so an
// in-place resize of limits.memory is followed without a restart.
const memoryLimitRefresh = 30 * time.Second

// GoMemoryLimit sets the Go runtime's soft memory limit to MemoryLimitRatio
// of the container's memory limit (its cgroup's memory.max) and keeps it
// following that limit until ctx ends; without a limit the runtime keeps
// none. An explicit GOMEMLIMIT wins, and AUTOMEMLIMIT=off (or a ratio) is
// honoured: github.com/KimMachineGun/automemlimit's own switches. It returns
// the limit set (math.MaxInt64: none).
func GoMemoryLimit(ctx context.Context, log logr.Logger) int64 {
	return followMemoryLimit(ctx, log, memlimit.FromCgroup, memoryLimitRefresh)
}

func followMemoryLimit(ctx context.Context, log logr.Logger, limit memlimit.Provider, refresh time.Duration) int64 {
	set, _ := memlimit.Set( // an error is logged by memlimit, and the runtime keeps its limit
		memlimit.WithRatio(MemoryLimitRatio),
		memlimit.WithProvider(limit),
		memlimit.WithRefreshInterval(ctx, refresh),
		memlimit.WithLogger(slog.New(logr.ToSlogHandler(log.WithName("memlimit")))),
	)
	return set
}
