// Package tegratest writes Jetson sysfs trees by hand, from the layout documented in
// docs/design.md §4 (kernel cpufreq/devfreq/hotplug ABI, BPMP debugfs, ina3221 hwmon and
// ina3221x IIO, thermal zones), for tests of the tegra backend and of fulcrumctl. It
// is deliberately independent of the board catalog and of powermode/faketree, so
// that tests written against it check the backend against the documented layout, not
// against another piece of this project.
package tegratest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Rail is one INA3221 channel. Label "NC" is a channel with nothing connected.
type Rail struct {
	Label string
	MV    int64 // bus voltage, mV
	MA    int64 // current, mA
	MW    int64 // power, mW (IIO only; hwmon has no power file)
}

// Sensor is one INA3221 at an I2C address such as "1-0040".
type Sensor struct {
	Addr     string
	Channels [3]Rail
}

// Board describes a tree to write.
type Board struct {
	Name        string // catalog-style name, used by Spec
	Model       string
	Compatible  []string
	L4TRelease  string // first line of /etc/nv_tegra_release
	Clusters    [][]int
	CPUFreqsKHz []int64
	// Cpu0Online writes a cpu0/online file; many kernels have none (cpu0 cannot go
	// offline).
	Cpu0Online bool
	Offline    []int // CPUs offline in the initial state
	GPUDevice  string
	GPUNode    string // of_node name
	GPUFreqsHz []int64
	EMCRatesHz []int64
	// EMCCap is where nvpmodel's EMC cap lives for this release (JP5 vs JP6), or "".
	EMCCap       string
	PowerDriver  string // "hwmon" or "iio"
	PowerTotal   string // "sum" or the total rail's name
	Sensors      []Sensor
	ThermalZones []string
	// Decoy adds a non-GPU devfreq device (the VIC), which GPU discovery must skip.
	Decoy bool
	// NvpmodelConf, when set, is written to /etc/nvpmodel/NvpmodelConfName with
	// /etc/nvpmodel.conf an absolute link to it, as on a board; NvpmodelStatus, when
	// set, is /var/lib/nvpmodel/status (e.g. "pmode:0002\n").
	NvpmodelConf, NvpmodelConfName, NvpmodelStatus string
	// TPCPGMask, when set, is the GPU's running TPC power-gating mask, written to
	// GPUDevice/tpc_pg_mask (decimal), with /sys/devices/gpu.0 a link to GPUDevice: the
	// node NVIDIA's nvpmodel confs name (TPC_POWER_GATING TPC_PG_MASK).
	TPCPGMask string
}

// Cores is the number of CPUs.
func (b Board) Cores() int {
	n := 0
	for _, c := range b.Clusters {
		n += len(c)
	}
	return n
}

// Spec is a minimal catalog entry for the board: what the backend uses from it.
func (b Board) Spec() *powermode.BoardSpec {
	s := &powermode.BoardSpec{Name: b.Name, Model: b.Model, SoC: "tegra234"}
	s.CPU.Cores = b.Cores()
	s.CPU.FreqsKHz = slices.Clone(b.CPUFreqsKHz)
	for _, c := range b.Clusters {
		s.CPU.Clusters = append(s.CPU.Clusters, powermode.ClusterSpec{Policy: c[0], CPUs: slices.Clone(c)})
	}
	s.GPU.Node = b.GPUNode
	s.GPU.FreqsHz = slices.Clone(b.GPUFreqsHz)
	s.EMC.RatesHz = slices.Clone(b.EMCRatesHz)
	s.Power.Driver = b.PowerDriver
	s.Power.Total = b.PowerTotal
	s.Thermal = slices.Clone(b.ThermalZones)
	return s
}

// ExpectedTotalMW is the board power Write's sensor values amount to under the board's
// total rule (computed here from the rails, independently of the backend).
func (b Board) ExpectedTotalMW() float64 {
	var sum float64
	for _, s := range b.Sensors {
		for _, r := range s.Channels {
			if r.Label == "NC" {
				continue
			}
			mw := float64(r.MV) * float64(r.MA) / 1000
			if b.PowerDriver == "iio" {
				mw = float64(r.MW)
			}
			if b.PowerTotal != "sum" && r.Label == b.PowerTotal {
				return mw
			}
			sum += mw
		}
	}
	return sum
}

