package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
)

// Options configure a simulated board; the zero value is the defaults.
type Options struct {
	// Layout is the sysfs layout (jp4, jp5, jp6); empty takes the board's newest.
	Layout string
	// Interval is the physics loop period; default 100 ms.
	Interval time.Duration
	// Workloads are the models activity files refer to; default configs/workloads.
	Workloads map[string]*Workload
	// AmbientC is the air temperature around the heat sink; default 35 °C.
	AmbientC float64
	// ThermalTau is the heat sink's time constant; default 30 s.
	ThermalTau time.Duration
	// Heat switches on thermal throttling (heat.go); nil: clocks are never capped.
	Heat *HeatOptions
	// Logger receives notes (unknown workloads, write failures); default slog.Default().
	Logger *slog.Logger
	// Activities, when set, is what runs on the GPU at each Step instead of the files in
	// ActivityDir: in-process workers on virtual time tell the board from memory (no
	// file, no process to check) what their Runner would have registered.
	Activities func() []Activity
	// PowerMW, when set, gives an activity's board power at mode m (ok false: the
	// model's): a ground-truth table answering instead of the power model (virtual time,
	// fulcrum/lifetime). The model's breakdown is scaled to it. Only with Share.
	PowerMW func(m powermode.Mode, a Activity) (mw float64, ok bool)
}

// Defaults of Options.
const (
	DefaultInterval   = 100 * time.Millisecond
	DefaultAmbientC   = 35.0
	DefaultThermalTau = 30 * time.Second
	// INA3221 bus voltage: the monitored rails are ~5 V module inputs; the drop per
	// ampere mimics the cable and connector resistance.
	railNominalMV  = 5050.0
	railDropMVPerA = 15.0
)

// marker is <root>/run/fulcrum-sim/board.json: it says a directory is a simulator tree
// and of which board, so a later sim board may rebuild it and nothing else.
type marker struct {
	Board     string    `json:"board"`
	Layout    string    `json:"layout"`
	PID       int       `json:"pid"` // the physics loop's process, 0 when stopped
	CreatedAt time.Time `json:"created_at"`
}

// Board is a simulated board: a fake sysfs tree and the physics loop that keeps its
// sensor files current.
type Board struct {
	tree    *faketree.Tree
	paths   *boardPaths
	hw      Hardware
	opts    Options
	log     *slog.Logger
	mu      sync.Mutex
	tempsC  map[string]float64 // by zone type
	last    time.Time
	online  string // last online list written
	unknown map[string]bool
	// throttle is the simulated firmware's cooling state (Options.Heat), lastPoll when
	// its governor last stepped.
	throttle int
	lastPoll time.Time
}

