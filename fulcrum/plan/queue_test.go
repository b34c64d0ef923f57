package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// QueueExcessMS by hand: the closed form of docs/design.md §2 "The queue of batches".
func TestQueueExcessHandComputed(t *testing.T) {
	// ρ 0.428, 13.5 ms batches behind a 22.8 ms turn: mean 13.5/(2·0.572) = 11.8007 ms,
	// 11.8007·ln(42.8·11.8007·(1 − e^(−22.8/11.8007))/22.8) = 34.711 ms.
	if got := QueueExcessMS(0.428, 13.5, 22.8, 0.99); !near(got, 34.71132567, 1e-8) {
		t.Errorf("ρ 0.428, 13.5 ms behind 22.8 ms: %v, want 34.7113", got)
	}
	// No turn ahead: the M/G/1 wait's own quantile, 11.8007·ln(42.8) = 44.330 ms.
	if got := QueueExcessMS(0.428, 13.5, 0, 0.99); !near(got, 44.32977656, 1e-8) {
		t.Errorf("ρ 0.428, no turn: %v, want 44.3298", got)
	}
	// ρ ≤ 1 − q: nothing beyond the turn, whatever the times.
	for _, c := range [][3]float64{{0.01, 100, 0}, {0.005, 5, 60}, {0, 10, 10}} {
		if got := QueueExcessMS(c[0], c[1], c[2], 0.99); got != 0 {
			t.Errorf("QueueExcessMS(%v, %v, %v) = %v, want 0", c[0], c[1], c[2], got)
		}
	}
	// A long turn absorbs a light queue: 5 ms batches at ρ 0.1 behind a 100 ms turn.
	if got := QueueExcessMS(0.1, 5, 100, 0.99); got != 0 {
		t.Errorf("ρ 0.1, 5 ms behind 100 ms: %v, want 0", got)
	}
	// Saturated: finite (capped ρ), and larger than any unsaturated figure.
	sat := QueueExcessMS(1.5, 13.5, 22.8, 0.99)
	if math.IsInf(sat, 0) || math.IsNaN(sat) || sat <= QueueExcessMS(0.95, 13.5, 22.8, 0.99) {
		t.Errorf("saturated: %v, want finite and above ρ 0.95's", sat)
	}
	// More load, more queue; a longer turn ahead, less excess beyond it.
	if QueueExcessMS(0.5, 10, 20, 0.99) <= QueueExcessMS(0.3, 10, 20, 0.99) ||
		QueueExcessMS(0.3, 10, 40, 0.99) >= QueueExcessMS(0.3, 10, 20, 0.99) {
		t.Error("QueueExcessMS should grow with ρ and shrink with the turn ahead")
	}
}

// simulatedP99MS runs the scheduler's discipline for one stream of batch 1: Poisson
// arrivals at rateRPS, each request a serviceMS batch; whenever no request waits, the
// GPU runs a trainMS training turn (training always wants one; a turn never preempted),
// and waiting requests are served first-come as soon as the GPU is free. It returns the
// requests' p99 latency (arrival → end of service).
func simulatedP99MS(rateRPS, serviceMS, trainMS float64, n int, seed uint64) float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	arrivals := make([]float64, n)
	at := 0.0
	for i := range arrivals {
		at += rng.ExpFloat64() / rateRPS * 1000
		arrivals[i] = at
	}
	lat := make([]float64, 0, n)
	now, next := 0.0, 0
	for next < n {
		if arrivals[next] <= now {
			now += serviceMS // the oldest waiting request's batch
			lat = append(lat, now-arrivals[next])
			next++
			continue
		}
		if trainMS > 0 {
			now += trainMS // nobody waits: a training turn
		} else {
			now = arrivals[next]
		}
	}
	slices.Sort(lat)
	return lat[int(0.99*float64(len(lat)))]
}

