// Package orphan finalizes a WorkerBinding whose TrainJob is gone: the
// binding says Failed/TrainJobDeleted, its pending artifacts are dropped and
// its token Secret is deleted.
package orphan