var orinCPUKHz = []int64{115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400,
	883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400,
	1651200, 1728000, 1804800, 1881600, 1958400, 2035200, 2112000, 2188800, 2201600}

var orinThermal = []string{"cpu-thermal", "gpu-thermal", "cv0-thermal", "cv1-thermal", "cv2-thermal", "soc0-thermal", "soc1-thermal", "soc2-thermal", "tj-thermal"}

// AGXOrin64GBJP5 is an AGX Orin 64GB developer kit on JetPack 5 (L4T R35): GPU at
// /sys/devices/17000000.ga10b, cpu0 without a hotplug file, power summed over rails.
func AGXOrin64GBJP5() Board {
	return Board{
		Name:        "agx-orin-64gb",
		Model:       "NVIDIA Jetson AGX Orin Developer Kit",
		Compatible:  []string{"nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234"},
		L4TRelease:  "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023",
		Clusters:    [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}},
		CPUFreqsKHz: orinCPUKHz,
		GPUDevice:   "/sys/devices/17000000.ga10b",
		GPUNode:     "ga10b",
		GPUFreqsHz: []int64{306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000,
			1020000000, 1122000000, 1224000000, 1300500000},
		EMCRatesHz:  []int64{204000000, 665600000, 2133000000, 3199000000},
		EMCCap:      "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
		PowerDriver: "hwmon",
		PowerTotal:  "sum",
		Sensors: []Sensor{
			{Addr: "1-0040", Channels: [3]Rail{{"VDD_GPU_SOC", 5096, 618, 0}, {"VDD_CPU_CV", 5096, 2810, 0}, {"VIN_SYS_5V0", 5048, 984, 0}}},
			{Addr: "1-0041", Channels: [3]Rail{{Label: "NC"}, {"VDDQ_VDD2_1V8AO", 1796, 607, 0}, {Label: "NC"}}},
		},
		ThermalZones: orinThermal,
		Decoy:        true,
	}
}

// AGXOrin64GBJP6 is the same module on JetPack 6 (L4T R36): the GPU moved to
// /sys/devices/platform/bus@0/17000000.gpu with of_node name "gpu", and cpu0 has an
// online file.
func AGXOrin64GBJP6() Board {
	b := AGXOrin64GBJP5()
	b.L4TRelease = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025"
	b.GPUDevice = "/sys/devices/platform/bus@0/17000000.gpu"
	b.GPUNode = "gpu"
	b.EMCCap = "/sys/kernel/nvpmodel_clk_cap/emc"
	b.Cpu0Online = true
	return b
}

// OrinNano8GB is an Orin Nano 8GB developer kit on JetPack 6: 6 cores in two clusters
// (0-3, 4-5), VDD_IN is the board total.
func OrinNano8GB() Board {
	return Board{
		Name:        "orin-nano-8gb",
		Model:       "NVIDIA Jetson Orin Nano Developer Kit",
		Compatible:  []string{"nvidia,p3768-0000+p3767-0003", "nvidia,p3767-0003", "nvidia,tegra234"},
		L4TRelease:  "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025",
		Clusters:    [][]int{{0, 1, 2, 3}, {4, 5}},
		CPUFreqsKHz: append(slices.Clone(orinCPUKHz[:19]), 1510400),
		GPUDevice:   "/sys/devices/platform/bus@0/17000000.gpu",
		GPUNode:     "gpu",
		GPUFreqsHz:  []int64{306000000, 408000000, 510000000, 624750000},
		EMCRatesHz:  []int64{204000000, 665600000, 2133000000},
		EMCCap:      "/sys/kernel/nvpmodel_clk_cap/emc",
		PowerDriver: "hwmon",
		PowerTotal:  "VDD_IN",
		Sensors: []Sensor{
			{Addr: "1-0040", Channels: [3]Rail{{"VDD_IN", 5000, 1420, 0}, {"VDD_CPU_GPU_CV", 5000, 380, 0}, {"VDD_SOC", 5000, 290, 0}}},
		},
		ThermalZones: []string{"cpu-thermal", "gpu-thermal", "cv0-thermal", "cv1-thermal", "cv2-thermal", "soc0-thermal", "soc1-thermal", "soc2-thermal", "tj-thermal"},
		Cpu0Online:   true,
	}
}