// The model's p99 (the turn ahead + the queue + the batch) against a simulation of the
// scheduler's discipline: never below it (the claim errs on the safe side), at most 20 %
// above it, and where the streams' share is large, model v1 without the queue falls far
// short (the yolov8n-infer pairs of the lifetime sub-sweep at 30 req/s and 50 ms: the
// plan predicted 36 ms and the window measured 50–62 ms with training paused).
func TestQueueExcessAgainstASimulatedQueue(t *testing.T) {
	for _, c := range []struct {
		rateRPS, serviceMS, trainMS float64
		v1Short                     bool // model v1 alone under the simulated p99 by > 20 %
	}{
		{31.7, 13.5, 22.8, true},
		{30, 12, 22.8, true},
		{30, 13.5, 0, true},
		{30, 20, 100, true},
		{10, 13.5, 22.8, true},
		{30, 7, 22.8, false},
		{30, 4, 60, false},
		{10, 7, 100, false},
		{30, 2, 30, false},
	} {
		sim := simulatedP99MS(c.rateRPS, c.serviceMS, c.trainMS, 200000, 7)
		rho := c.rateRPS * c.serviceMS / 1000
		v1 := c.trainMS + c.serviceMS
		model := v1 + QueueExcessMS(rho, c.serviceMS, c.trainMS, 0.99)
		t.Logf("λ %g/s, %g ms batches, %g ms turns: simulated p99 %.1f ms, model %.1f, v1 %.1f", c.rateRPS, c.serviceMS, c.trainMS, sim, model, v1)
		if model < sim*0.995 || model > sim*1.2 {
			t.Errorf("λ %g, S %g, T %g: model p99 %.1f ms against the simulated %.1f: want within [−0.5 %%, +20 %%]", c.rateRPS, c.serviceMS, c.trainMS, model, sim)
		}
		if short := v1 < sim/1.2; short != c.v1Short {
			t.Errorf("λ %g, S %g, T %g: model v1's %.1f ms against the simulated %.1f: short by > 20 %% %v, want %v", c.rateRPS, c.serviceMS, c.trainMS, v1, sim, short, c.v1Short)
		}
	}
}

// A plan's words say how much of its predicted p99 is the queue of batches, where there
// is one: an operator reading a p99 far above the batch and the turn sees why.
func TestExplainNamesTheQueue(t *testing.T) {
	b := Budgets{RateRPS: 31.7, LatencyMS: 100, PowerMW: 30000}.WithDefaults()
	m, err := NewModel(b, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	mode := powermode.Mode{Cores: 2, CPUKHz: 1420800, GPUHz: 816000000, EMCHz: 3199000000}
	tr := TrainPoint{Batch: 32, TimeMS: 22.8, PowerMW: 18000}
	busy := m.Evaluate(mode, tr, InferPoint{Batch: 1, TimeMS: 13.5, PowerMW: 16000})
	if !near(busy.QueueMS, QueueExcessMS(0.42795, 13.5, 22.8, 0.99), 1e-9) || !busy.Feasible {
		t.Fatalf("queue %v feasible %v, want QueueExcessMS's figure, feasible", busy.QueueMS, busy.Feasible)
	}
	got := Plan{Best: busy, Feasible: true}.Explain(b)
	if want := fmt.Sprintf("p99 latency %.1f ms (%.1f ms of it queued behind earlier batches) ≤ 100 ms", busy.LatencyMS, busy.QueueMS); !strings.Contains(got, want) {
		t.Errorf("plan words %q do not say %q", got, want)
	}
	light := m.Evaluate(mode, TrainPoint{Batch: 32, TimeMS: 60, PowerMW: 18000}, InferPoint{Batch: 1, TimeMS: 0.3, PowerMW: 16000})
	if w := (Plan{Best: light, Feasible: true}).Explain(b); light.QueueMS != 0 || strings.Contains(w, "queued") {
		t.Errorf("a lightly loaded stream: queue %v, words %q: want no queue named", light.QueueMS, w)
	}
}
