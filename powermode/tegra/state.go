package tegra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// fileValue is one control file's exact contents.
type fileValue struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type cpuState struct {
	CPU    int       `json:"cpu"`
	Online fileValue `json:"online"`
}

type policyState struct {
	Policy   int       `json:"policy"`
	Governor fileValue `json:"governor"`
	Min      fileValue `json:"min"`
	Max      fileValue `json:"max"`
	// Unreadable says why the policy's files could not be read (every CPU of it was
	// offline: the kernel answers EBUSY); such a policy is not written back.
	Unreadable string `json:"unreadable,omitempty"`
}

type gpuState struct {
	Governor fileValue `json:"governor"`
	Min      fileValue `json:"min"`
	Max      fileValue `json:"max"`
}

type emcState struct {
	Locked fileValue `json:"locked"`
	Rate   fileValue `json:"rate"`
}

// boardState is every file Apply may change, as found. It is the Snapshot's State.
type boardState struct {
	CPUs     []cpuState    `json:"cpus"` // CPUs with a hotplug file, ascending
	Policies []policyState `json:"policies"`
	GPU      gpuState      `json:"gpu"`
	EMC      emcState      `json:"emc"`
}

func (b *Backend) readFile(p string) (fileValue, error) {
	data, err := b.t.fs.ReadFile(p)
	if err != nil {
		return fileValue{}, fmt.Errorf("read %s: %w", p, cause(err))
	}
	return fileValue{Path: p, Content: string(data)}, nil
}

