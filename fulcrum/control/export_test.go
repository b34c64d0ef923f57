package control

import (
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

// NewAPI returns the control API's adapter (controlapi.API) of c, started at started.
// The adapter imports this package, so these internal tests cannot name it: hook_test.go
// (package control_test) sets NewAPI before any test runs.
var NewAPI func(c *Controller, started time.Time) server.Controller
