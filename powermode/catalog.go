package powermode

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/fulcrum-edge/fulcrum/configs"
)

// BoardSpec is one entry of the board catalog (configs/boards/*.yaml): what a board
// model has and how its sysfs tree is laid out. Values come from docs/design.md §4; the YAML
// says where one is an assumption.
type BoardSpec struct {
	Name       string   `yaml:"name"`       // catalog key, e.g. agx-orin-64gb
	Display    string   `yaml:"display"`    // human name
	Model      string   `yaml:"model"`      // /proc/device-tree/model as the kernel shows it
	Modules    []string `yaml:"modules"`    // module part numbers that identify it, e.g. p3701-0005
	Compatible []string `yaml:"compatible"` // /proc/device-tree/compatible entries, most specific first
	SoC        string   `yaml:"soc"`        // tegra234, tegra194
	L4T        []string `yaml:"l4t"`        // L4T releases it ships with, e.g. "R35.4.1", "R36.4.3"

	CPU     CPUSpec      `yaml:"cpu"`
	GPU     GPUSpec      `yaml:"gpu"`
	EMC     EMCSpec      `yaml:"emc"`
	Power   PowerSpec    `yaml:"power"`
	Thermal []string     `yaml:"thermal_zones"` // thermal zone types, in zone-number order
	NVP     NVPModelSpec `yaml:"nvpmodel"`
	Notes   []string     `yaml:"notes"` // assumptions and sources
}

// CPUSpec describes the CPU complex.
type CPUSpec struct {
	Cores    int           `yaml:"cores"`
	Clusters []ClusterSpec `yaml:"clusters"`
	FreqsKHz []int64       `yaml:"freqs_khz"` // scaling_available_frequencies, ascending
}

// ClusterSpec is one cpufreq policy (a cluster whose cores share a clock).
type ClusterSpec struct {
	Policy int   `yaml:"policy"` // policyN directory number = first CPU of the cluster
	CPUs   []int `yaml:"cpus"`
}

// GPUSpec describes the GPU devfreq device.
type GPUSpec struct {
	Node    string            `yaml:"node"`     // of_node name: ga10b, gv11b, gpu
	FreqsHz []int64           `yaml:"freqs_hz"` // available_frequencies, ascending
	Paths   map[string]string `yaml:"paths"`    // layout (jp4, jp5, jp6) -> device path under /sys/devices
}

// EMCSpec describes the memory clock.
type EMCSpec struct {
	RatesHz []int64 `yaml:"rates_hz"`
}

// PowerSpec describes the INA3221 sensors and how to total them.
type PowerSpec struct {
	Driver  string       `yaml:"driver"` // "hwmon" (ina3221, JetPack 5/6) or "iio" (ina3221x, JetPack 4)
	Total   string       `yaml:"total"`  // "sum" or the name of the rail that is the board total
	Sensors []SensorSpec `yaml:"sensors"`
}

// SensorSpec is one INA3221 on the I2C bus.
type SensorSpec struct {
	Addr     string        `yaml:"addr"` // i2c device name, e.g. 1-0040
	Channels []ChannelSpec `yaml:"channels"`
}

// ChannelSpec is one INA3221 channel; Label "NC" means not connected.
type ChannelSpec struct {
	Channel int    `yaml:"channel"` // 1..3
	Label   string `yaml:"label"`
}

// NVPModelSpec lists the board's nvpmodel presets as NVIDIA's conf for the module has
// them. They are the fallback: on a board the live /etc/nvpmodel.conf wins
// (nvpmodel.BoardPresets).
type NVPModelSpec struct {
	// Source names the NVIDIA conf the values were read from ("owner/repo path").
	Source    string       `yaml:"source"`
	Default   int          `yaml:"default"`     // PM_CONFIG DEFAULT
	CPUMinKHz int64        `yaml:"cpu_min_khz"` // the CPU MIN_FREQ every model sets
	Presets   []PresetSpec `yaml:"presets"`
}

// PresetSpec is one nvpmodel power mode expressed as caps, written as NVIDIA's conf
// writes them (not snapped to the board's levels). Zero caps mean "no cap" (the board
// maximum), as -1 does in nvpmodel.conf.
type PresetSpec struct {
	ID        int    `yaml:"id"`
	Name      string `yaml:"name"`
	Cores     int    `yaml:"cores"`
	CPUMaxKHz int64  `yaml:"cpu_max_khz"`
	GPUMaxHz  int64  `yaml:"gpu_max_hz"`
	EMCMaxHz  int64  `yaml:"emc_max_hz"`
	TPCPGMask int    `yaml:"tpc_pg_mask"`
}

