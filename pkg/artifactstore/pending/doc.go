// Package pending decides a job's pending objects when its binding ends
// (docs/artifacts.md). A PUT over an object with a different ETag is stored
// as <job-id>/.tether/pending/<path> (objects.PendingKey); a direct upload
// waits under upload.UploadsPrefix until it is committed. Store.Promote
// moves over the final keys exactly what the job's verified manifests list,
// after checking each manifest against the SHA-256 its verdict recorded;
// Store.DropPending drops them when the binding fails; Store.SweepUploads
// removes, page by page, direct uploads never committed and aborts the
// job's open multipart uploads; Store.AbortUnownedUploads aborts, at
// start-up, the uploads of jobs no live binding holds.
//
// Promotion takes the artifact store's per-key locks (objects.KeyLocks,
// held by store.Store), the ones the endpoint's PUTs take, so a PUT that
// chose its target before a promotion began finishes first.
package pending
