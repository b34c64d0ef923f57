package sched

import (
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
