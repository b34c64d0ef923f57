// Package paths is where fulcrumd and fulcrumctl look for things on a board when told
// nothing else: the runtime directory with the two sockets, the state directory with
// the profile store. Both binaries (and the scripts) take their defaults from here, so
// a path is written once in Go; the packaging (systemd units, tmpfiles, the Kubernetes
// manifests), configs/fulcrum.yaml and the docs spell the same values.
package paths

const (
	// RuntimeDir holds the sockets and the PID file (systemd's RuntimeDirectory=fulcrum).
	RuntimeDir = "/run/fulcrum"
	// StateDir holds the profile store, the board snapshot and the run-time settings
	// (systemd's StateDirectory=fulcrum).
	StateDir = "/var/lib/fulcrum"

	// WorkerSocketName is the worker socket's file name in the runtime directory.
	WorkerSocketName = "worker.sock"
	// ControlSocketName is the control socket's file name in the runtime directory.
	ControlSocketName = "control.sock"
	// StoreName is the profile store's file name in the state directory.
	StoreName = "profiles.db"

	// WorkerSocket is where workers register when nothing else is said.
	WorkerSocket = RuntimeDir + "/" + WorkerSocketName
	// ControlSocket is where fulcrumctl looks when neither --socket nor FULCRUM_SOCKET
	// is set.
	ControlSocket = RuntimeDir + "/" + ControlSocketName
	// Store is the profile store fulcrumd keeps and fulcrumctl's --db reads by default.
	Store = StateDir + "/" + StoreName
)
