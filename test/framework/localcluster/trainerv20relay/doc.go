// Command trainerv20relay runs Kubeflow Trainer v2.0.0's controller
// manager inside new network and mount namespaces and relays its two
// connections across them (see test/framework/localcluster/trainer_v20.go, whose
// StartTrainerV20 builds this command and starts it with CLONE_NEWNET and
// CLONE_NEWNS). It brings loopback up, listens on -api-listen (TCP, where
// the manager's kubeconfig points) and relays it to -api-socket, listens on
// -webhook-socket and relays it to -webhook-target (the manager's webhook
// port), bind-mounts -private-tmp over /tmp, starts the manager (the
// arguments after the flags), and reports "ready <manager pid>" or "error
// <message>" on file descriptor 3. On SIGTERM it stops the manager (SIGKILL
// after 5s); it exits when the manager does.
//
// A command of its own, not a re-execution of the harness's binary: nothing
// that links test/framework/localcluster (cmd/tether-demo, the e2e tests) runs
// code from an init that exits the process.
package main
