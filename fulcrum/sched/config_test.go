package sched

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"EWMAAlpha", func(c *Config) { c.EWMAAlpha = 1.5 }},
		{"OverrunMin", func(c *Config) { c.OverrunMin = -time.Millisecond }},
		{"HoldFactor", func(c *Config) { c.HoldFactor = 0.5 }},
		{"Margin", func(c *Config) { c.Margin = -1 }},
		{"WindowSamples", func(c *Config) { c.WindowSamples = 0 }},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		fields := optcheck.Fields(c.Validate())
		if len(fields) != 1 || fields[0].Field != tc.field || !strings.HasPrefix(fields[0].Problem, "must") {
			t.Errorf("%s: got %v", tc.field, c.Validate())
		}
	}
}

// The latency budget is not the scheduler's configuration (issue 29): it held a copy
// that could disagree with the controller's (the control e2e test configured 400 ms
// here and 1000 ms in the targets, which won at control.New); now only the controller
// sets it (SetLatencyBudget).
func TestConfigHoldsNoLatencyBudget(t *testing.T) {
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		if f := ct.Field(i); strings.Contains(strings.ToLower(f.Name), "latency") {
			t.Errorf("sched.Config.%s: the latency budget comes from the controller's targets only", f.Name)
		}
	}
	s := New(Config{}, NewFakeClock(), nil)
	defer s.Close()
	if got := s.LatencyBudget(); got != DefaultLatencyBudget {
		t.Errorf("a scheduler no controller has spoken to holds %v; want DefaultLatencyBudget %v", got, DefaultLatencyBudget)
	}
	s.SetLatencyBudget(250 * time.Millisecond)
	if got := s.LatencyBudget(); got != 250*time.Millisecond {
		t.Errorf("after SetLatencyBudget(250ms): %v", got)
	}
}
