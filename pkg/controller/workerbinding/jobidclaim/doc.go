// Package jobidclaim claims a job id for good for the TrainJob that binds it
// first: one Lease per id in the control plane's namespace.
package jobidclaim