// AGXXavier is a Jetson AGX Xavier on JetPack 4 (L4T R32): 8 cores in four clusters of
// two, GPU gv11b, power from the ina3221x IIO driver (rails report mW themselves).
func AGXXavier() Board {
	cpu := append(slices.Clone(orinCPUKHz[:28]), 2265600)
	return Board{
		Name:        "agx-xavier",
		Model:       "Jetson-AGX",
		Compatible:  []string{"nvidia,p2972-0000", "nvidia,galen", "nvidia,tegra194"},
		L4TRelease:  "# R32 (release), REVISION: 7.4, GCID: 33514132, BOARD: t186ref, EABI: aarch64, DATE: Fri Jun  9 04:25:08 UTC 2023",
		Clusters:    [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}},
		CPUFreqsKHz: cpu,
		GPUDevice:   "/sys/devices/17000000.gv11b",
		GPUNode:     "gv11b",
		GPUFreqsHz: []int64{114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 675750000,
			828750000, 905250000, 1032750000, 1198500000, 1236750000, 1338750000, 1377000000},
		EMCRatesHz:  []int64{204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000, 1866000000, 2133000000},
		PowerDriver: "iio",
		PowerTotal:  "sum",
		Sensors: []Sensor{
			{Addr: "1-0040", Channels: [3]Rail{{"GPU", 19200, 78, 1497}, {"CPU", 19200, 123, 2359}, {"SOC", 19200, 90, 1731}}},
			{Addr: "1-0041", Channels: [3]Rail{{"CV", 19200, 8, 154}, {"VDDRQ", 19200, 29, 556}, {"SYS5V", 4992, 402, 2006}}},
		},
		ThermalZones: []string{"AO-therm", "CPU-therm", "GPU-therm", "PLL-therm", "AUX-therm", "Tboard_tegra", "Tdiode_tegra", "thermal-fan-est"},
		Decoy:        true,
	}
}

// Boards are the hand-written layouts, by a short test name.
func Boards() map[string]Board {
	return map[string]Board{
		"agx-orin-64gb-jp5": AGXOrin64GBJP5(),
		"agx-orin-64gb-jp6": AGXOrin64GBJP6(),
		"orin-nano-8gb":     OrinNano8GB(),
		"agx-xavier":        AGXXavier(),
	}
}

