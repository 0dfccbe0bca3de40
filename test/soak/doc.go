// Package soak is `make soak` (issue 29): a seeded run of many TrainJobs of
// mixed shapes (single- and 4-node, large checkpoints, many small files,
// cancelled, unlabeled alongside) on the local cluster's kwok nodes with
// two control-plane replicas and versitygw, under a nemesis that injects
// faults singly and overlapping (a replica SIGKILLed or SIGSTOPped past its
// Lease, the store answering 503, the binding network black-holed, the
// API server or etcd restarted, a trainer pod deleted), heals them, waits
// for every job's end, and checks the run offline with soakcheck. SEED,
// DURATION and JOBS set the run; the seed and every fault are printed.
package soak
