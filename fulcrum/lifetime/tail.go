package lifetime

// Heavy-tailed turn times on virtual time (issue 28): Scenario.Tail stretches each
// simulated worker's turns by the tail model fitted to real PyTorch, as fulcrumctl sim
// worker --tail does on real time (the same tailmodel.Model.Stretch).

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/tailmodel"
)

// tailSeed is the stream of each worker's tail generator (its own: the noise and the
// arrivals draw from the worker's rng, and a tail must not shift them, so a run with a
// tail and one without see the same arrivals).
const tailSeed = 0x7a11

// tail is one worker's heavy-tailed turn times.
type tail struct {
	m   tailmodel.Model
	rng *rand.Rand
}

// newTail is the tail of a worker of role seeded with seed under scenario tail name
// ("" or "none": no tail).
func newTail(name, role string, runSeed int64, seed uint64) (*tail, error) {
	m, err := tailmodel.Named(name, role)
	if err != nil {
		return nil, fmt.Errorf("lifetime: Tail: %w", err)
	}
	if m.TailProb <= 0 {
		return nil, nil
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("lifetime: Tail %q: %w", name, err)
	}
	return &tail{m: m, rng: rand.New(rand.NewPCG(uint64(runSeed), seed^tailSeed))}, nil
}

// stretch is a turn of modeled time d (already with the run's noise, the body) under the
// tail.
func (t *tail) stretch(d time.Duration) time.Duration {
	if t == nil {
		return d
	}
	return t.m.Stretch(d, t.rng)
}