// New materialises spec's tree under dir and returns the board, ready to Run. dir may
// be missing or empty, or a previous simulator tree of the same board whose loop is no
// longer running (it is rebuilt from scratch); anything else is refused, so a typo
// cannot clobber real files.
func New(dir string, spec *powermode.BoardSpec, opts Options) (*Board, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.AmbientC == 0 {
		opts.AmbientC = DefaultAmbientC
	}
	if opts.ThermalTau <= 0 {
		opts.ThermalTau = DefaultThermalTau
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Heat = opts.Heat.withDefaults()
	if opts.Workloads == nil {
		ws, err := LoadWorkloads(configs.FS, "workloads")
		if err != nil {
			return nil, err
		}
		opts.Workloads = ws
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: create %s: %w", dir, err)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if err := prepareDir(root, spec); err != nil {
		return nil, err
	}
	tree, err := faketree.Build(root, spec, faketree.Options{Layout: opts.Layout})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	paths, err := findPaths(root, spec)
	if err != nil {
		return nil, err
	}
	b := &Board{tree: tree, paths: paths, hw: HardwareFor(spec), opts: opts, log: opts.Logger,
		tempsC: map[string]float64{}, unknown: map[string]bool{}}
	for _, z := range spec.Thermal {
		b.tempsC[z] = opts.AmbientC + 8 // starts warm, as a board that has just booted
	}
	if err := os.MkdirAll(filepath.Join(root, ActivityDir), 0o755); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if err := clearThrottle(paths); err != nil {
		return nil, err
	}
	if h := opts.Heat; h != nil && h.TripC > 0 {
		if err := b.setTrips(h.TripC); err != nil {
			return nil, err
		}
	}
	if err := b.writeMarker(0); err != nil {
		return nil, err
	}
	return b, nil
}

// prepareDir checks that root may hold a new tree and clears a previous one.
func prepareDir(root string, spec *powermode.BoardSpec) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	// The top-level directories faketree and the simulator create (a rebuild removes them).
	treeTopDirs := []string{"sys", "proc", "etc", "var", "run"}
	raw, err := os.ReadFile(filepath.Join(root, markerPath))
	if err != nil {
		return fmt.Errorf("sim: %s is not empty and is not a simulated board's tree (no %s): give an empty or new directory", root, markerPath)
	}
	var m marker
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("sim: %s: unreadable %s (%v): give an empty or new directory", root, markerPath, err)
	}
	if m.Board != spec.Name {
		return fmt.Errorf("sim: %s holds a simulated %s, not %s: give another directory, or remove it first", root, m.Board, spec.Name)
	}
	if m.PID != 0 && m.PID != os.Getpid() && processAlive(m.PID) {
		return fmt.Errorf("sim: %s is in use by a running simulated board (pid %d): stop it first", root, m.PID)
	}
	for _, e := range entries {
		if !slices.Contains(treeTopDirs, e.Name()) {
			return fmt.Errorf("sim: %s holds %s, which a simulated board never creates: not clobbering it; give an empty or new directory", root, e.Name())
		}
	}
	for _, d := range treeTopDirs {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			return fmt.Errorf("sim: clear previous tree in %s: %w", root, err)
		}
	}
	return nil
}

