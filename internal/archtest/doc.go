// Package archtest holds no code: its test checks that imports in the module
// run downward (docs in README.md, "Layout"): the protocol packages import no
// half, nothing below the control plane's wiring imports the webhooks, the
// control plane does not compile against the sidecar's code, and the sidecar
// does not reach Kubernetes client code; the control plane's halves
// (controller, binding server, read endpoint, webhooks) import none of each
// other, and no package imports a folder above its own (layers_test.go,
// with today's exceptions in a list that may only shrink); the controllers
// take the artifact store's owner, never its HTTP endpoint (store_test.go);
// no hand-written file under pkg/, cmd/ or api/ passes 700 lines
// (sizes_test.go).
package archtest
