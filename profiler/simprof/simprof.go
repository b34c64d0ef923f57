// Package simprof is the profiler's Runner (profiler.Runner, profiler.Sourcer) for a
// simulated board (powermode/sim). It lives apart from the profiler so that the
// profiler, which fulcrumd links, does not import the board simulator.
package simprof

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Runner runs minibatches on a simulated board: each one registers in the tree's
// activity directory (so the physics loop draws its power) and lasts what the workload
// model gives at the frequencies currently written in the tree, with the model's
// run-to-run noise.
type Runner struct {
	runner    *sim.Runner
	workloads map[string]*sim.Workload

	mu  sync.Mutex // rand.Rand is not safe for concurrent use
	rng *rand.Rand
}

// New prepares a runner for the simulated board of spec under root, running
// the given workload models; seed makes the noise reproducible.
func New(root string, spec *powermode.BoardSpec, workloads map[string]*sim.Workload, seed uint64) (*Runner, error) {
	r, err := sim.NewRunner(root, spec)
	if err != nil {
		return nil, err
	}
	return &Runner{runner: r, workloads: workloads, rng: rand.New(rand.NewPCG(seed, 0x73696d))}, nil
}

// Workload returns the model called name, or an error listing the known ones.
func (r *Runner) Workload(name string) (*sim.Workload, error) {
	w, ok := r.workloads[name]
	if !ok {
		return nil, fmt.Errorf("sim: unknown workload %q: known workloads are %s", name, strings.Join(slices.Sorted(maps.Keys(r.workloads)), ", "))
	}
	return w, nil
}

// RunMinibatch implements profiler.Runner.
func (r *Runner) RunMinibatch(ctx context.Context, workload string, role truth.Role, batch int) (time.Duration, error) {
	w, err := r.Workload(workload)
	if err != nil {
		return 0, err
	}
	if w.Role != role {
		return 0, fmt.Errorf("sim: workload %s is a %s workload, not %s", workload, w.Role, role)
	}
	// Draw this minibatch's own generator under the lock, so concurrent callers stay
	// safe and the sequence of draws stays reproducible for a sequential caller.
	r.mu.Lock()
	rng := rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64()))
	r.mu.Unlock()
	return r.runner.Run(ctx, w, batch, rng)
}

// Source implements profiler.Sourcer.
func (r *Runner) Source() string { return store.SourceSim }