func (b *Board) writeMarker(pid int) error {
	raw, err := json.Marshal(marker{Board: b.paths.spec.Name, Layout: b.tree.Layout(), PID: pid, CreatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := b.tree.WriteFile(markerPath, string(raw)+"\n"); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// Root is the tree's root directory: point other commands at it with --root.
func (b *Board) Root() string { return b.tree.Root() }

// Tree is the underlying fake tree.
func (b *Board) Tree() *faketree.Tree { return b.tree }

// Interval is the physics loop period.
func (b *Board) Interval() time.Duration { return b.opts.Interval }

// Run runs the physics loop until ctx is done, then returns nil. A step that fails is
// logged and retried at the next tick (a control file may be mid-rewrite).
func (b *Board) Run(ctx context.Context) error {
	if err := b.writeMarker(os.Getpid()); err != nil {
		return err
	}
	defer func() {
		if err := b.writeMarker(0); err != nil {
			b.log.Warn("sim: marking the tree stopped", "err", err)
		}
	}()
	t := time.NewTicker(b.opts.Interval)
	defer t.Stop()
	var lastErr string
	for {
		if _, err := b.Step(time.Now()); err != nil && err.Error() != lastErr {
			b.log.Warn("sim: physics step failed; retrying at the next tick", "err", err)
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// StepResult is what one physics step computed.
type StepResult struct {
	Mode    powermode.Mode // clocks the board runs at
	Active  []Activity
	Power   PowerBreakdown
	TotalMW float64
	// Throttle is the cooling state the step ran under (0 without Options.Heat).
	Throttle int
}

// Step advances the physics to now once: it reads the control files and the activity
// set and rewrites every sensor file. Run calls it every Interval.
func (b *Board) Step(now time.Time) (StepResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var res StepResult
	st, err := b.paths.readState()
	if err != nil {
		return res, err
	}
	var acts []Activity
	if b.opts.Activities != nil {
		acts = b.opts.Activities()
	} else if acts, err = readActivities(b.paths.root); err != nil {
		return res, err
	}
	res.Active = acts
	res.Throttle = b.throttle
	st = st.capped(b.paths, b.throttle)
	clk := st.running(len(acts) > 0)
	res.Mode = st.mode(clk)
	res.Power = b.power(res.Mode, acts)
	res.TotalMW = res.Power.TotalMW()

	var errs []error
	errs = append(errs, b.writeCPU(st, clk), b.writeGPU(clk, res.Power.GPULoad))
	errs = append(errs, b.writeRails(res.Power)...)
	dt := b.opts.Interval
	if !b.last.IsZero() {
		dt = now.Sub(b.last)
	}
	b.last = now
	errs = append(errs, b.writeThermal(res.Power, dt))
	_, err = b.stepThrottle(now)
	errs = append(errs, err)
	return res, errors.Join(errs...)
}

// power combines the active minibatches: the driver time-slices the GPU, so the board
// draws each one's power for its share of the time (the mean); idle when none runs.
func (b *Board) power(m powermode.Mode, acts []Activity) PowerBreakdown {
	if len(acts) == 0 {
		return IdlePower(&b.hw, m)
	}
	if acts[0].Share > 0 {
		return b.sharedPower(m, acts)
	}
	var sum PowerBreakdown
	for _, a := range acts {
		var p PowerBreakdown
		if w, ok := b.opts.Workloads[a.Workload]; ok {
			p = w.Power(&b.hw, m, max(a.Batch, 1))
		} else {
			if !b.unknown[a.Workload] {
				b.log.Warn("sim: activity names an unknown workload; modelling a busy GPU", "workload", a.Workload)
				b.unknown[a.Workload] = true
			}
			p = b.hw.power(m, 1, 1, 0.8, 10)
		}
		sum.SysMW += p.SysMW
		sum.SoCMW += p.SoCMW
		sum.CPUMW += p.CPUMW
		sum.GPUMW += p.GPUMW
		sum.DRAMMW += p.DRAMMW
		sum.GPULoad += p.GPULoad
		sum.CPUBusy += p.CPUBusy
	}
	n := float64(len(acts))
	sum.SysMW /= n
	sum.SoCMW /= n
	sum.CPUMW /= n
	sum.GPUMW /= n
	sum.DRAMMW /= n
	sum.CPUBusy /= n
	// Time-sliced contexts leave fewer gaps than one context alone.
	sum.GPULoad = math.Min(sum.GPULoad, 1)
	return sum
}

// sharedPower is the mean power over a step in which each minibatch ran its Share of
// the time, one at a time, and the board idled the rest (Options.Activities).
func (b *Board) sharedPower(m powermode.Mode, acts []Activity) PowerBreakdown {
	idle := IdlePower(&b.hw, m)
	var sum PowerBreakdown
	left := 1.0
	add := func(p PowerBreakdown, f float64) {
		sum.SysMW += f * p.SysMW
		sum.SoCMW += f * p.SoCMW
		sum.CPUMW += f * p.CPUMW
		sum.GPUMW += f * p.GPUMW
		sum.DRAMMW += f * p.DRAMMW
		sum.GPULoad += f * p.GPULoad
		sum.CPUBusy += f * p.CPUBusy
	}
	for _, a := range acts {
		f := min(max(a.Share, 0), left)
		left -= f
		var p PowerBreakdown
		if w, ok := b.opts.Workloads[a.Workload]; ok {
			p = w.Power(&b.hw, m, max(a.Batch, 1))
		} else {
			p = b.hw.power(m, 1, 1, 0.8, 10)
		}
		if b.opts.PowerMW != nil {
			if mw, ok := b.opts.PowerMW(m, a); ok && p.TotalMW() > 0 {
				k := mw / p.TotalMW()
				p.SysMW, p.SoCMW, p.CPUMW, p.GPUMW, p.DRAMMW = k*p.SysMW, k*p.SoCMW, k*p.CPUMW, k*p.GPUMW, k*p.DRAMMW
			}
		}
		add(p, f)
	}
	add(idle, left)
	sum.GPULoad = math.Min(sum.GPULoad, 1)
	return sum
}

func (b *Board) writeFile(abs, v string) error {
	return b.tree.WriteFile(abs, v)
}

// writeCPU writes the online lists and each online cluster's current frequency.
func (b *Board) writeCPU(st boardState, clk clocks) error {
	var offline []int
	for cpu := range b.paths.spec.CPU.Cores {
		if !slices.Contains(st.online, cpu) {
			offline = append(offline, cpu)
		}
	}
	var errs []error
	if list := faketree.RangeList(st.online); list != b.online {
		errs = append(errs, b.writeFile(cpuDir+"/online", list+"\n"), b.writeFile(cpuDir+"/offline", faketree.RangeList(offline)+"\n"))
		for _, cl := range st.clusters {
			var aff []string
			for _, c := range cl.online {
				aff = append(aff, strconv.Itoa(c))
			}
			errs = append(errs, b.writeFile(fmt.Sprintf("%s/cpufreq/policy%d/affected_cpus", cpuDir, cl.policy), strings.Join(aff, " ")+"\n"))
		}
		if errors.Join(errs...) == nil {
			b.online = list
		}
	}
	for _, cl := range st.clusters {
		f, ok := clk.cpuKHz[cl.policy]
		if !ok {
			continue // offline cluster: its clock is not running
		}
		dir := fmt.Sprintf("%s/cpufreq/policy%d", cpuDir, cl.policy)
		v := strconv.FormatInt(f, 10) + "\n"
		errs = append(errs, b.writeFileIfChanged(dir+"/scaling_cur_freq", v), b.writeFileIfChanged(dir+"/cpuinfo_cur_freq", v))
	}
	return errors.Join(errs...)
}

// writeFileIfChanged skips identical rewrites (most ticks change nothing).
func (b *Board) writeFileIfChanged(abs, v string) error {
	if cur, err := os.ReadFile(b.paths.path(abs)); err == nil && string(cur) == v {
		return nil
	}
	return b.writeFile(abs, v)
}

func (b *Board) writeGPU(clk clocks, load float64) error {
	v := strconv.FormatInt(clk.gpuHz, 10) + "\n"
	return errors.Join(
		b.writeFileIfChanged(b.paths.gpuDevfreq+"/cur_freq", v),
		b.writeFileIfChanged(b.paths.gpuDevfreq+"/target_freq", v),
		b.writeFileIfChanged(b.paths.gpuDev+"/load", strconv.Itoa(int(math.Round(load*1000)))+"\n"),
	)
}

// RailPowers distributes a power breakdown over the board's connected INA3221 rails,
// by label: a rail named for the CPU and GPU together takes both, then GPU (+SoC when
// named so), CPU, SoC, DRAM (DDR/VDDQ/VDD2/VDDRQ) and the 5 V system rail. Components
// no rail claims go to the system rail. When the board's total is one rail (VDD_IN),
// that rail reads the total. Returned in mW by label.
func RailPowers(spec *powermode.BoardSpec, p PowerBreakdown) map[string]float64 {
	out := map[string]float64{}
	var labels []string
	for _, s := range spec.Power.Sensors {
		for _, ch := range s.Channels {
			if ch.Label != "NC" {
				labels = append(labels, ch.Label)
			}
		}
	}
	comps := map[string]float64{"cpu": p.CPUMW, "gpu": p.GPUMW, "soc": p.SoCMW, "dram": p.DRAMMW, "sys": p.SysMW}
	claims := func(label string) []string {
		u := strings.ToUpper(label)
		switch {
		case label == spec.Power.Total:
			return nil
		case strings.Contains(u, "CPU") && strings.Contains(u, "GPU"):
			return []string{"cpu", "gpu"}
		case strings.Contains(u, "GPU") && strings.Contains(u, "SOC"):
			return []string{"gpu", "soc"}
		case strings.Contains(u, "GPU"):
			return []string{"gpu"}
		case strings.Contains(u, "CPU"):
			return []string{"cpu"}
		case strings.Contains(u, "SOC"):
			return []string{"soc"}
		case strings.Contains(u, "DDR") || strings.Contains(u, "VDDQ") || strings.Contains(u, "VDD2") || strings.Contains(u, "DRAM"):
			return []string{"dram"}
		case strings.Contains(u, "SYS") || strings.Contains(u, "5V"):
			return []string{"sys"}
		}
		return nil
	}
	claimed := map[string]bool{}
	sysRail := ""
	for _, l := range labels {
		for _, c := range claims(l) {
			if claimed[c] {
				continue
			}
			claimed[c] = true
			out[l] += comps[c]
			if c == "sys" {
				sysRail = l
			}
		}
		if _, ok := out[l]; !ok && l != spec.Power.Total {
			out[l] = 0
		}
	}
	totalRail := spec.Power.Total != "sum" && spec.Power.Total != ""
	if sysRail == "" && !totalRail {
		// No system rail: the last connected non-total rail absorbs the rest.
		for i := len(labels) - 1; i >= 0; i-- {
			if labels[i] != spec.Power.Total {
				sysRail = labels[i]
				break
			}
		}
	}
	for c, v := range comps {
		if !claimed[c] && sysRail != "" {
			out[sysRail] += v
		}
	}
	// A connected rail no component names (e.g. Xavier's CV) carries a little idle
	// current, moved from the system rail so the sum stays the total.
	for _, l := range labels {
		if sysRail != "" && l != spec.Power.Total && l != sysRail && out[l] == 0 && out[sysRail] > 200 {
			out[l] += 60
			out[sysRail] -= 60
		}
	}
	if totalRail {
		// The rest is in the total and on no monitored child rail.
		out[spec.Power.Total] = p.TotalMW()
	}
	return out
}

func (b *Board) writeRails(p PowerBreakdown) []error {
	var errs []error
	for label, mw := range RailPowers(b.paths.spec, p) {
		ma := 0.0
		mv := railNominalMV
		if mw > 0 {
			// Solve mV·mA/1000 = mW with mV = nominal − drop·A.
			ma = mw * 1000 / mv
			mv = railNominalMV - railDropMVPerA*ma/1000
			ma = mw * 1000 / mv
		}
		errs = append(errs, b.tree.SetRail(label, mv, ma))
	}
	return errs
}

// zoneTarget is a zone's steady-state temperature: ambient plus the heat sink's rise
// with total power, plus a local rise with the power of the block the zone sits on.
func (b *Board) zoneTarget(zone string, p PowerBreakdown) float64 {
	sinkCPerW := DefaultCPerW // heat sink + fan, °C per board watt (estimate)
	if b.opts.Heat != nil {
		sinkCPerW = b.opts.Heat.CPerW
	}
	t := b.opts.AmbientC + sinkCPerW*p.TotalMW()/1000
	z := strings.ToLower(zone)
	switch {
	case strings.HasPrefix(z, "cpu"):
		return t + 0.45*p.CPUMW/1000
	case strings.HasPrefix(z, "gpu"):
		return t + 0.25*p.GPUMW/1000
	case strings.HasPrefix(z, "tj") || strings.Contains(z, "tdiode"):
		return t + math.Max(0.45*p.CPUMW, 0.25*p.GPUMW)/1000 + 1
	case strings.HasPrefix(z, "cv") || strings.HasPrefix(z, "soc") || strings.Contains(z, "pll"):
		return t + 0.8*p.SoCMW/1000
	}
	return t - 2 // board, always-on and fan estimates sit a little cooler
}

func (b *Board) writeThermal(p PowerBreakdown, dt time.Duration) error {
	alpha := 1 - math.Exp(-dt.Seconds()/b.opts.ThermalTau.Seconds())
	var errs []error
	for _, z := range b.paths.spec.Thermal {
		b.tempsC[z] += (b.zoneTarget(z, p) - b.tempsC[z]) * alpha
		errs = append(errs, b.tree.SetTemp(z, int64(math.Round(b.tempsC[z]*1000))))
	}
	return errors.Join(errs...)
}
