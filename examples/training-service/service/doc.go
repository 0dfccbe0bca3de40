// Package service is an example training service built on pkg/client: it
// submits a Tether-bound TrainJob to a Kueue queue, follows it through
// admission and training, downloads its verified artifacts, and cancels a
// second job after a flush. main.go runs it; the e2e suite (scenario 14)
// runs it against the local cluster.
package service
