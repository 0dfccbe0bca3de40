// Package statuspatch builds the merge patches the controllers that write one
// field of a WorkerBinding's status send, with the outcome conditions kept in
// line with the phase as on every other status write.
package statuspatch
