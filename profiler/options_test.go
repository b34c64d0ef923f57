package profiler

import (
	"testing"
	"time"
)

// Defaults is idempotent: filling in the defaults of options whose defaults are filled
// in changes nothing. A "no warm-up" (negative) used to become 0 on the first call and
// the default warm-up (2 minibatches, 500 ms) on the second; the rule is the same
// from either.
func TestOptionsDefaultsIdempotent(t *testing.T) {
	for _, o := range []Options{
		{},
		{Warmup: -1, WarmupTime: -1},
		{Warmup: -1},
		{WarmupTime: -time.Second},
		{Warmup: 3, WarmupTime: time.Second, MinSamples: 8, MaxSamples: 4, TargetRSE: 0.05, PowerSampleInterval: time.Second},
	} {
		once := o.Defaults()
		if twice := once.Defaults(); twice != once {
			t.Errorf("%+v: Defaults = %+v, Defaults of that = %+v; want the same", o, once, twice)
		}
		if r1, r2 := o.Rule(), once.Rule(); r1 != r2 {
			t.Errorf("%+v: rule %+v, from its defaults %+v; want the same", o, r1, r2)
		}
	}
	if r := (Options{Warmup: -1, WarmupTime: -1}).Defaults().Rule(); r.Warmup != 0 || r.WarmupTime != 0 {
		t.Errorf("no warm-up asked, after Defaults: rule %+v; want no warm-up", r)
	}
	if r := (Options{}).Rule(); r.Warmup != 2 || r.WarmupTime != 500*time.Millisecond {
		t.Errorf("zero options: rule %+v; want the default warm-up 2 minibatches, 500 ms", r)
	}
}
