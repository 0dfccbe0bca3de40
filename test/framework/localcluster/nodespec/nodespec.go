// Package nodespec is what the local cluster's harness tells node-init, PID 1
// of the real node's namespaces: the bind mounts to make and the processes to
// run (test/framework/localcluster/node.go writes it, node-init reads it).
package nodespec

// Spec is node-init's input (JSON).
type Spec struct {
	// Binds are bind mounts, made in order after / is private and /proc is
	// the namespace's own. A Source that is a file binds a file.
	Binds []Bind `json:"binds"`
	// Steps run in order: a Step with WaitSocket is a daemon that must create
	// that Unix socket; one with RunToCompletion must exit 0 before the next.
	Steps []Step `json:"steps"`
	// WaitFile, when set, is a file node-init waits for after the mounts and
	// before the first step: the harness creates it once the node's network
	// namespace (node-init is started in a new one) has its interfaces,
	// addresses and routes.
	WaitFile string `json:"waitFile,omitempty"`
	// StopGrace is how long each daemon gets between SIGTERM and SIGKILL
	// (a Go duration).
	StopGrace string `json:"stopGrace"`
}

// Bind is one bind mount.
type Bind struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Step is one process of the node.
type Step struct {
	Name            string   `json:"name"`
	Path            string   `json:"path"`
	Args            []string `json:"args"`
	Env             []string `json:"env"`
	Log             string   `json:"log"`
	WaitSocket      string   `json:"waitSocket,omitempty"`
	RunToCompletion bool     `json:"runToCompletion,omitempty"`
}
