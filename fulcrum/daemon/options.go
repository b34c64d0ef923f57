package daemon

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
)

// DefaultConfig is the worker server fulcrumd runs when its configuration says nothing;
// NewServer fills zero fields from it.
func DefaultConfig() Config {
	return Config{
		RuntimeDir:      paths.RuntimeDir,
		SocketMode:      0o660,
		MaxLineBytes:    proto.MaxLineBytes,
		MaxWorkers:      64,
		MaxPerProcess:   16,
		ReservedSlots:   8,
		WriteTimeout:    5 * time.Second,
		RegisterTimeout: 5 * time.Second,
		Sched:           sched.DefaultConfig(),
	}
}

// Validate checks a complete Config (fulcrumd's, every field set), its scheduler
// included. Failures are *optcheck.FieldError naming the field ("Sched.Margin").
func (c Config) Validate() error {
	var ck optcheck.Checks
	if c.RuntimeDir == "" {
		ck.Fail("RuntimeDir", `""`, "must be set (default "+DefaultConfig().RuntimeDir+")")
	}
	if c.SocketMode > 0o777 {
		ck.Fail("SocketMode", fmt.Sprintf("%#o", uint32(c.SocketMode)), "must be permission bits (at most 0777)")
	}
	optcheck.Positive(&ck, "MaxLineBytes", c.MaxLineBytes)
	optcheck.Positive(&ck, "MaxWorkers", c.MaxWorkers)
	optcheck.Positive(&ck, "MaxPerProcess", c.MaxPerProcess)
	if c.ReservedSlots < -1 {
		ck.Fail("ReservedSlots", c.ReservedSlots, "must be -1 (none) or a number of slots kept for processes holding no connection (at most a quarter of MaxWorkers is used)")
	}
	optcheck.Positive(&ck, "WriteTimeout", c.WriteTimeout)
	optcheck.Positive(&ck, "RegisterTimeout", c.RegisterTimeout)
	ck.Nest("Sched", c.Sched.Validate())
	return ck.Err()
}

// DefaultOptions is the daemon fulcrumd runs when its configuration says nothing: the
// packages' own defaults (DefaultConfig of the server, scheduler and controller) plus
// the daemon's directories, board and control socket.
func DefaultOptions() Options {
	ctl := control.DefaultConfig()
	ctl.Live = control.DefaultLiveOptions()
	return Options{
		Server:       DefaultConfig(),
		StateDir:     paths.StateDir,
		StoreTimeout: time.Second,
		Board:        "auto",
		BoardRoot:    "/",
		Control:      ctl,
		// The targets fulcrumd starts with: the default latency budget on the p99.
		Targets: plan.Targets{LatencyMS: plan.DefaultLatencyMS, Quantile: 0.99},
		// What the api server uses for zero fields, spelled out for the configuration.
		API: server.Config{SocketMode: 0o660, Group: "fulcrum"},
	}
}

// Validate checks complete Options (fulcrumd's, every field set): the server and
// scheduler, the controller, the store, board and control socket. The budgets are
// checked by their own Validate (they can also change at run time through the API).
// Failures are *optcheck.FieldError naming the field ("Server.Sched.Margin").
func (o Options) Validate() error {
	var ck optcheck.Checks
	ck.Nest("Server", o.Server.Validate())
	ck.Nest("Control", o.Control.Validate())
	optcheck.Positive(&ck, "StoreTimeout", o.StoreTimeout)
	if b := o.Board; b != "auto" && b != "none" && b != "nvml" && !(strings.HasPrefix(b, "sim:") && len(b) > len("sim:")) {
		ck.Fail("Board", strconv.Quote(b), `must be "auto", "sim:NAME", "nvml" or "none"`)
	}
	if o.NVML.Device < 0 {
		ck.Fail("NVML.Device", o.NVML.Device, "must be a GPU index (0, 1, …; see nvidia-smi)")
	}
	if o.API.SocketMode > 0o777 {
		ck.Fail("API.SocketMode", fmt.Sprintf("%#o", uint32(o.API.SocketMode)), "must be permission bits (at most 0777)")
	}
	return ck.Err()
}
