package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Runner defaults.
const (
	DefaultTick         = 2 * time.Millisecond
	DefaultRefresh      = 20 * time.Millisecond
	DefaultSwitchFactor = 0.04 // context-switch cost of time-slicing two CUDA contexts
)

// Runner executes minibatches on a simulated board: it registers the minibatch in the
// tree's activity directory and advances its progress at the rate the workload model
// gives for the frequencies currently written in the tree, sharing the GPU with every
// other registered minibatch the way the driver time-slices contexts. It is safe for
// concurrent use.
type Runner struct {
	paths *boardPaths
	hw    Hardware
	// Tick is the progress step; Refresh how often the tree is re-read.
	Tick, Refresh time.Duration
	// SwitchFactor slows every minibatch by this fraction while others share the GPU.
	SwitchFactor float64
}

// NewRunner prepares a runner for the simulated board of spec under root.
func NewRunner(root string, spec *powermode.BoardSpec) (*Runner, error) {
	p, err := findPaths(root, spec)
	if err != nil {
		return nil, err
	}
	return &Runner{paths: p, hw: HardwareFor(spec), Tick: DefaultTick, Refresh: DefaultRefresh, SwitchFactor: DefaultSwitchFactor}, nil
}

// RunMinibatch runs one minibatch of w at batch size batch on the simulated board under
// root and returns its wall-clock duration. The run-to-run noise factor is drawn from
// rng once at the start.
func RunMinibatch(ctx context.Context, root string, spec *powermode.BoardSpec, w *Workload, batch int, rng *rand.Rand) (time.Duration, error) {
	r, err := NewRunner(root, spec)
	if err != nil {
		return 0, err
	}
	return r.Run(ctx, w, batch, rng)
}

// Clocks is the mode a minibatch runs at now: the clocks written in the tree, capped
// by the simulated firmware's throttle when the board is hot (Options.Heat).
func (r *Runner) Clocks() (powermode.Mode, error) {
	st, err := r.paths.readState()
	if err != nil {
		return powermode.Mode{}, err
	}
	st = st.capped(r.paths, r.paths.readThrottle())
	return st.mode(st.running(true)), nil
}

// Run runs one minibatch (see RunMinibatch). On cancellation it unregisters and returns
// the time spent with ctx's error.
// maxRefreshFails is how many clock re-reads in a row may fail mid-run before a
// minibatch gives up.
const maxRefreshFails = 20

func (r *Runner) Run(ctx context.Context, w *Workload, batch int, rng *rand.Rand) (time.Duration, error) {
	if batch < 1 {
		return 0, fmt.Errorf("sim: batch size %d must be at least 1", batch)
	}
	factor := NoisyFactor(rng, w.NoiseSigma)
	start := time.Now()
	file, err := registerActivity(r.paths.root, Activity{Workload: w.Name, Role: string(w.Role), Batch: batch, PID: os.Getpid(), StartedAt: start})
	if err != nil {
		return 0, err
	}
	defer os.Remove(file)

	var (
		tauSec  float64
		sharing = 1.0
		readAt  time.Time
	)
	// The clocks are re-read every Refresh; the number of minibatches sharing the GPU
	// (a directory listing, cheap) every tick, so two that start together share at once.
	refresh := func(now time.Time) error {
		m, err := r.Clocks()
		if err != nil {
			return err
		}
		tauSec = w.Time(&r.hw, m, batch).TotalSec * factor
		readAt = now
		return nil
	}
	share := func() {
		n := max(countActivities(r.paths.root), 1)
		sharing = float64(n)
		if n > 1 {
			sharing *= 1 + r.SwitchFactor
		}
	}
	if err := refresh(start); err != nil {
		return 0, err
	}
	share()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	progress, last := 0.0, start
	fails := 0
	for {
		// Sleep a tick, or exactly what is left when that is less.
		left := time.Duration((1 - progress) * tauSec * sharing * float64(time.Second))
		// At least a microsecond: a zero timer on a clock that has not moved (a virtual
		// clock, or a coarse one) would add no progress and spin for ever.
		timer.Reset(min(r.Tick, max(left, time.Microsecond)))
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-timer.C:
		}
		now := time.Now()
		progress += now.Sub(last).Seconds() / (tauSec * sharing)
		last = now
		if progress >= 1-1e-9 {
			return now.Sub(start), nil
		}
		if now.Sub(readAt) >= r.Refresh {
			// A clock file read while the board's writer rewrites it can come back empty
			// (the simulated sysfs is plain files, written with truncate-then-write): keep
			// the clocks read last and try again; only a failure that persists ends the
			// minibatch. Seen once under load as a failed run mid-way through a mode change.
			if err := refresh(now); err != nil {
				if fails++; fails >= maxRefreshFails {
					return now.Sub(start), fmt.Errorf("sim: reading the clocks failed %d times in a row: %w", fails, err)
				}
				readAt = now
			} else {
				fails = 0
			}
		}
		share()
	}
}
