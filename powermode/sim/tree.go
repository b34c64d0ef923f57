package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// In-board paths the simulator reads (control files, written by the tegra backend or a
// user) and writes (sensor files). docs/design.md §4 has the layout.
const (
	cpuDir     = "/sys/devices/system/cpu"
	emcClkDir  = "/sys/kernel/debug/bpmp/debug/clk/emc"
	emcCapJP5  = "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap"
	emcCapJP6  = "/sys/kernel/nvpmodel_clk_cap/emc"
	simRunDir  = "/run/fulcrum-sim"
	markerPath = MarkerPath
	// MarkerPath is the in-board file that marks a simulator tree (JSON: board, layout,
	// the physics loop's pid or 0, created_at).
	MarkerPath = simRunDir + "/board.json"
	// ActivityDir is where running minibatches register themselves (in-board path):
	// one <pid>-<unique>.json file per running minibatch, see Activity.
	ActivityDir = simRunDir + "/activity"
)

// boardPaths are a board's files under a root, resolved once.
type boardPaths struct {
	root       string
	spec       *powermode.BoardSpec
	gpuDev     string // in-board GPU device directory
	gpuDevfreq string // in-board GPU devfreq directory
}

// findPaths resolves the board's variable paths under root: the GPU device is the first
// of the spec's layout paths that exists there.
func findPaths(root string, spec *powermode.BoardSpec) (*boardPaths, error) {
	layouts := make([]string, 0, len(spec.GPU.Paths))
	for l := range spec.GPU.Paths {
		layouts = append(layouts, l)
	}
	slices.Sort(layouts)
	for _, l := range layouts {
		dev := spec.GPU.Paths[l]
		df := dev + "/devfreq/" + filepath.Base(dev)
		if _, err := os.Stat(filepath.Join(root, df, "max_freq")); err == nil {
			return &boardPaths{root: root, spec: spec, gpuDev: dev, gpuDevfreq: df}, nil
		}
	}
	return nil, fmt.Errorf("sim: no %s GPU devfreq directory under %s (tried %v): is it a simulated %s tree? Start one with fulcrumctl sim board --dir %s --board %s",
		spec.Name, root, layouts, spec.Name, root, spec.Name)
}

func (p *boardPaths) path(abs string) string { return filepath.Join(p.root, abs) }

func (p *boardPaths) readString(abs string) (string, error) {
	b, err := os.ReadFile(p.path(abs))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (p *boardPaths) readInt(abs string) (int64, error) {
	s, err := p.readString(abs)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sim: %s: %q is not an integer", abs, s)
	}
	return v, nil
}

// clusterState is one cpufreq policy as written.
type clusterState struct {
	policy     int
	cpus       []int
	online     []int // online cpus of the cluster
	minKHz     int64
	maxKHz     int64
	performing bool // governor performance: runs at max even when idle
}

// boardState is what the control files say, read in one pass.
type boardState struct {
	online   []int // online cpus, ascending
	clusters []clusterState
	gpuMinHz int64
	gpuMaxHz int64
	gpuPerf  bool
	emcHz    int64 // the rate the memory runs at (locked rate, or the cap / max)
}