// Write materialises b under dir (which must exist): cpufreq policies with every
// core at its full range and governor schedutil, the GPU at its full range under
// nvhost_podgov, the EMC unlocked at its highest rate, sensors and thermal zones.
func Write(dir string, b Board) error {
	w := writer{root: dir}
	nl := func(v int64) string { return strconv.FormatInt(v, 10) + "\n" }
	list := func(vs []int64, mul int64) string {
		var sb strings.Builder
		for _, v := range vs {
			sb.WriteString(strconv.FormatInt(v/mul, 10) + " ")
		}
		return sb.String()
	}
	// Identity.
	w.file("/proc/device-tree/model", b.Model+"\x00")
	w.file("/proc/device-tree/compatible", strings.Join(b.Compatible, "\x00")+"\x00")
	w.file("/etc/nv_tegra_release", b.L4TRelease+"\n")
	// CPUs.
	n := b.Cores()
	rng := fmt.Sprintf("0-%d\n", n-1)
	w.file("/sys/devices/system/cpu/possible", rng)
	w.file("/sys/devices/system/cpu/present", rng)
	var online []string
	for c := range n {
		if !slices.Contains(b.Offline, c) {
			online = append(online, strconv.Itoa(c))
		}
	}
	w.file("/sys/devices/system/cpu/online", strings.Join(online, ",")+"\n")
	lo, hi := b.CPUFreqsKHz[0], b.CPUFreqsKHz[len(b.CPUFreqsKHz)-1]
	for _, cl := range b.Clusters {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpufreq/policy%d", cl[0])
		cpus := make([]string, len(cl))
		for i, c := range cl {
			cpus[i] = strconv.Itoa(c)
		}
		w.file(p+"/related_cpus", strings.Join(cpus, " ")+"\n")
		w.file(p+"/affected_cpus", strings.Join(cpus, " ")+"\n")
		w.file(p+"/scaling_available_frequencies", list(b.CPUFreqsKHz, 1)+"\n")
		w.file(p+"/scaling_available_governors", "userspace schedutil performance \n")
		w.file(p+"/scaling_governor", "schedutil\n")
		w.file(p+"/scaling_driver", "tegra194\n")
		w.file(p+"/scaling_min_freq", nl(lo))
		w.file(p+"/scaling_max_freq", nl(hi))
		w.file(p+"/scaling_cur_freq", nl(hi))
		w.file(p+"/cpuinfo_min_freq", nl(lo))
		w.file(p+"/cpuinfo_max_freq", nl(hi))
		w.file(p+"/cpuinfo_cur_freq", nl(hi))
		for _, c := range cl {
			cd := fmt.Sprintf("/sys/devices/system/cpu/cpu%d", c)
			w.link(cd+"/cpufreq", p)
			if c != 0 || b.Cpu0Online {
				on := "1\n"
				if slices.Contains(b.Offline, c) {
					on = "0\n"
				}
				w.file(cd+"/online", on)
			}
		}
	}
	// GPU (and a decoy devfreq device that is not the GPU).
	devs := []struct{ dev, node string }{{b.GPUDevice, b.GPUNode}}
	if b.Decoy {
		devs = append(devs, struct{ dev, node string }{path.Dir(b.GPUDevice) + "/15340000.vic", "vic"})
	}
	for i, d := range devs {
		name := path.Base(d.dev)
		df := d.dev + "/devfreq/" + name
		freqs := b.GPUFreqsHz
		if i > 0 {
			freqs = []int64{115200000, 729600000}
		}
		w.file(df+"/available_frequencies", list(freqs, 1)+"\n")
		w.file(df+"/available_governors", "nvhost_podgov userspace performance simple_ondemand\n")
		w.file(df+"/governor", "nvhost_podgov\n")
		w.file(df+"/min_freq", nl(freqs[0]))
		w.file(df+"/max_freq", nl(freqs[len(freqs)-1]))
		w.file(df+"/cur_freq", nl(freqs[len(freqs)-1]))
		w.link(df+"/device", d.dev)
		w.link("/sys/class/devfreq/"+name, df)
		ofn := "/sys/firmware/devicetree/base/bus@0/" + d.node + "@" + strings.SplitN(name, ".", 2)[0]
		w.file(ofn+"/name", d.node+"\x00")
		w.link(d.dev+"/of_node", ofn)
		if i == 0 {
			w.file(d.dev+"/load", "0\n")
			w.file(d.dev+"/railgate_enable", "1\n")
			if b.TPCPGMask != "" {
				w.file(d.dev+"/tpc_pg_mask", b.TPCPGMask+"\n")
				w.link("/sys/devices/gpu.0", d.dev)
			}
		}
	}
	// EMC (BPMP debugfs).
	emcHi := b.EMCRatesHz[len(b.EMCRatesHz)-1]
	w.file("/sys/kernel/debug/bpmp/debug/clk/emc/rate", nl(emcHi))
	w.file("/sys/kernel/debug/bpmp/debug/clk/emc/min_rate", nl(b.EMCRatesHz[0]))
	w.file("/sys/kernel/debug/bpmp/debug/clk/emc/max_rate", nl(emcHi))
	w.file("/sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked", "0\n")
	w.file("/sys/kernel/debug/bpmp/debug/emc/possible_rates", list(b.EMCRatesHz, 1000)+"(kHz)\n")
	if b.EMCCap != "" {
		w.file(b.EMCCap, "0\n")
	}
	// Power monitors.
	for i, s := range b.Sensors {
		switch b.PowerDriver {
		case "iio":
			d := fmt.Sprintf("/sys/bus/i2c/drivers/ina3221x/%s/iio:device%d", s.Addr, i)
			w.file(d+"/name", "ina3221x\n")
			for k, r := range s.Channels {
				w.file(fmt.Sprintf("%s/rail_name_%d", d, k), r.Label+"\n")
				w.file(fmt.Sprintf("%s/in_power%d_input", d, k), nl(r.MW))
				w.file(fmt.Sprintf("%s/in_voltage%d_input", d, k), nl(r.MV))
				w.file(fmt.Sprintf("%s/in_current%d_input", d, k), nl(r.MA))
			}
		default:
			// hwmonN numbers are not stable; use a high one so nothing assumes hwmon0.
			d := fmt.Sprintf("/sys/bus/i2c/drivers/ina3221/%s/hwmon/hwmon%d", s.Addr, 3+i)
			w.file(d+"/name", "ina3221\n")
			var shunt int64
			for c, r := range s.Channels {
				w.file(fmt.Sprintf("%s/in%d_label", d, c+1), r.Label+"\n")
				w.file(fmt.Sprintf("%s/in%d_input", d, c+1), nl(r.MV))
				w.file(fmt.Sprintf("%s/curr%d_input", d, c+1), nl(r.MA))
				w.file(fmt.Sprintf("%s/curr%d_max", d, c+1), "32760\n")
				w.file(fmt.Sprintf("%s/in%d_input", d, c+4), nl(r.MA/20))
				shunt += r.MA / 20
			}
			w.file(d+"/in7_label", "sum of shunt voltages\n")
			w.file(d+"/in7_input", nl(shunt))
			w.file(d+"/curr4_input", nl(shunt*20))
		}
	}
	// Thermal zones.
	for i, z := range b.ThermalZones {
		d := fmt.Sprintf("/sys/class/thermal/thermal_zone%d", i)
		w.file(d+"/type", z+"\n")
		w.file(d+"/temp", nl(int64(40000+500*i)))
		w.file(d+"/trip_point_0_type", "active\n") // a fan trip: never the clock cap
		w.file(d+"/trip_point_0_temp", "50000\n")
		w.file(d+"/trip_point_1_type", "passive\n")
		w.file(d+"/trip_point_1_temp", nl(int64(97000+500*i)))
		w.file(d+"/trip_point_2_type", "critical\n")
		w.file(d+"/trip_point_2_temp", "104500\n")
	}
	if b.NvpmodelConf != "" {
		w.file("/etc/nvpmodel/"+b.NvpmodelConfName, b.NvpmodelConf)
		if w.err == nil {
			w.err = os.Symlink("/etc/nvpmodel/"+b.NvpmodelConfName, w.host("/etc/nvpmodel.conf"))
		}
	}
	if b.NvpmodelStatus != "" {
		w.file("/var/lib/nvpmodel/status", b.NvpmodelStatus)
	}
	return w.err
}

