package endpoint

import (
	"fmt"
	"net/http"
	"strings"
)

// A PUT is authorized before its body arrives, and a body may take minutes:
// the job's artifacts may become final (every manifest verified, being
// promoted, or the binding ended) meanwhile. recheck asks the Authorizer
// again before the body's last bytes reach the backend (an empty body: after
// it is stored; a direct upload: after its copy), so a write that ends after
// that point is never kept.

// notWritable is the refusal of a write to a job whose artifacts are final.
func notWritable(job Job) *apiError {
	state := job.State
	if state == "" {
		state = "finished"
	}
	// Only a job whose manifests were all verified (Succeeded, or being
	// promoted) has verified artifacts; a failed one's are final too, but
	// not verified.
	what := "the job's artifacts are verified and final and can no longer change"
	if strings.HasPrefix(state, "Failed") || state == "finished" {
		what = "the binding has ended and the job's artifacts can no longer change"
	}
	return &apiError{http.StatusForbidden, "AccessDenied",
		fmt.Sprintf("binding %s/%s is %s: %s; nothing was stored (write artifacts before the trainer exits)",
			job.Namespace, job.Name, state, what)}
}

// recheck authorizes the request's token again for job: nil if the job may
// still be written.
func (h *Handler) recheck(rq *request, job Job) *apiError {
	if rq.token == "" {
		return nil
	}
	now, err := h.Authorize(rq.r.Context(), rq.token)
	if err != nil {
		return authError(rq, err)
	}
	switch {
	case now.JobID != job.JobID:
		return &apiError{http.StatusForbidden, "AccessDenied", "the token no longer belongs to job " + job.JobID}
	case !now.Writable:
		return notWritable(now)
	}
	return nil
}
