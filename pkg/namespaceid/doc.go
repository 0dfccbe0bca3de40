// Package namespaceid reads a namespace's identity: the UID and creation
// time the API server gave it. A namespace's name is not its identity: once
// a namespace is deleted, another may be created under the same name for
// another team. Every record Tether keeps for a namespace's jobs beyond
// their own objects (a scoped job id, a job-id claim, the artifacts under
// them in the shared bucket) is tied to the UID, so a later namespace of
// the same name inherits none of it.
package namespaceid