type writer struct {
	root string
	err  error
}

func (w *writer) host(p string) string { return filepath.Join(w.root, filepath.FromSlash(p)) }

func (w *writer) file(p, content string) {
	if w.err != nil {
		return
	}
	h := w.host(p)
	if w.err = os.MkdirAll(filepath.Dir(h), 0o755); w.err != nil {
		return
	}
	w.err = os.WriteFile(h, []byte(content), 0o644)
}

// link makes p a relative symlink to target, as sysfs does.
func (w *writer) link(p, target string) {
	if w.err != nil {
		return
	}
	h := w.host(p)
	if w.err = os.MkdirAll(filepath.Dir(h), 0o755); w.err != nil {
		return
	}
	rel, err := filepath.Rel(filepath.Dir(h), w.host(target))
	if err != nil {
		w.err = err
		return
	}
	w.err = os.Symlink(rel, h)
}

// Digest maps every file and symlink under dir (relative slash path) to a hash of its
// contents (or link target) and mode bits: two equal digests mean two identical trees.
func Digest(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link:" + t
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			out[rel] = info.Mode().String() + ":" + hex.EncodeToString(sum[:])
		}
		return nil
	})
	return out, err
}

// DiffDigests lists the paths whose entries differ between two digests.
func DiffDigests(a, b map[string]string) []string {
	var diff []string
	for k, v := range a {
		if b[k] != v {
			diff = append(diff, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			diff = append(diff, k)
		}
	}
	slices.Sort(diff)
	return diff
}
