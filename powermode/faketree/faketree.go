// Package faketree materialises a catalog board's sysfs/procfs tree in a directory, with
// the layout and byte formats of a real Jetson (docs/design.md §4), so that the tegra backend,
// board detection, the nvpmodel reader and the simulator run their real code paths
// against it. Everything is plain files and relative symlinks under the root; nothing
// here behaves like the kernel (no write side-effects, no EAGAIN): the simulator's
// physics loop is what keeps readings moving.
package faketree

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Options choose the layout and the starting state of a tree. The zero value builds
// the board as it is right after boot on its newest supported L4T release.
type Options struct {
	// Layout is jp4, jp5 or jp6; empty derives it from L4T, else from the spec's newest
	// L4T release.
	Layout string
	// L4T is the release written to /etc/nv_tegra_release, e.g. "R36.4.3"; empty takes
	// the spec's newest release of the layout.
	L4T string
	// State is the starting state; nil means BootState(spec).
	State *State
	// Rails are starting INA3221 readings by rail label; rails not listed get a
	// plausible idle reading.
	Rails map[string]Reading
	// TempsMC are starting temperatures (m°C) by thermal zone type; zones not listed
	// get an idle temperature.
	TempsMC map[string]int64
}

// State is what a tree starts in: the knobs a backend reads back.
type State struct {
	OnlineCores int    // cpu0..OnlineCores-1 online, the rest offline
	CPUGovernor string // scaling_governor of every policy
	CPUMinKHz   int64  // scaling_min_freq of every policy
	CPUMaxKHz   int64  // scaling_max_freq of every policy
	CPUCurKHz   int64  // scaling_cur_freq / cpuinfo_cur_freq
	GPUGovernor string
	GPUMinHz    int64
	GPUMaxHz    int64
	GPUCurHz    int64 // cur_freq and target_freq
	GPULoad     int   // <gpu>/load, 0..1000
	EMCLocked   bool  // mrq_rate_locked
	EMCHz       int64 // clk/emc/rate
	EMCCapHz    int64 // nvpmodel EMC cap file; 0 = no cap
	PMode       int   // nvpmodel mode id in /var/lib/nvpmodel/status
}

// BootState is a board's state after boot in the catalog's default nvpmodel mode, as
// nvpmodel leaves it: that preset's cores online and the others offline, schedutil with
// scaling_max_freq at the preset's CPU cap (the table's top where it has none) and min at
// the lowest level, the GPU under nvhost_podgov with max_freq at the preset's GPU cap
// idling at its lowest level, EMC unlocked under the preset's EMC cap (the nvpmodel cap
// file; 0 where it has none) — not every knob at its maximum, which is MAXN's state, or
// what jetson_clocks sets.
func BootState(spec *powermode.BoardSpec) State {
	st := State{
		OnlineCores: spec.CPU.Cores,
		CPUGovernor: "schedutil",
		CPUMinKHz:   slices.Min(spec.CPU.FreqsKHz),
		CPUMaxKHz:   slices.Max(spec.CPU.FreqsKHz),
		CPUCurKHz:   slices.Min(spec.CPU.FreqsKHz),
		GPUGovernor: "nvhost_podgov",
		GPUMinHz:    slices.Min(spec.GPU.FreqsHz),
		GPUMaxHz:    slices.Max(spec.GPU.FreqsHz),
		GPUCurHz:    slices.Min(spec.GPU.FreqsHz),
		EMCHz:       slices.Max(spec.EMC.RatesHz),
		PMode:       spec.NVP.Default,
	}
	for _, p := range spec.NVP.Presets {
		if p.ID != spec.NVP.Default {
			continue
		}
		m := spec.PresetMode(p)
		if sp, err := spec.Space(); err == nil {
			m = sp.Snap(m) // a cap applies as the highest level at or below it
		}
		st.OnlineCores, st.CPUMaxKHz, st.GPUMaxHz = m.Cores, m.CPUKHz, m.GPUHz
		if p.EMCMaxHz > 0 {
			st.EMCCapHz, st.EMCHz = p.EMCMaxHz, m.EMCHz
		}
	}
	return st
}

