//go:build cgo

package cuda

/*
typedef unsigned long long CUdeviceptr;
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Burner runs one synthetic kernel as minibatches of a chosen duration. NewBurner
// calibrates how long one launch (a "unit") takes at the GPU's clocks then; Run
// launches as many units as fit the target and waits for them. When the clocks later
// drop (a lower power mode), the same minibatch takes longer, as a real one would.
type Burner struct {
	c      *Context
	k      Kernel
	m      module
	grid   uint32
	block  uint32
	iters  uint32 // compute: FMA iterations per thread per launch
	n      uint32 // memory: floats per array
	bufs   [3]C.CUdeviceptr
	unitMS float64
	now    func() time.Time
}

const (
	burnBlock    = 256
	maxFMAIters  = 1 << 26
	maxTriadN    = 16 << 20 // floats per array: 64 MiB, three arrays = 192 MiB
	calibLaunchN = 8
)

// NewBurner loads kernel k into the context, allocates its buffers and calibrates.
func (c *Context) NewBurner(ctx context.Context, k Kernel, o BurnerOptions) (*Burner, error) {
	if _, err := ParseKernel(string(k)); err != nil {
		return nil, err
	}
	if o.UnitMS <= 0 {
		o.UnitMS = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	sms := max(c.props.SMCount, 1)
	b := &Burner{c: c, k: k, block: burnBlock, now: o.Now}
	err := c.do(func() error {
		var err error
		if b.m, err = c.loadKernel(k); err != nil {
			return err
		}
		if k == Compute {
			b.grid = uint32(sms * 4)
			b.bufs[0], err = c.alloc(uint64(b.grid) * burnBlock * 4)
			return err
		}
		b.grid = uint32(sms * 8)
		n := uint64(maxTriadN)
		if lim := c.props.TotalMemB / 16; lim > 0 && n > lim/4 { // at most 1/16 of memory in all
			n = lim / 4
		}
		b.n = uint32(n)
		for i := range b.bufs {
			if b.bufs[i], err = c.alloc(n * 4); err != nil {
				return err
			}
			if err = c.memset32(b.bufs[i], math.Float32bits(float32(i+1)), n); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = b.calibrate(ctx, o.UnitMS)
	}
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	return b, nil
}

// Kernel is the burner's kernel.
func (b *Burner) Kernel() Kernel { return b.k }

// UnitMS is the calibrated time of one launch, in milliseconds.
func (b *Burner) UnitMS() float64 { return b.unitMS }

func (b *Burner) launch() error {
	if b.k == Compute {
		return b.c.launchFMA(b.m.fn, b.grid, b.block, b.bufs[0], b.iters)
	}
	return b.c.launchTriad(b.m.fn, b.grid, b.block, b.bufs[0], b.bufs[1], b.bufs[2], b.n, 0.5)
}

// timed launches n units back to back and waits: the elapsed host time.
func (b *Burner) timed(n int) (time.Duration, error) {
	var d time.Duration
	err := b.c.do(func() error {
		start := b.now()
		for range n {
			if err := b.launch(); err != nil {
				return err
			}
		}
		if err := b.c.sync(); err != nil {
			return err
		}
		d = b.now().Sub(start)
		return nil
	})
	return d, err
}

// calibrate sizes one unit near targetMS (compute: doubling the iterations until a
// launch takes half the target; memory: one triad pass is the unit) and measures the
// mean unit time over calibLaunchN launches, after a warm-up launch.
func (b *Burner) calibrate(ctx context.Context, targetMS float64) error {
	if b.k == Compute {
		b.iters = 1024
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			d, err := b.timed(1)
			if err != nil {
				return err
			}
			ms := float64(d) / float64(time.Millisecond)
			if ms >= targetMS/2 || b.iters >= maxFMAIters {
				if ms > 0 {
					b.iters = uint32(min(float64(maxFMAIters), math.Max(1, float64(b.iters)*targetMS/ms)))
				}
				break
			}
			b.iters *= 2
		}
	} else if _, err := b.timed(1); err != nil { // warm-up: first touch, JIT caches
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := b.timed(calibLaunchN)
	if err != nil {
		return err
	}
	b.unitMS = float64(d) / float64(time.Millisecond) / calibLaunchN
	if b.unitMS <= 0 {
		return fmt.Errorf("cuda: calibrating %s: %d launches took no measurable time", b.k, calibLaunchN)
	}
	return nil
}

// Units is how many launches Run makes for a minibatch of duration d (at least one).
func (b *Burner) Units(d time.Duration) int {
	return max(1, int(math.Round(float64(d)/float64(time.Millisecond)/b.unitMS)))
}

// Run runs a minibatch of about d at the calibration clocks and returns the time it
// took (host monotonic clock, first launch to the end of the synchronise). Launches
// are queued in chunks of about 5 ms so a cancelled ctx stops it soon; the chunk in
// flight is waited for either way, so the GPU is idle when Run returns.
func (b *Burner) Run(ctx context.Context, d time.Duration) (time.Duration, error) {
	units := b.Units(d)
	chunk := max(1, int(5/b.unitMS))
	start := b.now()
	for done := 0; done < units; {
		if err := ctx.Err(); err != nil {
			return b.now().Sub(start), err
		}
		n := min(chunk, units-done)
		if _, err := b.timed(n); err != nil {
			return b.now().Sub(start), err
		}
		done += n
	}
	return b.now().Sub(start), nil
}

// Close frees the buffers and unloads the module.
func (b *Burner) Close() error {
	return b.c.do(func() error {
		var errs []error
		for i := range b.bufs {
			errs = append(errs, b.c.free(b.bufs[i]))
			b.bufs[i] = 0
		}
		errs = append(errs, b.c.unload(b.m))
		b.m = module{}
		return errors.Join(errs...)
	})
}
