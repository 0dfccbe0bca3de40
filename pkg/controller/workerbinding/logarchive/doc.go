// Package logarchive copies an ended trainer's log from the kubelet into
// the artifact store, next to the job's artifacts, and records its key on
// the binding's status.
package logarchive
