package lifetime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
)

func driftReplans(res lifetime.Result) []control.Event {
	return eventsWhere(res, control.KindReplan, func(why string) bool { return strings.Contains(why, "drifted") })
}

// eventsWhere is res's events of kind whose reason match accepts.
func eventsWhere(res lifetime.Result, kind control.Kind, match func(reason string) bool) []control.Event {
	var out []control.Event
	for _, e := range res.Events {
		if e.Kind == kind && match(e.Reason) {
			out = append(out, e)
		}
	}
	return out
}

// TestRateDriftIsARealChange: the pair's stream arrives at a steady 15 req/s (Poisson);
// the rate meter's own noise (a 2 s average) is no drift, so nothing re-plans on it — a
// fixed ±25 % band re-planned about once every two minutes on noise alone — while a
// real change, the rate doubling mid-run, re-plans at once.
func TestRateDriftIsARealChange(t *testing.T) {
	for seed := int64(1); seed <= 2; seed++ {
		res := run(t, pair("gmd", 6*time.Minute, seed))
		if res.FirstPlanS < 0 {
			t.Fatalf("seed %d: no plan", seed)
		}
		for _, e := range driftReplans(res) {
			t.Errorf("seed %d, steady rate: re-planned at %s: %s", seed, e.Time.Sub(res.Events[0].Time), e.Reason)
		}
	}
	sc := pair("gmd", 5*time.Minute, 1)
	at := 3 * time.Minute
	sc.Changes = []lifetime.Change{{At: at, RateFactor: 2}}
	res := run(t, sc)
	ds := driftReplans(res)
	if len(ds) == 0 {
		t.Fatal("the rate doubled and nothing re-planned")
	}
	if since := ds[0].Time.Sub(res.Events[0].Time); since < at || since > at+20*time.Second {
		t.Errorf("the rate doubled at %s, the first drift re-plan at %s: %s", at, since, ds[0].Reason)
	}
}