// Reading is one INA3221 channel's bus voltage and current.
type Reading struct {
	MV float64 // bus voltage, mV
	MA float64 // current, mA
}

// ShuntMicroOhm is the shunt resistance the fake INA3221 channels report and use to
// derive their shunt voltages (assumption: Jetson carrier boards use 5 mΩ shunts on
// most rails; only the consistency of the files matters here).
const ShuntMicroOhm = 5000

// Tree is a materialised board. Its helpers are safe for concurrent use.
type Tree struct {
	root   string
	spec   *powermode.BoardSpec
	layout string
	l4t    string

	gpuDev     string // absolute (in-root) GPU device directory
	gpuDevfreq string // absolute (in-root) GPU devfreq directory
	rails      map[string]rail

	mu       sync.Mutex
	readings map[string]Reading // by rail label
	// inPlace: WriteFile truncates and writes instead of renaming a temporary file
	// into place (SetInPlace).
	inPlace atomic.Bool
	onWrite func(abs string)
}

// SetInPlace makes WriteFile rewrite files in place (3 system calls instead of 6) and
// call onWrite (when not nil) with each in-board path written, for a tree that nothing
// reads while it is written: the daemon on virtual time, where the physics step and the
// readers take turns and a reader's cache forgets what was rewritten
// (fulcrum/lifetime). Concurrent readers could see a truncated file. Call it before the
// tree is written.
func (t *Tree) SetInPlace(onWrite func(abs string)) {
	t.onWrite = onWrite
	t.inPlace.Store(true)
}

// rail says where one labelled channel's files are.
type rail struct {
	driver  string // hwmon or iio
	dir     string // hwmonN directory or iio:deviceN directory (absolute, in-root)
	channel int    // 1..3
	sensor  string // sensor address, e.g. 1-0040
}

