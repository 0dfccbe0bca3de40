// Package logs is the integration suite for trainer log archiving: the
// controller copies a terminated trainer's log next to the job's artifacts.
package logs
