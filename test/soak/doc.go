// Package soak is `make soak`: a seeded run of many TrainJobs of
// mixed shapes (single- and 4-node, large checkpoints, many small files,
// cancelled, unlabeled alongside) on the local cluster's kwok nodes and,
// with REAL_NODES=1, its two real nodes (Trainer's torch-distributed
// runtime as shipped, a real kubelet and containerd), with two
// control-plane replicas and versitygw, under a nemesis that injects
// faults singly and overlapping (a replica SIGKILLed or SIGSTOPped past its
// Lease, the store answering 503 or stalling mid-body, the binding network
// black-holed, the API server or etcd restarted, a trainer pod deleted, a
// sidecar SIGKILLed, Kueue preempting, a real node killed and powered on
// again), heals them, waits for every job's end, and checks the run
// offline with soakcheck. SEED, DURATION, JOBS and REAL_NODES set the run;
// the seed and every fault are printed.
package soak
