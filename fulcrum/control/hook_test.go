package control_test

import (
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server/controlapi"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
)

// The internal tests reach the API adapter through control.NewAPI (export_test.go): the
// adapter imports control, so only this external test package may import it.
func init() {
	control.NewAPI = func(c *control.Controller, started time.Time) server.Controller {
		return &controlapi.API{C: c, Started: started}
	}
}
