// Package tegra is the Jetson sysfs backend: it reads and drives a Jetson's power mode
// (online CPU cores, cpufreq, GPU devfreq, BPMP EMC clock) and reads its INA3221 power
// rails and thermal zones, all through a filesystem root so the same code runs against
// a real board ("/") or a fake tree in a test or the simulator.
//
// Everything is discovered from the tree at Open (cpufreq policies, the GPU's devfreq
// device, the EMC table, the power monitors); the catalog's BoardSpec only supplies the
// board's name, the GPU's of_node name hint and the rule for totalling power rails.
package tegra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// BackendName is the Snapshot.Backend value of snapshots this package takes.
const BackendName = "tegra"

// Board paths (docs/design.md §4).
const (
	cpuDir        = "/sys/devices/system/cpu"
	policyGlob    = cpuDir + "/cpufreq/policy*"
	devfreqClass  = "/sys/class/devfreq"
	bpmpDebug     = "/sys/kernel/debug/bpmp/debug"
	emcClkDir     = bpmpDebug + "/clk/emc"
	emcRatesPath  = bpmpDebug + "/emc/possible_rates"
	hwmonGlob     = "/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
	iioGlob       = "/sys/bus/i2c/drivers/ina3221x/*/iio:device*"
	thermalGlob   = "/sys/class/thermal/thermal_zone*"
	debugfsAdvice = "is debugfs mounted (mount -t debugfs none /sys/kernel/debug) and are you running as root?"
)

// gpuNodeNames are the of_node names of Jetson integrated GPUs (jetson-stats matches
// the same list): ga10b Orin (JetPack 5), gv11b Xavier, gp10b TX2, gpu Orin (JetPack 6).
var gpuNodeNames = []string{"ga10b", "gv11b", "gp10b", "gpu"}

// Options are Open's optional dependencies; the zero value is the real thing.
type Options struct {
	// FS reads and writes board files; default OSFS{Root: root}.
	FS FileSystem
	// Now timestamps power readings and snapshots; default time.Now.
	Now func() time.Time
	// Logger receives discovery notes; default slog.Default().
	Logger *slog.Logger
}

// cpu is one logical CPU and its hotplug file ("" when it has none: cpu0 on many
// kernels, which is then always online).
type cpu struct {
	ID     int
	Online string
}

// policy is one cpufreq policy (a cluster of CPUs sharing a clock).
type policy struct {
	Num      int
	Dir      string
	CPUs     []int
	FreqsKHz []int64 // nil when the table could not be read at Open (cluster offline: EBUSY)
}

func (p policy) file(name string) string { return p.Dir + "/" + name }

// gpu is the GPU's devfreq directory (resolved, no symlinks).
type gpu struct {
	Dir     string
	Node    string
	FreqsHz []int64
}

func (g gpu) file(name string) string { return g.Dir + "/" + name }

// emc is the BPMP memory clock.
type emc struct {
	RatesHz []int64
}

func emcFile(name string) string { return emcClkDir + "/" + name }

// rail is one power monitor channel.
type rail struct {
	Name  string
	Volt  string // mV
	Curr  string // mA
	Power string // mW; IIO only (hwmon power is mV·mA)
}

// Backend drives one Jetson through its sysfs/debugfs files. It implements
// powermode.Backend. Methods are safe for concurrent use; Apply and Restore are
// serialised.
type Backend struct {
	t        tree
	spec     *powermode.BoardSpec
	info     powermode.BoardInfo
	cpus     []cpu
	policies []policy
	gpu      gpu
	emc      emc
	space    *powermode.Space
	now      func() time.Time
	log      *slog.Logger

	mu sync.Mutex
}

var _ powermode.Backend = (*Backend)(nil)

// Open discovers the board's control files under root (default "/") and returns a
// backend for it. spec supplies the GPU of_node hint and the power-total rule; info is
// what Info returns (its Name defaults to spec.Name).
func Open(ctx context.Context, root string, spec *powermode.BoardSpec, info powermode.BoardInfo) (*Backend, error) {
	return OpenWith(ctx, root, spec, info, Options{})
}

