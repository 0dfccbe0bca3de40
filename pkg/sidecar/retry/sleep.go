package retry

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever is first; it returns
// ctx.Err() in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
