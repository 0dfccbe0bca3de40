package mutate

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/tether-dev/tether/pkg/jobconfig"
)

// TrainJobMutator decides which identity annotations a bound TrainJob gets.
type TrainJobMutator struct {
	// NewID returns a fresh id; nil means a random UUID. Tests make it deterministic.
	NewID func() string
}

// Stamp returns the annotations to add to a TrainJob at CREATE (old == nil) or
// UPDATE, given its current annotations and, for UPDATE, the stored ones. It
// returns an error naming the bad annotation when the object must be denied.
//
// Stamp is idempotent: on its own output it returns nothing to add.
func (m TrainJobMutator) Stamp(labels, annotations, oldAnnotations map[string]string, isUpdate bool) (map[string]string, error) {
	if !jobconfig.IsBound(labels) {
		return nil, nil
	}
	if _, err := jobconfig.Parse(annotations); err != nil {
		return nil, err
	}
	add := map[string]string{}
	for _, key := range []string{jobconfig.JobIDAnnotation, jobconfig.WorkerIDAnnotation} {
		cur, has := annotations[key]
		prev, had := oldAnnotations[key]
		switch {
		case isUpdate && had && has && cur != prev:
			// The id names the job's artifacts and its binding; changing it
			// would orphan both.
			return nil, fmt.Errorf("annotation %s is immutable once set: it is %q and cannot become %q; "+
				"to bind under another id, create a new TrainJob", key, prev, cur)
		case isUpdate && had && !has:
			// A replace that dropped the annotation: put it back rather than
			// silently re-identify the job.
			add[key] = prev
		case !has:
			add[key] = m.newID()
		}
	}
	return add, nil
}

func (m TrainJobMutator) newID() string {
	if m.NewID != nil {
		return m.NewID()
	}
	return uuid.NewString()
}
