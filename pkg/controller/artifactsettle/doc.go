// Package artifactsettle settles a final WorkerBinding's artifacts in the
// store: what still waits to be promoted is dropped (a failed job's outputs
// never replace good ones; a succeeded job's verified versions were
// promoted before it said Succeeded), and a verdict on a manifest whose
// versions were dropped is taken back.
package artifactsettle