// readState reads the control files. A cluster whose every CPU is offline keeps its
// files but does not count.
func (p *boardPaths) readState() (boardState, error) {
	var st boardState
	for cpu := range p.spec.CPU.Cores {
		on := true
		if cpu > 0 {
			v, err := p.readString(fmt.Sprintf("%s/cpu%d/online", cpuDir, cpu))
			switch {
			case errors.Is(err, os.ErrNotExist):
				// No hotplug file: always online, like cpu0.
			case err != nil:
				return st, fmt.Errorf("sim: read cpu%d/online: %w", cpu, err)
			default:
				on = v == "1"
			}
		}
		if on {
			st.online = append(st.online, cpu)
		}
	}
	for _, cl := range p.spec.CPU.Clusters {
		dir := fmt.Sprintf("%s/cpufreq/policy%d", cpuDir, cl.Policy)
		c := clusterState{policy: cl.Policy, cpus: cl.CPUs}
		for _, cpu := range cl.CPUs {
			if slices.Contains(st.online, cpu) {
				c.online = append(c.online, cpu)
			}
		}
		var err error
		if c.maxKHz, err = p.readInt(dir + "/scaling_max_freq"); err != nil {
			return st, fmt.Errorf("sim: read policy%d: %w", cl.Policy, err)
		}
		if c.minKHz, err = p.readInt(dir + "/scaling_min_freq"); err != nil {
			return st, fmt.Errorf("sim: read policy%d: %w", cl.Policy, err)
		}
		gov, _ := p.readString(dir + "/scaling_governor")
		c.performing = gov == "performance"
		c.minKHz = min(c.minKHz, c.maxKHz)
		st.clusters = append(st.clusters, c)
	}
	var err error
	if st.gpuMaxHz, err = p.readInt(p.gpuDevfreq + "/max_freq"); err != nil {
		return st, fmt.Errorf("sim: read GPU max_freq: %w", err)
	}
	if st.gpuMinHz, err = p.readInt(p.gpuDevfreq + "/min_freq"); err != nil {
		return st, fmt.Errorf("sim: read GPU min_freq: %w", err)
	}
	st.gpuMinHz = min(st.gpuMinHz, st.gpuMaxHz)
	gov, _ := p.readString(p.gpuDevfreq + "/governor")
	st.gpuPerf = gov == "performance"
	st.emcHz, err = p.readEMC()
	return st, err
}

// readEMC is the EMC rate in effect: a locked rate rounded up to the table (as the BPMP
// does), else the highest rate allowed by max_rate and nvpmodel's cap (actmon raises
// the clock under load; the model takes the busy rate).
func (p *boardPaths) readEMC() (int64, error) {
	rates := p.spec.EMC.RatesHz
	locked, _ := p.readString(emcClkDir + "/mrq_rate_locked")
	if locked == "1" {
		r, err := p.readInt(emcClkDir + "/rate")
		if err != nil {
			return 0, fmt.Errorf("sim: read EMC rate: %w", err)
		}
		return roundUpRate(rates, r), nil
	}
	limit := slices.Max(rates)
	if v, err := p.readInt(emcClkDir + "/max_rate"); err == nil && v > 0 {
		limit = min(limit, v)
	}
	for _, c := range []string{emcCapJP5, emcCapJP6} {
		if v, err := p.readInt(c); err == nil && v > 0 {
			limit = min(limit, v)
		}
	}
	best := rates[0]
	for _, r := range rates {
		if r <= limit {
			best = r
		}
	}
	return best, nil
}

func roundUpRate(rates []int64, r int64) int64 {
	for _, v := range rates {
		if v >= r {
			return v
		}
	}
	return rates[len(rates)-1]
}

// clocks are the frequencies the board runs at.
type clocks struct {
	cpuKHz map[int]int64 // by policy, for online clusters
	gpuHz  int64
}

// running returns the clocks given whether anything runs: busy clocks sit at the
// scaling maximum (schedutil and nvhost_podgov ramp up under load), idle ones at the
// minimum unless the governor is performance. Pinned clocks (min = max) never move.
func (st boardState) running(busy bool) clocks {
	c := clocks{cpuKHz: map[int]int64{}, gpuHz: st.gpuMinHz}
	for _, cl := range st.clusters {
		if len(cl.online) == 0 {
			continue
		}
		c.cpuKHz[cl.policy] = cl.minKHz
		if busy || cl.performing {
			c.cpuKHz[cl.policy] = cl.maxKHz
		}
	}
	if busy || st.gpuPerf {
		c.gpuHz = st.gpuMaxHz
	}
	return c
}

// mode is the model's view of the board: online cores, the core-weighted mean CPU
// clock of the online clusters, and the GPU and EMC clocks.
func (st boardState) mode(c clocks) powermode.Mode {
	var sum, n int64
	for _, cl := range st.clusters {
		if f, ok := c.cpuKHz[cl.policy]; ok {
			sum += f * int64(len(cl.online))
			n += int64(len(cl.online))
		}
	}
	m := powermode.Mode{Cores: max(len(st.online), 1), GPUHz: c.gpuHz, EMCHz: st.emcHz}
	if n > 0 {
		m.CPUKHz = sum / n
	}
	if m.CPUKHz <= 0 {
		m.CPUKHz = 1
	}
	return m
}