// Levels are the board's full levels: 1..cores online and every frequency table entry.
func (b *BoardSpec) Levels() Levels {
	cores := make([]int, b.CPU.Cores)
	for i := range cores {
		cores[i] = i + 1
	}
	return Levels{Cores: cores, CPUKHz: slices.Clone(b.CPU.FreqsKHz), GPUHz: slices.Clone(b.GPU.FreqsHz), EMCHz: slices.Clone(b.EMC.RatesHz)}
}

// Space is the full grid of the board's levels.
func (b *BoardSpec) Space() (*Space, error) { return NewSpace(b.Levels()) }

// PresetMode is the preset's caps as a mode: its core count and each cap as written, or
// the board maximum where the preset has none. Caps need not be levels of the board:
// Space.Snap turns the result into the mode the kernel would run.
func (b *BoardSpec) PresetMode(p PresetSpec) Mode {
	m := Mode{Cores: p.Cores, CPUKHz: p.CPUMaxKHz, GPUHz: p.GPUMaxHz, EMCHz: p.EMCMaxHz}
	if m.Cores <= 0 || m.Cores > b.CPU.Cores {
		m.Cores = b.CPU.Cores
	}
	if m.CPUKHz <= 0 {
		m.CPUKHz = slices.Max(b.CPU.FreqsKHz)
	}
	if m.GPUHz <= 0 {
		m.GPUHz = slices.Max(b.GPU.FreqsHz)
	}
	if m.EMCHz <= 0 {
		m.EMCHz = slices.Max(b.EMC.RatesHz)
	}
	return m
}

// Validate checks a spec for the mistakes a hand-edited catalog entry can have.
func (b *BoardSpec) Validate() error {
	var errs []string
	add := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	if b.Name == "" {
		add("name is empty")
	}
	if b.CPU.Cores < 1 {
		add("cpu.cores must be at least 1")
	}
	seen := map[int]bool{}
	for _, c := range b.CPU.Clusters {
		for _, cpu := range c.CPUs {
			if cpu < 0 || cpu >= b.CPU.Cores || seen[cpu] {
				add("cpu.clusters: cpu %d is out of range or in two clusters", cpu)
			}
			seen[cpu] = true
		}
	}
	if len(seen) != b.CPU.Cores {
		add("cpu.clusters cover %d cpus, want cpu.cores = %d", len(seen), b.CPU.Cores)
	}
	for _, l := range []struct {
		name string
		v    []int64
	}{{"cpu.freqs_khz", b.CPU.FreqsKHz}, {"gpu.freqs_hz", b.GPU.FreqsHz}, {"emc.rates_hz", b.EMC.RatesHz}} {
		if len(l.v) == 0 {
			add("%s is empty", l.name)
		}
		if !slices.IsSorted(l.v) {
			add("%s must be ascending", l.name)
		}
	}
	ids := map[int]bool{}
	for _, p := range b.NVP.Presets {
		if ids[p.ID] {
			add("nvpmodel.presets: id %d appears twice", p.ID)
		}
		ids[p.ID] = true
	}
	if len(b.NVP.Presets) > 0 && !ids[b.NVP.Default] {
		add("nvpmodel.default %d names no preset", b.NVP.Default)
	}
	if b.Power.Driver != "hwmon" && b.Power.Driver != "iio" {
		add("power.driver %q must be hwmon or iio", b.Power.Driver)
	}
	if len(errs) > 0 {
		return fmt.Errorf("board %q: %s", b.Name, strings.Join(errs, "; "))
	}
	return nil
}

// Catalog is the set of known boards, by name.
type Catalog struct {
	boards map[string]*BoardSpec
	names  []string
}

// LoadCatalog reads every *.yaml in dir of fsys (configs.FS's "boards", usually).
func LoadCatalog(fsys fs.FS, dir string) (*Catalog, error) {
	c := &Catalog{boards: map[string]*BoardSpec{}}
	err := configs.DecodeDir(fsys, dir, func(p string, b *BoardSpec) error {
		if err := b.Validate(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if _, dup := c.boards[b.Name]; dup {
			return fmt.Errorf("%s: board %q defined twice", p, b.Name)
		}
		c.boards[b.Name] = b
		c.names = append(c.names, b.Name)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("board catalog: %w", err)
	}
	slices.Sort(c.names)
	return c, nil
}

// Names lists the catalog's board names, sorted.
func (c *Catalog) Names() []string { return slices.Clone(c.names) }

// Board returns the spec called name, or an error listing the known names.
func (c *Catalog) Board(name string) (*BoardSpec, error) {
	b, ok := c.boards[name]
	if !ok {
		return nil, fmt.Errorf("unknown board %q: known boards are %s", name, strings.Join(c.names, ", "))
	}
	return b, nil
}

// ByModule returns the spec whose module list has the part number (e.g. p3701-0005).
func (c *Catalog) ByModule(module string) (*BoardSpec, bool) {
	for _, n := range c.names {
		if slices.Contains(c.boards[n].Modules, module) {
			return c.boards[n], true
		}
	}
	return nil, false
}