func (b *Backend) readState() (*boardState, error) {
	s := &boardState{}
	for _, c := range b.cpus {
		if c.Online == "" {
			continue
		}
		v, err := b.readFile(c.Online)
		if err != nil {
			return nil, err
		}
		s.CPUs = append(s.CPUs, cpuState{CPU: c.ID, Online: v})
	}
	online, err := b.onlineSet()
	if err != nil {
		return nil, err
	}
	for _, p := range b.policies {
		ps, err := b.readPolicy(p, p.active(online))
		if err != nil {
			return nil, err
		}
		s.Policies = append(s.Policies, ps)
	}
	for _, f := range []struct {
		dst *fileValue
		p   string
	}{
		{&s.GPU.Governor, b.gpu.file("governor")},
		{&s.GPU.Min, b.gpu.file("min_freq")},
		{&s.GPU.Max, b.gpu.file("max_freq")},
		{&s.EMC.Locked, emcFile("mrq_rate_locked")},
		{&s.EMC.Rate, emcFile("rate")},
	} {
		if *f.dst, err = b.readFile(f.p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// readPolicy reads one policy's limits and governor. An inactive policy (no CPU online)
// that cannot be read is recorded as unreadable rather than failing.
func (b *Backend) readPolicy(p policy, active bool) (policyState, error) {
	ps := policyState{Policy: p.Num}
	var err error
	for _, f := range []struct {
		dst  *fileValue
		name string
	}{{&ps.Governor, "scaling_governor"}, {&ps.Min, "scaling_min_freq"}, {&ps.Max, "scaling_max_freq"}} {
		if *f.dst, err = b.readFile(p.file(f.name)); err != nil {
			if active {
				return ps, err
			}
			return policyState{Policy: p.Num, Unreadable: err.Error()}, nil
		}
	}
	return ps, nil
}

// writeState puts the board back to s, writing only files whose contents differ, in a
// safe order: CPUs that s has online come online first (so every cluster s configures
// is active), then cluster governors and limits, then CPUs that s has offline go
// offline (highest first), then the GPU, then the EMC (unlocked last, so the rate is
// never left floating in between). Each min/max pair keeps min <= max throughout. It
// goes on after a failure, to put back as much as it can, and returns every failure.
//
// With reopenHidden (Restore, not rollback), a cluster that was offline when s was
// taken is brought online for a moment and reopened to its hardware range: the kernel
// keeps an inactive policy's limits, so limits pinned since would otherwise linger
// hidden and come back the next time anything onlines the cluster.
func (b *Backend) writeState(s *boardState, reopenHidden bool) error {
	var errs []error
	for _, c := range s.CPUs {
		if isOn(c.Online.Content) {
			errs = append(errs, b.restoreFile(c.Online))
		}
	}
	online, err := b.onlineSet()
	if err != nil {
		errs = append(errs, err)
	}
	if reopenHidden && err == nil {
		for i, ps := range s.Policies {
			// A cluster offline in s: unreadable there (the kernel answers EBUSY), or
			// read while inactive (a tree without that rule, e.g. faketree); either way
			// limits written since would linger in the inactive policy.
			if i >= len(b.policies) || b.policies[i].active(online) || (ps.Unreadable == "" && s.policyActive(b.policies[i])) {
				continue
			}
			for _, c := range b.cpus {
				if c.Online != "" && slices.Contains(b.policies[i].CPUs, c.ID) {
					errs = append(errs, b.writeChecked(c.Online, "1\n"))
					break
				}
			}
		}
		if online, err = b.onlineSet(); err != nil {
			errs = append(errs, err)
		}
	}
	for i, ps := range s.Policies {
		if i >= len(b.policies) || !b.policies[i].active(online) {
			continue
		}
		if ps.Unreadable != "" {
			// The cluster was offline when s was taken, so its limits were unreadable.
			// A rollback leaves it alone: Apply reads a cluster's limits as soon as it
			// brings it online, before writing them, so one still unreadable in s was
			// never written. A restore reopens it to the hardware range (what boot
			// and nvpmodel leave) before it goes offline again, so no limit pinned
			// since the snapshot lingers hidden in the inactive policy.
			if reopenHidden {
				errs = append(errs, b.reopenPolicy(b.policies[i]))
			}
			continue
		}
		errs = append(errs, b.restoreFile(ps.Governor), b.restorePair(ps.Min, ps.Max))
	}
	for i := len(s.CPUs) - 1; i >= 0; i-- {
		if c := s.CPUs[i]; !isOn(c.Online.Content) {
			errs = append(errs, b.restoreFile(c.Online))
		}
	}
	errs = append(errs, b.restoreFile(s.GPU.Governor), b.restorePair(s.GPU.Min, s.GPU.Max))
	if isOn(s.EMC.Locked.Content) {
		errs = append(errs, b.restoreFile(s.EMC.Locked), b.restoreFile(s.EMC.Rate))
	} else {
		errs = append(errs, b.restoreFile(s.EMC.Rate), b.restoreFile(s.EMC.Locked))
	}
	return errors.Join(errs...)
}

// policyActive reports whether one of p's CPUs is online in s.
func (s *boardState) policyActive(p policy) bool {
	for _, c := range s.CPUs {
		if isOn(c.Online.Content) && slices.Contains(p.CPUs, c.CPU) {
			return true
		}
	}
	// cpu0 has no online file in s when it cannot go offline: it is always online.
	return slices.Contains(p.CPUs, 0)
}

// reopenPolicy sets a policy's limits to cpuinfo_min_freq..cpuinfo_max_freq.
func (b *Backend) reopenPolicy(p policy) error {
	lo, err := b.readFile(p.file("cpuinfo_min_freq"))
	if err != nil {
		return err
	}
	hi, err := b.readFile(p.file("cpuinfo_max_freq"))
	if err != nil {
		return err
	}
	return b.restorePair(fileValue{Path: p.file("scaling_min_freq"), Content: lo.Content}, fileValue{Path: p.file("scaling_max_freq"), Content: hi.Content})
}

func isOn(content string) bool { return strings.TrimSpace(content) != "0" }

// restoreFile writes v's exact contents back unless the file already holds them.
func (b *Backend) restoreFile(v fileValue) error {
	cur, err := b.t.fs.ReadFile(v.Path)
	if err == nil && string(cur) == v.Content {
		return nil
	}
	return b.writeChecked(v.Path, v.Content)
}

// restorePair writes a min/max pair back so that min <= max holds after each write:
// raising max goes first, lowering min goes first.
func (b *Backend) restorePair(minV, maxV fileValue) error {
	first, second := minV, maxV
	if target, err := strconv.ParseInt(strings.TrimSpace(maxV.Content), 10, 64); err == nil {
		if cur, err := b.readInt(maxV.Path); err == nil && target >= cur {
			first, second = maxV, minV
		}
	}
	if err := b.restoreFile(first); err != nil {
		return err
	}
	return b.restoreFile(second)
}

// Snapshot captures every file Apply may change: each CPU's online file, each cpufreq
// policy's governor and limits, the GPU's governor and limits, the EMC lock and rate.
func (b *Backend) Snapshot(ctx context.Context) (*powermode.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.readState()
	if err != nil {
		return nil, fmt.Errorf("tegra: snapshot: %w", err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("tegra: snapshot: %w", err)
	}
	return &powermode.Snapshot{Backend: BackendName, Board: b.info.Name, TakenAt: b.now().UTC(), State: raw}, nil
}

// Restore writes a snapshot back (see writeState for the order). It refuses a snapshot
// from another backend or board, and one naming a file this backend does not manage.
func (b *Backend) Restore(ctx context.Context, snap *powermode.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if snap == nil {
		return errors.New("tegra: restore: no snapshot given")
	}
	if snap.Backend != BackendName {
		return fmt.Errorf("tegra: restore: snapshot was taken by backend %q, not %q", snap.Backend, BackendName)
	}
	if snap.Board != "" && b.info.Name != "" && snap.Board != b.info.Name {
		return fmt.Errorf("tegra: restore: snapshot is of board %q, this is %q", snap.Board, b.info.Name)
	}
	var s boardState
	if err := json.Unmarshal(snap.State, &s); err != nil {
		return fmt.Errorf("tegra: restore: decode snapshot state: %w", err)
	}
	if err := b.checkState(&s); err != nil {
		return fmt.Errorf("tegra: restore: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writeState(&s, true); err != nil {
		return fmt.Errorf("tegra: restore snapshot taken %s: %w", snap.TakenAt.Format("2006-01-02T15:04:05Z07:00"), err)
	}
	return nil
}

// checkState makes sure a decoded state writes only this board's control files, in the
// places writeState expects them.
func (b *Backend) checkState(s *boardState) error {
	bad := func(role, got, want string) error {
		return fmt.Errorf("snapshot's %s is %q, this board's is %q: the snapshot is from another board or kernel layout", role, got, want)
	}
	hot := 0
	for _, c := range b.cpus {
		if c.Online == "" {
			continue
		}
		if hot >= len(s.CPUs) || s.CPUs[hot].Online.Path != c.Online {
			return fmt.Errorf("snapshot's CPU list does not match this board's hotplug files (cpu%d)", c.ID)
		}
		hot++
	}
	if hot != len(s.CPUs) {
		return fmt.Errorf("snapshot has %d CPU hotplug files, this board %d", len(s.CPUs), hot)
	}
	if len(s.Policies) != len(b.policies) {
		return fmt.Errorf("snapshot has %d cpufreq policies, this board %d", len(s.Policies), len(b.policies))
	}
	for i, ps := range s.Policies {
		p := b.policies[i]
		if ps.Unreadable != "" {
			continue
		}
		for _, f := range []struct{ got, want string }{
			{ps.Governor.Path, p.file("scaling_governor")}, {ps.Min.Path, p.file("scaling_min_freq")}, {ps.Max.Path, p.file("scaling_max_freq")},
		} {
			if f.got != f.want {
				return bad("policy file", f.got, f.want)
			}
		}
	}
	for _, f := range []struct{ got, want string }{
		{s.GPU.Governor.Path, b.gpu.file("governor")}, {s.GPU.Min.Path, b.gpu.file("min_freq")}, {s.GPU.Max.Path, b.gpu.file("max_freq")},
		{s.EMC.Locked.Path, emcFile("mrq_rate_locked")}, {s.EMC.Rate.Path, emcFile("rate")},
	} {
		if f.got != f.want {
			return bad("control file", f.got, f.want)
		}
	}
	return nil
}
