package powermode_test

import (
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestModeStringParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		m    powermode.Mode
		want string
	}{
		{powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}, "8/1728000/612000000/3199000000"},
		{powermode.Mode{Cores: 1, CPUKHz: 115200, GPUHz: 306000000, EMCHz: 204000000}, "1/115200/306000000/204000000"},
		{powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}, "12/2201600/1300500000/3199000000"},
		// Beyond 32 bits, as a future EMC in Hz may be.
		{powermode.Mode{Cores: 6, CPUKHz: 1510400, GPUHz: 624750000, EMCHz: 6400000000}, "6/1510400/624750000/6400000000"},
	} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.m, got, tc.want)
		}
		back, err := powermode.ParseMode(tc.want)
		if err != nil || back != tc.m {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", tc.want, back, err, tc.m)
		}
		// Surrounding whitespace (a line read from a file) is tolerated.
		if back, err := powermode.ParseMode(" " + tc.want + "\n"); err != nil || back != tc.m {
			t.Errorf("ParseMode with spaces = %v, %v", back, err)
		}
	}
}

func TestParseModeErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "want cores/cpu_khz/gpu_hz/emc_hz"},
		{"8/1728000/612000000", "want cores/cpu_khz/gpu_hz/emc_hz"},
		{"8/1728000/612000000/3199000000/1", "want cores/cpu_khz/gpu_hz/emc_hz"},
		{"8,1728000,612000000,3199000000", "want cores/cpu_khz/gpu_hz/emc_hz"},
		{"eight/1728000/612000000/3199000000", "field 1"},
		{"8/1.7e6/612000000/3199000000", "field 2"},
		{"8/1728000/612 MHz/3199000000", "field 3"},
		{"8/1728000/612000000/", "field 4"},
		{"8/1728000/612000000/99999999999999999999", "field 4"},
		{"0/1728000/612000000/3199000000", "cores must be at least 1"},
		{"-2/1728000/612000000/3199000000", "cores must be at least 1"},
		{"8/0/612000000/3199000000", "cpu_khz must be positive"},
		{"8/1728000/-1/3199000000", "gpu_hz must be positive"},
		{"8/1728000/612000000/0", "emc_hz must be positive"},
	} {
		m, err := powermode.ParseMode(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseMode(%q) = %v, %v; want error containing %q", tc.in, m, err, tc.want)
		}
		if err != nil && m != (powermode.Mode{}) {
			t.Errorf("ParseMode(%q) returned %v with its error, want the zero Mode", tc.in, m)
		}
	}
}

func TestModeValidate(t *testing.T) {
	good := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	if err := good.Validate(); err != nil {
		t.Errorf("%v: %v", good, err)
	}
	for _, m := range []powermode.Mode{{}, {Cores: 1}, {Cores: 1, CPUKHz: 1}, {Cores: 1, CPUKHz: 1, GPUHz: 1}} {
		if err := m.Validate(); err == nil {
			t.Errorf("%v: want error", m)
		}
	}
}

func TestModeHuman(t *testing.T) {
	for _, tc := range []struct {
		m    powermode.Mode
		want string
	}{
		{powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}, "8c cpu 1728MHz gpu 612MHz emc 3199MHz"},
		{powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 665600000}, "12c cpu 2201.6MHz gpu 1300.5MHz emc 665.6MHz"},
		{powermode.Mode{Cores: 6, CPUKHz: 1510400, GPUHz: 624750000, EMCHz: 204000000}, "6c cpu 1510.4MHz gpu 624.75MHz emc 204MHz"},
		{powermode.Mode{Cores: 16, CPUKHz: 1, GPUHz: 1980000000, EMCHz: 3201000000}, "16c cpu host gpu 1980MHz emc 3201MHz"},
	} {
		if got := tc.m.Human(); got != tc.want {
			t.Errorf("%v.Human() = %q, want %q", tc.m, got, tc.want)
		}
	}
}