// OpenWith is Open with injected dependencies (tests, the simulator).
func OpenWith(ctx context.Context, root string, spec *powermode.BoardSpec, info powermode.BoardInfo, opt Options) (*Backend, error) {
	if spec == nil {
		return nil, errors.New("tegra: no board spec given")
	}
	if root == "" {
		root = "/"
	}
	if opt.FS == nil {
		opt.FS = OSFS{Root: root}
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if info.Name == "" {
		info.Name = spec.Name
	}
	b := &Backend{t: tree{root: root, fs: opt.FS}, spec: spec, info: info, now: opt.Now, log: opt.Logger}
	for _, step := range []func(context.Context) error{b.discoverCPU, b.discoverGPU, b.discoverEMC} {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("tegra: open %s: %w", root, err)
		}
		if err := step(ctx); err != nil {
			return nil, fmt.Errorf("tegra: open board under %s: %w", root, err)
		}
	}
	lv := powermode.Levels{CPUKHz: b.cpuFreqsKHz(), GPUHz: slices.Clone(b.gpu.FreqsHz), EMCHz: slices.Clone(b.emc.RatesHz)}
	for i := range b.cpus {
		lv.Cores = append(lv.Cores, i+1)
	}
	sp, err := powermode.NewSpace(lv)
	if err != nil {
		return nil, fmt.Errorf("tegra: board under %s: %w", root, err)
	}
	b.space = sp
	if spec.CPU.Cores != 0 && spec.CPU.Cores != len(b.cpus) {
		b.log.Warn("tegra: the tree's CPU count differs from the catalog's; using the tree's",
			"board", spec.Name, "tree_cores", len(b.cpus), "catalog_cores", spec.CPU.Cores)
	}
	return b, nil
}

func (b *Backend) discoverCPU(context.Context) error {
	dirs, err := b.t.glob(policyGlob)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("CPU: no cpufreq policy under %s/cpufreq: is the cpufreq driver loaded (and /sys mounted)?", cpuDir)
	}
	seen := map[int]bool{}
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(path.Base(d), "policy"))
		if err != nil {
			continue // not policyN
		}
		p := policy{Num: n, Dir: d}
		rel, err := b.t.readString(p.file("related_cpus"))
		if err != nil {
			return fmt.Errorf("CPU: read %s: %w", p.file("related_cpus"), err)
		}
		if p.CPUs, err = parseCPUList(rel); err != nil || len(p.CPUs) == 0 {
			return fmt.Errorf("CPU: %s: cannot parse CPU list %q", p.file("related_cpus"), rel)
		}
		for _, c := range p.CPUs {
			if seen[c] {
				return fmt.Errorf("CPU: cpu%d is in two cpufreq policies (%s)", c, d)
			}
			seen[c] = true
		}
		raw, err := b.t.readString(p.file("scaling_available_frequencies"))
		switch {
		case err == nil:
			if p.FreqsKHz, err = parseInts(raw); err != nil || len(p.FreqsKHz) == 0 {
				return fmt.Errorf("CPU: %s: cannot parse frequency table %q", p.file("scaling_available_frequencies"), raw)
			}
			slices.Sort(p.FreqsKHz)
		case errors.Is(err, syscall.EBUSY):
			// A policy whose CPUs are all offline is inactive and its files answer EBUSY;
			// its table is checked when Apply brings a CPU of it online.
			b.log.Info("tegra: cpufreq policy inactive (its CPUs are offline); using the other clusters' table", "policy", d)
		default:
			return fmt.Errorf("CPU: read %s: %w (does this kernel's cpufreq driver publish a frequency table?)", p.file("scaling_available_frequencies"), err)
		}
		b.policies = append(b.policies, p)
	}
	slices.SortFunc(b.policies, func(a, c policy) int { return a.Num - c.Num })
	ids := make([]int, 0, len(seen))
	for c := range seen {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := cpu{ID: id, Online: fmt.Sprintf("%s/cpu%d/online", cpuDir, id)}
		if !b.t.exists(c.Online) {
			if id != ids[0] {
				b.log.Info("tegra: CPU has no hotplug file; it stays online", "cpu", id)
			}
			c.Online = ""
		}
		b.cpus = append(b.cpus, c)
	}
	if len(b.cpuFreqsKHz()) == 0 {
		return fmt.Errorf("CPU: the cpufreq policies under %s/cpufreq share no frequency (or none could be read)", cpuDir)
	}
	return nil
}

// cpuFreqsKHz is the frequencies every readable policy offers: Mode.CPUKHz applies to
// all online clusters, so it must be valid for each.
func (b *Backend) cpuFreqsKHz() []int64 {
	var out []int64
	first := true
	for _, p := range b.policies {
		if p.FreqsKHz == nil {
			continue
		}
		if first {
			out, first = slices.Clone(p.FreqsKHz), false
			continue
		}
		out = slices.DeleteFunc(out, func(f int64) bool { return !slices.Contains(p.FreqsKHz, f) })
	}
	return out
}

