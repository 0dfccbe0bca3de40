package binding

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// counter reads one counter series from /metrics (0 when absent).
func counter(t *testing.T, series string) float64 {
	t.Helper()
	name := series[:strings.IndexAny(series+"{", "{")]
	for _, l := range metrics(t, name) {
		if strings.HasPrefix(l, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(l, series+" "), 64)
			return v
		}
	}
	return 0
}

func waitForEvent(t *testing.T, j *job, reason string) {
	t.Helper()
	eventually(t, 15*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(j.ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == j.name && e.Reason == reason {
				return nil
			}
		}
		return fmt.Errorf("no %s Event on TrainJob %s", reason, j.name)
	})
}
