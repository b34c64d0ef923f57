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

// Issue 34: every message agrees with what is accepted.
func TestUnitMessagesAgree(t *testing.T) {
	// --power 1000 was refused while the message said "valid 1 W to 1000 W".
	if v, err := PowerMW("1000"); err != nil || v != 1e6 {
		t.Errorf("power 1000 = %v, %v; want 1000 W (the top of the range it names)", v, err)
	}
	// --power 0.5W got the API's "a value below 1000 is probably watts given as mW".
	_, err := PowerMW("0.5W")
	if err == nil || !strings.Contains(err.Error(), "out of range") || strings.Contains(err.Error(), "given as mW") {
		t.Errorf("power 0.5W: %v, want out of range in watts", err)
	}
	for _, in := range []string{"2000W", "500mW", "2kW"} {
		if _, err := PowerMW(in); err == nil {
			t.Errorf("power %s accepted", in)
		}
	}
	// --latency 0 suggested "e.g. 0ms", which is then refused.
	_, err = LatencyMS("0")
	if err == nil || strings.Contains(err.Error(), "e.g. 0ms") {
		t.Errorf("latency 0: %v, want no suggestion of 0ms", err)
	}
	for _, in := range []string{"0ms", "0s", "-5ms", "20m"} {
		if _, err := LatencyMS(in); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("latency %s: %v, want out of range", in, err)
		}
	}
}

func TestFreqHz(t *testing.T) {
	for _, tc := range []struct {
		in   string
		hz   int64
		fail bool
	}{
		{"612MHz", 612e6, false}, {"612 mhz", 612e6, false}, {"1.7GHz", 1.7e9, false}, {"204000kHz", 204e6, false},
		{"306000000Hz", 306e6, false}, {"612", 0, true}, {"MHz", 0, true}, {"-5MHz", 0, true}, {"0MHz", 0, true}, {"fastMHz", 0, true},
	} {
		v, err := FreqHz("gpu", tc.in)
		if (err != nil) != tc.fail || (!tc.fail && v != tc.hz) {
			t.Errorf("FreqHz(%q) = %v, %v", tc.in, v, err)
		}
	}
	if got := MHz(1728000000); got != "1728 MHz" {
		t.Errorf("MHz = %q", got)
	}
	if got := Watts(30500); got != "30.5 W" {
		t.Errorf("Watts = %q", got)
	}
}

// What PowerString and LatencyString write, PowerMW and LatencyMS read back as the same
// number (fulcrumd writes its defaults and old spellings this way).
func TestStringsRoundTrip(t *testing.T) {
	for _, mw := range []float64{0, 1000, 12500, 30000, 30500.5} {
		got, err := PowerMW(PowerString(mw))
		if err != nil || got != mw {
			t.Errorf("PowerString(%v) = %q reads back as %v, %v", mw, PowerString(mw), got, err)
		}
	}
	for _, ms := range []float64{1, 42.5, 100, 1500} {
		got, err := LatencyMS(LatencyString(ms))
		if err != nil || got != ms {
			t.Errorf("LatencyString(%v) = %q reads back as %v, %v", ms, LatencyString(ms), got, err)
		}
	}
	if PowerString(0) != "none" || PowerString(30000) != "30W" || LatencyString(100) != "100ms" {
		t.Errorf("PowerString(0)=%q PowerString(30000)=%q LatencyString(100)=%q", PowerString(0), PowerString(30000), LatencyString(100))
	}
}