func (b *Backend) discoverGPU(context.Context) error {
	names := gpuNodeNames
	if n := b.spec.GPU.Node; n != "" && !slices.Contains(names, n) {
		names = append([]string{n}, names...)
	}
	entries, err := b.t.glob(devfreqClass + "/*")
	if err != nil {
		return err
	}
	type found struct{ dir, node string }
	var cands []found
	for _, e := range entries {
		node, err := b.t.readString(e + "/device/of_node/name")
		if err != nil || !slices.Contains(names, node) {
			continue
		}
		dir, err := b.t.realpath(e)
		if err != nil {
			return fmt.Errorf("GPU: resolve %s: %w", e, err)
		}
		cands = append(cands, found{dir, node})
	}
	// Prefer the catalog's node name when more than one devfreq device matches.
	slices.SortStableFunc(cands, func(a, c found) int {
		return boolRank(a.node == b.spec.GPU.Node) - boolRank(c.node == b.spec.GPU.Node)
	})
	var tried []string
	if len(cands) == 0 {
		// Fall back to the catalog's known device paths (a tree without /sys/class).
		for _, layout := range sortedKeys(b.spec.GPU.Paths) {
			dev := b.spec.GPU.Paths[layout]
			dir := dev + "/devfreq/" + path.Base(dev)
			tried = append(tried, dir)
			if b.t.exists(dir + "/available_frequencies") {
				cands = append(cands, found{dir, b.spec.GPU.Node})
				break
			}
		}
	}
	if len(cands) == 0 {
		msg := fmt.Sprintf("GPU: no devfreq device under %s whose device/of_node/name is one of %s", devfreqClass, strings.Join(names, ", "))
		if len(tried) > 0 {
			msg += " (also tried " + strings.Join(tried, ", ") + ")"
		}
		return errors.New(msg + ": is the GPU driver (nvgpu) loaded?")
	}
	g := gpu{Dir: cands[0].dir, Node: cands[0].node}
	raw, err := b.t.readString(g.file("available_frequencies"))
	if err != nil {
		return fmt.Errorf("GPU: read %s: %w", g.file("available_frequencies"), err)
	}
	if g.FreqsHz, err = parseInts(raw); err != nil || len(g.FreqsHz) == 0 {
		return fmt.Errorf("GPU: %s: cannot parse frequency table %q", g.file("available_frequencies"), raw)
	}
	slices.Sort(g.FreqsHz)
	for _, f := range []string{"min_freq", "max_freq"} {
		if !b.t.exists(g.file(f)) {
			return fmt.Errorf("GPU: %s is missing: is this a devfreq device?", g.file(f))
		}
	}
	b.gpu = g
	return nil
}

func (b *Backend) discoverEMC(context.Context) error {
	for _, f := range []string{emcFile("rate"), emcFile("mrq_rate_locked")} {
		if !b.t.exists(f) {
			return fmt.Errorf("EMC: %s is missing: %s", f, debugfsAdvice)
		}
	}
	raw, err := b.t.readString(emcRatesPath)
	if err != nil {
		return fmt.Errorf("EMC: read %s: %w: %s", emcRatesPath, err, debugfsAdvice)
	}
	khz, err := parseInts(strings.TrimSuffix(strings.TrimSpace(raw), "(kHz)"))
	if err != nil || len(khz) == 0 {
		return fmt.Errorf("EMC: %s: cannot parse rate table %q (want e.g. \"204000 665600 2133000 3199000 (kHz)\")", emcRatesPath, raw)
	}
	for _, k := range khz {
		b.emc.RatesHz = append(b.emc.RatesHz, k*1000)
	}
	slices.Sort(b.emc.RatesHz)
	b.emc.RatesHz = slices.Compact(b.emc.RatesHz)
	return nil
}

// parseInts parses whitespace-separated integers (a trailing space is normal in sysfs).
func parseInts(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Fields(s) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// parseCPUList parses "0 1 2 3" (related_cpus) and range lists such as "0-3,8".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return nil, fmt.Errorf("bad range %q", f)
			}
		}
		for c := a; c <= z; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func boolRank(v bool) int {
	if v {
		return 0
	}
	return 1
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
