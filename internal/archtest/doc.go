// Package archtest holds no code: its tests check the module's shape (the
// rules in words: docs/architecture.md, "Import rules"). Imports run
// downward: the protocol packages import no half, nothing below the control
// plane's wiring imports the webhooks, the control plane does not compile
// against the sidecar's code, and the sidecar does not reach Kubernetes
// client code; the control plane's halves (controller, binding server, read
// endpoint, webhooks) import none of each other, and no package imports a
// folder above its own (layers_test.go); the controllers take the artifact
// store's owner, never its HTTP endpoint (store_test.go). Shipped binaries
// link no testing package and no init that exits the process
// (harness_test.go). No hand-written non-test file under pkg/, cmd/ or api/
// (sizes_test.go), nor under test/ (harness_test.go), passes 700 lines.
package archtest