// Build writes spec's tree under dir, which must exist (t.TempDir(), usually) and should
// be empty. It returns the tree with helpers to read and change it.
func Build(dir string, spec *powermode.BoardSpec, opts Options) (*Tree, error) {
	if spec == nil {
		return nil, fmt.Errorf("faketree: no board spec given")
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("faketree: %w", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("faketree: root %q must be an existing directory (create it first)", dir)
	}
	layout, l4t, err := resolveLayout(spec, opts)
	if err != nil {
		return nil, fmt.Errorf("faketree: %w", err)
	}
	st := BootState(spec)
	if opts.State != nil {
		st = *opts.State
	}
	if st.OnlineCores < 1 || st.OnlineCores > spec.CPU.Cores {
		return nil, fmt.Errorf("faketree: State.OnlineCores = %d: want 1..%d (cpu0 cannot go offline)", st.OnlineCores, spec.CPU.Cores)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("faketree: %w", err)
	}
	t := &Tree{
		root: root, spec: spec, layout: layout, l4t: l4t,
		gpuDev:   spec.GPU.Paths[layout],
		rails:    map[string]rail{},
		readings: map[string]Reading{},
	}
	t.gpuDevfreq = t.gpuDev + "/devfreq/" + filepath.Base(t.gpuDev)
	b := &builder{root: root, made: map[string]bool{}}
	b.identity(spec, l4t)
	b.cpu(spec, st)
	b.gpu(t, st)
	b.emc(spec, layout, st)
	t.power(b, opts.Rails)
	b.thermal(spec, opts.TempsMC)
	b.nvpmodel(t, st)
	if b.err != nil {
		return nil, fmt.Errorf("faketree: build %s (%s) under %s: %w", spec.Name, layout, root, b.err)
	}
	return t, nil
}

// builder writes files and links, remembering the first error so the layout code
// reads as a list of paths.
type builder struct {
	root string
	err  error
	made map[string]bool // directories already created
}

// mkdir creates a directory (and parents) once per build.
func (b *builder) mkdir(p string) {
	if b.err != nil || b.made[p] {
		return
	}
	if b.err = os.MkdirAll(p, 0o755); b.err == nil {
		b.made[p] = true
	}
}

func (b *builder) file(abs, content string) {
	p := filepath.Join(b.root, abs)
	b.mkdir(filepath.Dir(p))
	if b.err != nil {
		return
	}
	b.err = os.WriteFile(p, []byte(content), 0o644)
}

// link makes abs a symlink to target (an absolute in-root path), written relative to
// abs's directory like the kernel's sysfs links, so it resolves under any root.
func (b *builder) link(abs, target string) {
	if b.err != nil {
		return
	}
	rel, err := filepath.Rel(filepath.Dir(abs), target)
	if err != nil {
		b.err = err
		return
	}
	b.rawLink(abs, rel)
}

// rawLink makes abs a symlink with exactly the relative target rel.
func (b *builder) rawLink(abs, rel string) {
	if b.err != nil {
		return
	}
	p := filepath.Join(b.root, abs)
	b.mkdir(filepath.Dir(p))
	if b.err != nil {
		return
	}
	b.err = os.Symlink(rel, p)
}

func (b *builder) dir(abs string) {
	if b.err != nil {
		return
	}
	b.mkdir(filepath.Join(b.root, abs))
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// identity writes the device tree's model/compatible and /etc/nv_tegra_release.
// /proc/device-tree is a link to /sys/firmware/devicetree/base, as on a real kernel.
func (b *builder) identity(spec *powermode.BoardSpec, l4t string) {
	base := "/sys/firmware/devicetree/base"
	b.file(base+"/model", spec.Model+"\x00")
	b.file(base+"/compatible", strings.Join(spec.Compatible, "\x00")+"\x00")
	b.file(base+"/name", "\x00")
	b.link("/proc/device-tree", base)
	b.file("/etc/nv_tegra_release", tegraRelease(l4t))
}

// tegraRelease renders /etc/nv_tegra_release for "R36.4.3". GCIDs and dates are
// illustrative (assumption); readers only use the R and REVISION fields.
func tegraRelease(l4t string) string {
	major, rev, _ := strings.Cut(strings.TrimPrefix(l4t, "R"), ".")
	board, extra := "t186ref", ""
	gcid, date := "33958178", "Tue Aug  1 19:57:35 UTC 2023"
	switch major {
	case "32":
		gcid, date = "29818004", "Sat Feb 19 17:05:08 UTC 2022"
	case "36":
		board, gcid, date = "generic", "38968081", "Wed Jan  8 01:49:37 UTC 2025"
		extra = "# KERNEL_VARIANT: oot\n"
	}
	return fmt.Sprintf("# R%s (release), REVISION: %s, GCID: %s, BOARD: %s, EABI: aarch64, DATE: %s\n%s"+
		"TARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
		major, rev, gcid, board, date, extra)
}

// RangeList renders CPU numbers the way /sys/devices/system/cpu/online does: "0-3,8-11".
func RangeList(cpus []int) string {
	cpus = slices.Clone(cpus)
	slices.Sort(cpus)
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// cpufreqGovernors is scaling_available_governors on L4T kernels (assumption: order as
// listed by an Orin on R35; the kernel prints each name followed by a space).
const cpufreqGovernors = "interactive conservative ondemand userspace powersave performance schedutil "

func (b *builder) cpu(spec *powermode.BoardSpec, st State) {
	const c = "/sys/devices/system/cpu"
	all := make([]int, spec.CPU.Cores)
	var online, offline []int
	for i := range all {
		all[i] = i
		if i < st.OnlineCores {
			online = append(online, i)
		} else {
			offline = append(offline, i)
		}
	}
	b.file(c+"/online", RangeList(online)+"\n")
	b.file(c+"/offline", RangeList(offline)+"\n")
	b.file(c+"/present", RangeList(all)+"\n")
	b.file(c+"/possible", RangeList(all)+"\n")
	// cpu0 has no online file: on these kernels cpu0 is not hot-pluggable, so the
	// kernel does not create it (readers treat a missing online file as online).
	for i := range all {
		b.dir(fmt.Sprintf("%s/cpu%d", c, i))
		if i > 0 {
			v := "0\n"
			if i < st.OnlineCores {
				v = "1\n"
			}
			b.file(fmt.Sprintf("%s/cpu%d/online", c, i), v)
		}
	}
	var freqs strings.Builder
	for _, f := range spec.CPU.FreqsKHz {
		freqs.WriteString(itoa(f) + " ") // the kernel leaves a space after the last one
	}
	freqs.WriteString("\n")
	for _, cl := range spec.CPU.Clusters {
		p := fmt.Sprintf("%s/cpufreq/policy%d", c, cl.Policy)
		var related, affected []string
		for _, cpu := range cl.CPUs {
			related = append(related, strconv.Itoa(cpu))
			if cpu < st.OnlineCores {
				affected = append(affected, strconv.Itoa(cpu))
			}
			b.link(fmt.Sprintf("%s/cpu%d/cpufreq", c, cpu), p)
		}
		// A cluster with every CPU offline has an inactive policy: nvpmodel's cap cannot be
		// written to it (the kernel answers EBUSY), so it keeps the hardware range boot
		// gave it, which is also what tegra's Restore reopens such a cluster to.
		minKHz, maxKHz := st.CPUMinKHz, st.CPUMaxKHz
		if len(affected) == 0 {
			minKHz, maxKHz = slices.Min(spec.CPU.FreqsKHz), slices.Max(spec.CPU.FreqsKHz)
		}
		b.file(p+"/scaling_min_freq", itoa(minKHz)+"\n")
		b.file(p+"/scaling_max_freq", itoa(maxKHz)+"\n")
		b.file(p+"/scaling_cur_freq", itoa(st.CPUCurKHz)+"\n")
		b.file(p+"/cpuinfo_min_freq", itoa(slices.Min(spec.CPU.FreqsKHz))+"\n")
		b.file(p+"/cpuinfo_max_freq", itoa(slices.Max(spec.CPU.FreqsKHz))+"\n")
		b.file(p+"/cpuinfo_cur_freq", itoa(st.CPUCurKHz)+"\n")
		b.file(p+"/scaling_governor", st.CPUGovernor+"\n")
		b.file(p+"/scaling_available_governors", cpufreqGovernors+"\n")
		b.file(p+"/scaling_available_frequencies", freqs.String())
		b.file(p+"/scaling_driver", "tegra194\n")
		b.file(p+"/related_cpus", strings.Join(related, " ")+"\n")
		b.file(p+"/affected_cpus", strings.Join(affected, " ")+"\n")
	}
}

// devfreqList renders a devfreq list file. Unlike cpufreq, the devfreq core truncates
// the trailing space ("Truncate the trailing space" in drivers/devfreq/devfreq.c), so
// these end in the last value and a newline.
func devfreqList(vals []string) string { return strings.Join(vals, " ") + "\n" }

// devfreqGovernors is available_governors of the nvgpu devfreq device (assumption).
var devfreqGovernors = []string{"nvhost_podgov", "userspace", "performance", "simple_ondemand"}

// devfreqDevice writes one devfreq-capable platform device: its devfreq directory,
// the of_node link to its device-tree node and the /sys/class/devfreq entry.
func (b *builder) devfreqDevice(layout, dev string, freqs []int64, gov string, minHz, maxHz, curHz int64) {
	name := filepath.Base(dev)
	df := dev + "/devfreq/" + name
	var fs []string
	for _, f := range freqs {
		fs = append(fs, itoa(f))
	}
	b.file(df+"/available_frequencies", devfreqList(fs))
	b.file(df+"/available_governors", devfreqList(devfreqGovernors))
	b.file(df+"/governor", gov+"\n")
	b.file(df+"/min_freq", itoa(minHz)+"\n")
	b.file(df+"/max_freq", itoa(maxHz)+"\n")
	b.file(df+"/cur_freq", itoa(curHz)+"\n")
	b.file(df+"/target_freq", itoa(curHz)+"\n")
	b.file(df+"/polling_interval", "0\n")
	b.file(df+"/name", name+"\n")
	// The kernel writes this link the long way round: ../../../<dev>.
	b.rawLink(df+"/device", "../../../"+name)
	node := ofNodeDir(layout, dev)
	b.file(node+"/name", ofNodeName(dev)+"\x00")
	b.link(dev+"/of_node", node)
	b.link("/sys/class/devfreq/"+name, df)
}

func (b *builder) gpu(t *Tree, st State) {
	b.devfreqDevice(t.layout, t.gpuDev, t.spec.GPU.FreqsHz, st.GPUGovernor, st.GPUMinHz, st.GPUMaxHz, st.GPUCurHz)
	b.file(t.gpuDev+"/load", strconv.Itoa(st.GPULoad)+"\n")
	b.file(t.gpuDev+"/railgate_enable", "1\n")
	// The running nvpmodel mode's TPC power-gating mask, as nvpmodel leaves it at boot.
	mask := 0
	for _, p := range t.spec.NVP.Presets {
		if p.ID == st.PMode {
			mask = p.TPCPGMask
		}
	}
	b.file(t.gpuDev+"/tpc_pg_mask", strconv.Itoa(mask)+"\n")
	b.file(t.gpuDev+"/power/control", "auto\n")
	// nvpmodel confs address the GPU as /sys/devices/gpu.0 (assumption: a link to the
	// GPU device on every layout).
	b.link("/sys/devices/gpu.0", t.gpuDev)
	// Unrelated devfreq devices, so GPU discovery must match on of_node/name.
	vic := []int64{115200000, 230400000, 345600000, 460800000, 576000000, 729600000}
	nvdec := []int64{115200000, 268800000, 499200000, 729600000, 1036800000}
	b.devfreqDevice(t.layout, platformDir(t.layout, "15340000.vic"), vic, "nvhost_podgov", vic[0], vic[len(vic)-1], vic[0])
	b.devfreqDevice(t.layout, platformDir(t.layout, "15480000.nvdec"), nvdec, "nvhost_podgov", nvdec[0], nvdec[len(nvdec)-1], nvdec[0])
}

func (b *builder) emc(spec *powermode.BoardSpec, layout string, st State) {
	const clk = "/sys/kernel/debug/bpmp/debug/clk/emc"
	b.file(clk+"/rate", itoa(st.EMCHz)+"\n")
	b.file(clk+"/min_rate", itoa(slices.Min(spec.EMC.RatesHz))+"\n")
	b.file(clk+"/max_rate", itoa(slices.Max(spec.EMC.RatesHz))+"\n")
	locked := "0\n"
	if st.EMCLocked {
		locked = "1\n"
	}
	b.file(clk+"/mrq_rate_locked", locked)
	var khz []string
	for _, r := range spec.EMC.RatesHz {
		khz = append(khz, itoa(r/1000))
	}
	b.file("/sys/kernel/debug/bpmp/debug/emc/possible_rates", strings.Join(khz, " ")+" (kHz)\n")
	b.file(emcCapPath(layout), itoa(st.EMCCapHz)+"\n")
}

// idleReading is a plausible idle reading for a rail (assumption: ~5 V module input
// rails, currents giving 5–9 W board idle).
func idleReading(spec *powermode.BoardSpec, label string) Reading {
	if label == spec.Power.Total {
		return Reading{MV: 5000, MA: 1000}
	}
	switch label {
	case "VDD_GPU_SOC", "GPU":
		return Reading{MV: 5000, MA: 560}
	case "VDD_CPU_CV", "VDD_CPU_GPU_CV", "CPU":
		return Reading{MV: 5000, MA: 160}
	case "VIN_SYS_5V0", "SYS5V":
		return Reading{MV: 5000, MA: 600}
	case "VDD_SOC", "SOC":
		return Reading{MV: 5000, MA: 280}
	}
	return Reading{MV: 5000, MA: 100}
}

// power writes the INA3221 sensors for the spec's driver.
func (t *Tree) power(b *builder, start map[string]Reading) {
	spec := t.spec
	// hwmon numbers are handed out at probe time and are neither 0-based nor
	// contiguous: hwmon0 is soctherm_oc, hwmon2 a fan, the sensors 1, 4, 5, ...
	hwmonNum := func(i int) int {
		if i == 0 {
			return 1
		}
		return 3 + i
	}
	for i, s := range spec.Power.Sensors {
		dev := i2cBusDir(t.layout, s.Addr) + "/" + s.Addr
		var dir string
		switch spec.Power.Driver {
		case "iio":
			b.file(dev+"/name", "ina3221x\n")
			b.link("/sys/bus/i2c/drivers/ina3221x/"+s.Addr, dev)
			dir = fmt.Sprintf("%s/iio:device%d", dev, i)
			b.file(dir+"/name", "ina3221x\n")
			b.link(fmt.Sprintf("/sys/bus/iio/devices/iio:device%d", i), dir)
		default:
			b.file(dev+"/name", "ina3221\n")
			b.link("/sys/bus/i2c/drivers/ina3221/"+s.Addr, dev)
			dir = fmt.Sprintf("%s/hwmon/hwmon%d", dev, hwmonNum(i))
			b.file(dir+"/name", "ina3221\n")
			b.link(fmt.Sprintf("/sys/class/hwmon/hwmon%d", hwmonNum(i)), dir)
			b.file(dir+"/in7_label", "sum of shunt voltages\n")
			b.file(dir+"/curr4_crit", "0\n")
		}
		for _, ch := range s.Channels {
			r := rail{driver: spec.Power.Driver, dir: dir, channel: ch.Channel, sensor: s.Addr}
			if spec.Power.Driver == "iio" {
				b.file(fmt.Sprintf("%s/rail_name_%d", dir, ch.Channel-1), ch.Label+"\n")
			} else {
				b.file(fmt.Sprintf("%s/in%d_label", dir, ch.Channel), ch.Label+"\n")
				enable := "1\n"
				if ch.Label == "NC" {
					enable = "0\n"
				}
				b.file(fmt.Sprintf("%s/in%d_enable", dir, ch.Channel), enable)
				b.file(fmt.Sprintf("%s/curr%d_crit", dir, ch.Channel), "20000\n")
				b.file(fmt.Sprintf("%s/curr%d_max", dir, ch.Channel), "16000\n")
				b.file(fmt.Sprintf("%s/shunt%d_resistor", dir, ch.Channel), strconv.Itoa(ShuntMicroOhm)+"\n")
			}
			key := railKey(s.Addr, ch)
			t.rails[key] = r
			rd := Reading{}
			if ch.Label != "NC" {
				rd = idleReading(spec, ch.Label)
				if v, ok := start[ch.Label]; ok {
					rd = v
				}
			}
			t.readings[key] = rd
		}
	}
	if b.err != nil {
		return
	}
	// Plain writes while building: nobody reads the tree yet.
	direct := func(abs, s string) error { b.file(abs, s); return b.err }
	for key := range t.rails {
		if err := t.writeRail(key, direct); err != nil && b.err == nil {
			b.err = err
		}
	}
	// Over-current event counters (throttling) and a fan, both hwmons the INA3221
	// discovery must skip by name (soctherm_oc location: assumption).
	oc := "/sys/devices/platform/soctherm-oc-event/hwmon/hwmon0"
	b.file(oc+"/name", "soctherm_oc\n")
	for i := 1; i <= 3; i++ {
		b.file(fmt.Sprintf("%s/oc%d_event_cnt", oc, i), "0\n")
	}
	b.link("/sys/class/hwmon/hwmon0", oc)
	fan := "/sys/devices/platform/pwm-fan/hwmon/hwmon2"
	b.file(fan+"/name", "pwmfan\n")
	b.file(fan+"/pwm1", "0\n")
	b.link("/sys/class/hwmon/hwmon2", fan)
}

// railKey names a channel: its label, or "addr/chN" for NC channels (labels repeat).
func railKey(addr string, ch powermode.ChannelSpec) string {
	if ch.Label == "NC" {
		return fmt.Sprintf("%s/ch%d", addr, ch.Channel)
	}
	return ch.Label
}

// writeRail writes one channel's reading, and for hwmon the sensor's sum channels.
// Callers hold t.mu or have the tree to themselves; write is Tree.WriteFile, or a
// plain write while building.
func (t *Tree) writeRail(key string, write func(abs, s string) error) error {
	r := t.rails[key]
	rd := t.readings[key]
	mv, ma := math.Round(rd.MV), math.Round(rd.MA)
	if r.driver == "iio" {
		k := r.channel - 1
		if err := write(fmt.Sprintf("%s/in_voltage%d_input", r.dir, k), itoa(int64(mv))+"\n"); err != nil {
			return err
		}
		if err := write(fmt.Sprintf("%s/in_current%d_input", r.dir, k), itoa(int64(ma))+"\n"); err != nil {
			return err
		}
		return write(fmt.Sprintf("%s/in_power%d_input", r.dir, k), itoa(int64(math.Round(rd.MV*rd.MA/1000)))+"\n")
	}
	c := r.channel
	if err := write(fmt.Sprintf("%s/in%d_input", r.dir, c), itoa(int64(mv))+"\n"); err != nil {
		return err
	}
	if err := write(fmt.Sprintf("%s/curr%d_input", r.dir, c), itoa(int64(ma))+"\n"); err != nil {
		return err
	}
	// Shunt voltage in µV (mA × µΩ / 1000), as the ina3221 driver's in4..in6.
	if err := write(fmt.Sprintf("%s/in%d_input", r.dir, c+3), itoa(int64(ma)*ShuntMicroOhm/1000)+"\n"); err != nil {
		return err
	}
	var sumMA int64
	for k, o := range t.rails {
		if o.sensor == r.sensor {
			sumMA += int64(math.Round(t.readings[k].MA))
		}
	}
	if err := write(r.dir+"/in7_input", itoa(sumMA*ShuntMicroOhm/1000)+"\n"); err != nil {
		return err
	}
	return write(r.dir+"/curr4_input", itoa(sumMA)+"\n")
}

// idleTempMC is a plausible idle temperature (m°C) for a zone type.
func idleTempMC(zone string) int64 {
	switch {
	case strings.HasPrefix(zone, "tj"):
		return 46500
	case strings.HasPrefix(zone, "cpu"):
		return 45250
	case strings.HasPrefix(zone, "gpu"):
		return 43875
	}
	return 44000
}

// tripPoints are every zone's trip points: a passive one where the firmware starts to
// cap clocks (software throttling) and the critical shutdown. Estimates for Orin-class
// modules (NVIDIA's thermal design guides put throttling near 99 °C and shutdown a few
// degrees above); the simulator's heat reads the passive one from the tree, so a test
// may lower it by rewriting the file.
func tripPoints() []tripPoint {
	return []tripPoint{{"passive", DefaultTripMC, 2000}, {"critical", 105000, 0}}
}

type tripPoint struct {
	typ        string
	mc, hystMC int64
}

// DefaultTripMC is the passive trip point every zone of a built tree has (m°C).
const DefaultTripMC = 99000

func (b *builder) thermal(spec *powermode.BoardSpec, start map[string]int64) {
	for i, zone := range spec.Thermal {
		dev := fmt.Sprintf("/sys/devices/virtual/thermal/thermal_zone%d", i)
		temp := idleTempMC(zone)
		if v, ok := start[zone]; ok {
			temp = v
		}
		b.file(dev+"/type", zone+"\n")
		b.file(dev+"/temp", itoa(temp)+"\n")
		b.file(dev+"/mode", "enabled\n")
		for n, tp := range tripPoints() {
			b.file(fmt.Sprintf("%s/trip_point_%d_type", dev, n), tp.typ+"\n")
			b.file(fmt.Sprintf("%s/trip_point_%d_temp", dev, n), itoa(tp.mc)+"\n")
			b.file(fmt.Sprintf("%s/trip_point_%d_hyst", dev, n), itoa(tp.hystMC)+"\n")
		}
		b.link(fmt.Sprintf("/sys/class/thermal/thermal_zone%d", i), dev)
	}
}

func (b *builder) nvpmodel(t *Tree, st State) {
	name := confName(t.spec)
	b.file("/etc/nvpmodel/"+name, Conf(t.spec, t.layout))
	// Real boards use an absolute link; a relative one keeps the tree self-contained.
	b.link("/etc/nvpmodel.conf", "/etc/nvpmodel/"+name)
	b.file("/var/lib/nvpmodel/status", fmt.Sprintf("pmode:%04d\n", st.PMode))
}

// Root is the tree's root directory (absolute).
func (t *Tree) Root() string { return t.root }

// Spec is the board the tree was built for.
func (t *Tree) Spec() *powermode.BoardSpec { return t.spec }

// Layout is the tree's layout (jp4, jp5, jp6).
func (t *Tree) Layout() string { return t.layout }

// L4T is the release in the tree's /etc/nv_tegra_release, e.g. "R36.4.3".
func (t *Tree) L4T() string { return t.l4t }

// GPUDevice is the GPU's device directory as an absolute in-board path, e.g.
// /sys/devices/platform/bus@0/17000000.gpu.
func (t *Tree) GPUDevice() string { return t.gpuDev }

// GPUDevfreq is the GPU's devfreq directory as an absolute in-board path.
func (t *Tree) GPUDevfreq() string { return t.gpuDevfreq }

// EMCCapPath is the nvpmodel EMC cap file of the tree's layout (in-board path).
func (t *Tree) EMCCapPath() string { return emcCapPath(t.layout) }

// Rails lists the labels of the connected rails, sorted.
func (t *Tree) Rails() []string {
	var out []string
	for k := range t.rails {
		if !strings.Contains(k, "/") { // NC channels are keyed addr/chN
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Path maps an absolute in-board path (/sys/...) to the file under the root.
func (t *Tree) Path(abs string) string { return filepath.Join(t.root, abs) }

// ReadFile reads an in-board file.
func (t *Tree) ReadFile(abs string) (string, error) {
	b, err := os.ReadFile(t.Path(abs))
	return string(b), err
}

// WriteFile replaces an in-board file's content, keeping its mode (0644 for a new
// file). It writes a temporary file beside it and renames it into place, so a
// concurrent reader sees the old or the new content, never a torn one (unless
// SetInPlace).
func (t *Tree) WriteFile(abs, s string) error {
	p := t.Path(abs)
	if t.inPlace.Load() {
		// One writer and no reader in between (SetInPlace): truncate and write.
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return fmt.Errorf("faketree: write %s: %w", abs, err)
		}
		if t.onWrite != nil {
			t.onWrite(abs)
		}
		return nil
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(p); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".faketree-*")
	if err != nil {
		return fmt.Errorf("faketree: write %s: %w", abs, err)
	}
	_, werr := f.WriteString(s)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), mode)); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("faketree: write %s: %w", abs, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("faketree: write %s: %w", abs, err)
	}
	return nil
}

// SetRail sets a rail's bus voltage (mV) and current (mA) and rewrites every file
// derived from them (hwmon: inC, currC, the shunt voltage, the sensor's sums; iio:
// voltage, current and power).
func (t *Tree) SetRail(name string, mv, ma float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.rails[name]; !ok || strings.Contains(name, "/") {
		return fmt.Errorf("faketree: board %s has no rail %q: its rails are %s", t.spec.Name, name, strings.Join(t.Rails(), ", "))
	}
	if mv < 0 || ma < 0 || math.IsNaN(mv) || math.IsNaN(ma) {
		return fmt.Errorf("faketree: rail %s: voltage %v mV and current %v mA must be non-negative numbers", name, mv, ma)
	}
	t.readings[name] = Reading{MV: mv, MA: ma}
	return t.writeRail(name, t.WriteFile)
}

// SetTemp sets a thermal zone's temperature (m°C) by zone type.
func (t *Tree) SetTemp(zone string, mc int64) error {
	i := slices.Index(t.spec.Thermal, zone)
	if i < 0 {
		return fmt.Errorf("faketree: board %s has no thermal zone %q: its zones are %s", t.spec.Name, zone, strings.Join(t.spec.Thermal, ", "))
	}
	return t.WriteFile(fmt.Sprintf("/sys/devices/virtual/thermal/thermal_zone%d/temp", i), itoa(mc)+"\n")
}

// Digest describes everything under the root, keyed by in-board path: "file 0644 "
// plus the content for a file, "link " plus the target for a symlink, "dir 0755" for
// a directory. Two trees with equal digests are byte-identical.
func (t *Tree) Digest() (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(t.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(t.root, p)
		if err != nil {
			return err
		}
		key := "/" + filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[key] = "link " + target
		case info.IsDir():
			out[key] = fmt.Sprintf("dir %04o", info.Mode().Perm())
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[key] = fmt.Sprintf("file %04o %s", info.Mode().Perm(), b)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("faketree: digest %s: %w", t.root, err)
	}
	return out, nil
}
