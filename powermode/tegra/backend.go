package tegra

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Info identifies the board.
func (b *Backend) Info() powermode.BoardInfo { return b.info }

// Space is the grid of levels found in the tree: cores 1..N, the CPU frequencies every
// cluster offers, the GPU's available_frequencies and the EMC's possible_rates.
func (b *Backend) Space() *powermode.Space { return b.space }

// Cores is the number of CPU cores the tree has.
func (b *Backend) Cores() int { return len(b.cpus) }

// GPUNode is the of_node name of the GPU found (ga10b, gv11b, gpu, ...).
func (b *Backend) GPUNode() string { return b.gpu.Node }

// LockPath is the host path of the node fulcrumd locks to own the board
// (powermode.LockBoard): the GPU's devfreq directory, which every Jetson tree and every
// simulated tree has, resolved so that two roots naming one tree lock one inode.
func (b *Backend) LockPath() string { return b.t.host(b.gpu.Dir) }

// Check reports why m is not one of this board's modes, naming each knob whose value is
// not a level and the nearest allowed levels; nil when m is in the space.
func (b *Backend) Check(m powermode.Mode) error {
	if err := b.space.Check(m); err != nil {
		return fmt.Errorf("%w (fulcrumctl board modes lists every mode)", err)
	}
	return nil
}

// Current reads the mode the board is set to: the number of online CPUs, cpu0's
// policy's scaling_max_freq (every online cluster gets the same value from Apply),
// the GPU's max_freq, and the EMC rate when it is locked, else its max_rate (the
// clock floats up to that). These are what was written, not cur_freq, which a
// governor or a thermal cap may hold lower.
func (b *Backend) Current(ctx context.Context) (powermode.Mode, error) {
	if err := ctx.Err(); err != nil {
		return powermode.Mode{}, err
	}
	return b.current()
}

func (b *Backend) current() (powermode.Mode, error) {
	var m powermode.Mode
	online, err := b.onlineSet()
	if err != nil {
		return m, err
	}
	m.Cores = len(online)
	for _, p := range b.policies {
		if !p.active(online) {
			continue
		}
		if m.CPUKHz, err = b.readInt(p.file("scaling_max_freq")); err != nil {
			return m, err
		}
		break
	}
	if m.GPUHz, err = b.readInt(b.gpu.file("max_freq")); err != nil {
		return m, err
	}
	locked, err := b.readInt(emcFile("mrq_rate_locked"))
	if err != nil {
		return m, err
	}
	if locked != 0 {
		m.EMCHz, err = b.readInt(emcFile("rate"))
		return m, err
	}
	if b.t.exists(emcFile("max_rate")) {
		m.EMCHz, err = b.readInt(emcFile("max_rate"))
		return m, err
	}
	m.EMCHz = b.emc.RatesHz[len(b.emc.RatesHz)-1]
	return m, nil
}

// onlineSet reads which CPUs are online; a CPU without a hotplug file always is.
func (b *Backend) onlineSet() (map[int]bool, error) {
	set := map[int]bool{}
	for _, c := range b.cpus {
		if c.Online == "" {
			set[c.ID] = true
			continue
		}
		v, err := b.readInt(c.Online)
		if err != nil {
			return nil, err
		}
		if v != 0 {
			set[c.ID] = true
		}
	}
	return set, nil
}

func (p policy) active(online map[int]bool) bool {
	return slices.ContainsFunc(p.CPUs, func(c int) bool { return online[c] })
}

// Apply sets the board to m. The writes, in this order (docs/board-layer.md says why):
//
//  1. CPU hotplug: cpu0..cpu(m.Cores-1) online (lowest first), the rest offline
//     (highest first), so whole clusters go offline from the top;
//  2. for each cpufreq policy with an online CPU: scaling_min_freq = scaling_max_freq =
//     m.CPUKHz (a fully offline cluster's policy is inactive and refuses writes);
//  3. GPU devfreq min_freq = max_freq = m.GPUHz;
//  4. EMC: mrq_rate_locked = 1, then rate = m.EMCHz.
//
// Each min/max pair is written so that min never exceeds max (going down: min first;
// going up: max first), because older kernels refuse min > max with EINVAL. Every
// written file is read back and compared. On any failure the exact previous contents
// are written back (in the same safe order) and the error names the file, the cause
// and the mode the board was left in.
func (b *Backend) Apply(ctx context.Context, m powermode.Mode) error {
	if err := b.Check(m); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, err := b.readState()
	if err != nil {
		return fmt.Errorf("apply %s: read the board's state before changing it: %w (nothing was changed)", m, err)
	}
	if err := b.apply(ctx, m, prev); err != nil {
		return b.rollback(fmt.Errorf("apply %s: %w", m, err), prev)
	}
	return nil
}

