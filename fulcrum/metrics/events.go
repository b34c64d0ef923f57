package metrics

import (
	"context"
	"encoding/json"
	"maps"
	"sync"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

// EventCounts counts a controller's events by kind (its decisions) and the budget
// violations among them, for controllers that keep no such counters themselves.
type EventCounts struct {
	mu         sync.Mutex
	decisions  map[string]uint64
	violations map[string]uint64
	lost       uint64
}

// CountEvents follows ctl's events until ctx ends. Counting starts now: earlier events
// are not counted (counters restart with the process, as Prometheus expects).
func CountEvents(ctx context.Context, ctl server.Controller) *EventCounts {
	ec := &EventCounts{decisions: map[string]uint64{}, violations: map[string]uint64{}}
	ch, cancel := ctl.Subscribe(ctx)
	go func() {
		defer cancel()
		var last uint64
		for e := range ch {
			if last != 0 && e.Seq > last+1 {
				ec.mu.Lock()
				ec.lost += e.Seq - last - 1
				ec.mu.Unlock()
			}
			last = e.Seq
			var b *api.Budgets
			if e.Kind == api.EventStepDown {
				if cur, err := ctl.Budgets(ctx); err == nil {
					b = &cur
				}
			}
			ec.add(e, b)
		}
	}()
	return ec
}

// stepData is the part of a step_down event's data that says what was over budget.
type stepData struct {
	Measured *struct {
		LatencyP99MS float64 `json:"latency_p99_ms"`
		PowerMW      float64 `json:"power_mw"`
	} `json:"measured"`
}

// add counts e. A step_down is a violation of the budget its measurements exceed (both
// when both do; "unknown" when it carries none), judged against the budgets b in force.
func (ec *EventCounts) add(e api.Event, b *api.Budgets) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	ec.decisions[e.Kind]++
	if e.Kind != api.EventStepDown {
		return
	}
	var d stepData
	_ = json.Unmarshal(e.Data, &d)
	counted := false
	if d.Measured != nil && b != nil {
		if b.PowerMW > 0 && d.Measured.PowerMW > b.PowerMW {
			ec.violations["power"]++
			counted = true
		}
		if d.Measured.LatencyP99MS > b.LatencyMS {
			ec.violations["latency"]++
			counted = true
		}
	}
	if !counted {
		ec.violations["unknown"]++
	}
}

// Counters returns copies of the counts, for FromController.
func (ec *EventCounts) Counters() (violations, decisions map[string]uint64) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	return maps.Clone(ec.violations), maps.Clone(ec.decisions)
}

// Lost is how many events were dropped because counting fell behind.
func (ec *EventCounts) Lost() uint64 {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	return ec.lost
}
