package daemon

import (
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
)

// Options.Validate covers the server, the scheduler and the controller, naming each
// failure by its full field path.
func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("DefaultOptions: %v", err)
	}
	o := DefaultOptions()
	o.Server.RuntimeDir = ""
	o.Server.Sched.DevK = -1
	o.Control.PlanMargin = 1
	o.Control.Live.MinTime = 0
	o.StoreTimeout = -time.Second
	o.Board = "sim:"
	o.NVML.Device = -1
	want := map[string]bool{"Server.RuntimeDir": true, "Server.Sched.DevK": true, "Control.PlanMargin": true,
		"Control.Live.MinTime": true, "StoreTimeout": true, "Board": true, "NVML.Device": true}
	err := o.Validate()
	for _, f := range optcheck.Fields(err) {
		if !want[f.Field] {
			t.Errorf("unexpected failure %v", f)
		}
		delete(want, f.Field)
	}
	if len(want) > 0 || len(optcheck.Others(err)) > 0 {
		t.Errorf("missed %v; all: %v", want, err)
	}
}