func (b *Backend) apply(ctx context.Context, m powermode.Mode, prev *boardState) error {
	want := map[int]bool{}
	for i, c := range b.cpus {
		want[c.ID] = i < m.Cores
	}
	for _, c := range b.cpus {
		if want[c.ID] && c.Online == "" {
			continue // always online
		}
		if !want[c.ID] && c.Online == "" {
			return fmt.Errorf("cpu%d has no hotplug file (%s/cpu%d/online), so it cannot go offline: use at least %d cores", c.ID, cpuDir, c.ID, c.ID+1)
		}
	}
	// 1. Hotplug: online lowest first, then offline highest first.
	for _, c := range b.cpus {
		if want[c.ID] && c.Online != "" {
			if err := b.setInt(ctx, c.Online, 1); err != nil {
				return err
			}
		}
	}
	for i := len(b.cpus) - 1; i >= 0; i-- {
		c := b.cpus[i]
		if !want[c.ID] {
			if err := b.setInt(ctx, c.Online, 0); err != nil {
				return err
			}
		}
	}
	online, err := b.onlineSet()
	if err != nil {
		return err
	}
	// 2. Clusters with an online CPU.
	for i, p := range b.policies {
		if !p.active(online) {
			continue
		}
		if prev.Policies[i].Unreadable != "" {
			// The cluster was offline when the state was read; now that it is online,
			// read what its limits are so a rollback can put them back.
			ps, err := b.readPolicy(p, true)
			if err != nil {
				return err
			}
			prev.Policies[i] = ps
		}
		if p.FreqsKHz == nil {
			raw, err := b.t.readString(p.file("scaling_available_frequencies"))
			if err != nil {
				return fmt.Errorf("read %s: %w", p.file("scaling_available_frequencies"), cause(err))
			}
			if fs, _ := parseInts(raw); !slices.Contains(fs, m.CPUKHz) {
				return fmt.Errorf("%s does not offer %d kHz (it offers %s)", p.Dir, m.CPUKHz, raw)
			}
		}
		if err := b.pin(ctx, p.file("scaling_min_freq"), p.file("scaling_max_freq"), m.CPUKHz); err != nil {
			return err
		}
	}
	// 3. GPU.
	if err := b.pin(ctx, b.gpu.file("min_freq"), b.gpu.file("max_freq"), m.GPUHz); err != nil {
		return err
	}
	// 4. EMC: lock first, or BPMP lets the rate float again.
	if err := b.setInt(ctx, emcFile("mrq_rate_locked"), 1); err != nil {
		return err
	}
	return b.setInt(ctx, emcFile("rate"), m.EMCHz)
}

// pin sets min = max = v, writing so that min <= max holds after every write.
func (b *Backend) pin(ctx context.Context, minPath, maxPath string, v int64) error {
	curMax, err := b.readInt(maxPath)
	if err != nil {
		return err
	}
	order := []string{minPath, maxPath} // going down: min first
	if v >= curMax {
		order = []string{maxPath, minPath} // going up: max first
	}
	for _, p := range order {
		if err := b.setInt(ctx, p, v); err != nil {
			return err
		}
	}
	return nil
}

// setInt writes v to p unless p already holds it, then reads it back.
func (b *Backend) setInt(ctx context.Context, p string, v int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("before writing %s: %w", p, err)
	}
	if cur, err := b.readInt(p); err == nil && cur == v {
		return nil
	}
	return b.writeChecked(p, strconv.FormatInt(v, 10)+"\n")
}

// writeChecked writes data to p and reads it back: a sysfs store can accept a value
// and clamp it (a cap, a rounding), which only the read-back shows.
func (b *Backend) writeChecked(p, data string) error {
	if err := b.t.fs.WriteFile(p, []byte(data)); err != nil {
		return fmt.Errorf("write %s: %w", p, cause(err))
	}
	got, err := b.t.fs.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read back %s: %w", p, cause(err))
	}
	if !sameValue(string(got), data) {
		return fmt.Errorf("read back %s: wrote %q, it reads %q (is a cap such as nvpmodel or thermal limiting it?)",
			p, strings.TrimSpace(data), strings.TrimSpace(string(got)))
	}
	return nil
}

// rollback restores prev after a failed Apply and builds the error to return.
func (b *Backend) rollback(applyErr error, prev *boardState) error {
	if rerr := b.writeState(prev, false); rerr != nil {
		return fmt.Errorf("%w; rolling back also failed: %v; the board's state is unknown: run `fulcrumctl board restore` or reboot", applyErr, rerr)
	}
	m, err := b.current()
	if err != nil {
		return fmt.Errorf("%w; rolled back, but reading the mode failed: %v", applyErr, err)
	}
	return fmt.Errorf("%w; board left in mode %s (its previous state)", applyErr, m)
}

func (b *Backend) readInt(p string) (int64, error) {
	s, err := b.t.readString(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, cause(err))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %q is not an integer", p, s)
	}
	return v, nil
}

// sameValue compares two file contents as the kernel means them: numbers by value,
// words without the surrounding whitespace.
func sameValue(a, c string) bool {
	a, c = strings.TrimSpace(a), strings.TrimSpace(c)
	if a == c {
		return true
	}
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(c, 10, 64)
	return err1 == nil && err2 == nil && x == y
}

// cause strips the host path from an *fs.PathError: messages name the board path.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
