package units

import (
	"strings"
	"testing"
)

func TestUnitParsing(t *testing.T) {
	for _, tc := range []struct {
		in   string
		mw   float64
		fail bool
	}{
		{"30W", 30000, false}, {"30", 30000, false}, {"30000mW", 30000, false}, {"30.5w", 30500, false},
		{"none", 0, false}, {"off", 0, false}, {"0", 0, true}, {"0W", 0, true}, {"0mW", 0, true}, {"-5W", 0, true},
		{"30000", 0, true}, {"W", 0, true}, {"thirty", 0, true},
	} {
		v, err := PowerMW(tc.in)
		if (err != nil) != tc.fail || (!tc.fail && v != tc.mw) {
			t.Errorf("power %q = %v, %v", tc.in, v, err)
		}
	}
	for _, tc := range []struct {
		in   string
		ms   float64
		fail bool
	}{
		{"80ms", 80, false}, {"0.08s", 80, false}, {"1.5s", 1500, false}, {"80", 0, true}, {"80 ms", 0, true},
	} {
		v, err := LatencyMS(tc.in)
		if (err != nil) != tc.fail || (!tc.fail && v != tc.ms) {
			t.Errorf("latency %q = %v, %v", tc.in, v, err)
		}
	}
	if _, err := PowerMW("0W"); err == nil || !strings.Contains(err.Error(), "--power none") {
		t.Errorf("power 0W: %v, want a message pointing to --power none", err)
	}
}
