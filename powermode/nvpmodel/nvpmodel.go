// Package nvpmodel reads NVIDIA's nvpmodel configuration (/etc/nvpmodel.conf) and the
// current mode it records (/var/lib/nvpmodel/status), and turns the conf's power models
// into Fulcrum modes on a board's level grid.
//
// The conf format (docs/design.md §4):
//
//	< PARAM TYPE=FILE|CLOCK NAME=X >    followed by "ARG_NAME /sys/path" lines
//	< PARAM TYPE=HWMON NAME=X >         followed by "ARG_NAME /sys/.../hwmon ATTR" lines
//	< POWER_MODEL ID=n NAME=s >         followed by "PARAM ARG VALUE" lines
//	< PM_CONFIG DEFAULT=n >             mandatory: the mode set at first boot
//
// Lines starting with # are comments; "<PARAM" without a space after < is accepted, as
// NVIDIA's Orin confs write their EMC section. HWMON sections (Xavier NX's
// VDDIN_OC_LIMIT over-current limits) are parsed and checked but do not change a mode. In a POWER_MODEL, -1 means INT_MAX (no cap) for
// clocks; an EMC MAX_FREQ of 0 also means no cap. Values need not be numbers
// (GPU_PWR_CNTL_EN on).
package nvpmodel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// ConfPath and StatusPath are where nvpmodel keeps its conf and its current mode,
// relative to the filesystem root.
const (
	ConfPath   = "/etc/nvpmodel.conf"
	StatusPath = "/var/lib/nvpmodel/status"
)

// Param is one PARAM section: a named group of sysfs files.
type Param struct {
	Type string            // FILE, CLOCK or HWMON
	Name string            // e.g. CPU_ONLINE, GPU, EMC, CPU_A78_0, VDDIN_OC_LIMIT
	Args map[string]string // ARG_NAME -> path, e.g. MAX_FREQ -> /sys/.../max_freq
	// Attrs is set for HWMON: ARG_NAME -> attribute file in the hwmon directory Args
	// names, e.g. WARN -> curr1_max.
	Attrs map[string]string
	Line  int // line of the section header
}

// Setting is one "PARAM ARG VALUE" line of a power model.
type Setting struct {
	Param, Arg, Value string
	Line              int
}

// PowerModel is one POWER_MODEL section.
type PowerModel struct {
	ID       int
	Name     string
	Settings []Setting
	Line     int
}

// Value returns the value the model sets for param/arg (the last one if repeated).
func (m *PowerModel) Value(param, arg string) (string, bool) {
	for i := len(m.Settings) - 1; i >= 0; i-- {
		if s := m.Settings[i]; s.Param == param && s.Arg == arg {
			return s.Value, true
		}
	}
	return "", false
}

// Conf is a parsed nvpmodel.conf.
type Conf struct {
	Params  []Param
	Models  []PowerModel
	Default int // PM_CONFIG DEFAULT
}

// Param returns the PARAM section called name.
func (c *Conf) Param(name string) (*Param, bool) {
	for i := range c.Params {
		if c.Params[i].Name == name {
			return &c.Params[i], true
		}
	}
	return nil, false
}

// Model returns the power model with the id.
func (c *Conf) Model(id int) (*PowerModel, bool) {
	for i := range c.Models {
		if c.Models[i].ID == id {
			return &c.Models[i], true
		}
	}
	return nil, false
}

// Parse reads a conf. Errors name the line and what was expected there.
func Parse(r io.Reader) (*Conf, error) {
	c := &Conf{Default: -1}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var (
		param   *Param      // open PARAM section
		model   *PowerModel // open POWER_MODEL section
		other   bool        // open section of a kind we do not use (skipped)
		n       int
		defLine int
	)
	fail := func(f string, a ...any) error {
		return fmt.Errorf("nvpmodel conf line %d: %s", n, fmt.Sprintf(f, a...))
	}
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "<") {
			if !strings.HasSuffix(line, ">") {
				return nil, fail("section header %q does not end with >", line)
			}
			fields := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(line, "<"), ">"))
			if len(fields) == 0 {
				return nil, fail("empty section header")
			}
			attrs := map[string]string{}
			for _, f := range fields[1:] {
				k, v, ok := strings.Cut(f, "=")
				if !ok || k == "" || v == "" {
					return nil, fail("section attribute %q: want KEY=VALUE", f)
				}
				attrs[k] = v
			}
			param, model, other = nil, nil, false
			switch fields[0] {
			case "PARAM":
				t, name := attrs["TYPE"], attrs["NAME"]
				if t != "FILE" && t != "CLOCK" && t != "HWMON" {
					return nil, fail("PARAM TYPE=%q: want FILE, CLOCK or HWMON", t)
				}
				if name == "" {
					return nil, fail("PARAM without NAME=")
				}
				if p, dup := c.Param(name); dup {
					return nil, fail("PARAM %s defined again (first on line %d)", name, p.Line)
				}
				p := Param{Type: t, Name: name, Args: map[string]string{}, Line: n}
				if t == "HWMON" {
					p.Attrs = map[string]string{}
				}
				c.Params = append(c.Params, p)
				param = &c.Params[len(c.Params)-1]
			case "POWER_MODEL":
				id, err := strconv.Atoi(attrs["ID"])
				if err != nil || id < 0 {
					return nil, fail("POWER_MODEL ID=%q: want a non-negative integer", attrs["ID"])
				}
				if attrs["NAME"] == "" {
					return nil, fail("POWER_MODEL %d without NAME=", id)
				}
				if m, dup := c.Model(id); dup {
					return nil, fail("POWER_MODEL ID=%d defined again (first on line %d)", id, m.Line)
				}
				c.Models = append(c.Models, PowerModel{ID: id, Name: attrs["NAME"], Line: n})
				model = &c.Models[len(c.Models)-1]
			case "PM_CONFIG":
				d, err := strconv.Atoi(attrs["DEFAULT"])
				if err != nil || d < 0 {
					return nil, fail("PM_CONFIG DEFAULT=%q: want a power model id", attrs["DEFAULT"])
				}
				c.Default, defLine = d, n
			default:
				other = true // e.g. fan sections in some releases: not ours
			}
			continue
		}
		fields := strings.Fields(line)
		switch {
		case param != nil && param.Type == "HWMON":
			if len(fields) != 3 {
				return nil, fail("in PARAM %s (HWMON): %q: want ARG_NAME /hwmon/dir ATTR", param.Name, line)
			}
			param.Args[fields[0]], param.Attrs[fields[0]] = fields[1], fields[2]
		case param != nil:
			if len(fields) != 2 {
				return nil, fail("in PARAM %s: %q: want ARG_NAME /path", param.Name, line)
			}
			param.Args[fields[0]] = fields[1]
		case model != nil:
			if len(fields) != 3 {
				return nil, fail("in POWER_MODEL %d: %q: want PARAM ARG VALUE", model.ID, line)
			}
			p, ok := c.Param(fields[0])
			if !ok {
				return nil, fail("in POWER_MODEL %d: no PARAM NAME=%s is defined before it", model.ID, fields[0])
			}
			if _, ok := p.Args[fields[1]]; !ok {
				return nil, fail("in POWER_MODEL %d: PARAM %s has no argument %s", model.ID, fields[0], fields[1])
			}
			model.Settings = append(model.Settings, Setting{Param: fields[0], Arg: fields[1], Value: fields[2], Line: n})
		case other:
		default:
			return nil, fail("%q outside any < SECTION >", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("nvpmodel conf: read after line %d: %w", n, err)
	}
	if c.Default < 0 {
		return nil, errors.New("nvpmodel conf: no < PM_CONFIG DEFAULT=n > section (it is mandatory)")
	}
	if len(c.Models) == 0 {
		return nil, errors.New("nvpmodel conf: no < POWER_MODEL > sections")
	}
	if _, ok := c.Model(c.Default); !ok {
		return nil, fmt.Errorf("nvpmodel conf line %d: PM_CONFIG DEFAULT=%d names no POWER_MODEL", defLine, c.Default)
	}
	return c, nil
}

// Preset is one power model as a Fulcrum mode on a board's grid.
type Preset struct {
	ID   int
	Name string
	// Caps are the model's limits as written (0 where it sets none); Mode is the
	// board mode they amount to: its core count and each cap, or the board maximum
	// where there is none, snapped to the board's levels.
	Caps      powermode.Mode
	Mode      powermode.Mode
	TPCPGMask int
	// NeedsReboot is set when the model's TPC power-gating mask differs from the
	// reference mode's: switching to it needs a reboot, so the daemon never does.
	NeedsReboot bool
	Default     bool
	Source      string // SourceLiveConf or SourceCatalog (set by ForBoard and Catalog)
}

// Presets turns every power model into a Preset on spec's grid, with NeedsReboot
// relative to the conf's default mode.
func (c *Conf) Presets(spec *powermode.BoardSpec) ([]Preset, error) {
	return c.PresetsFrom(spec, c.Default)
}

// PresetsFrom is Presets with NeedsReboot relative to the mode with id current (the
// board's mode now, from ReadStatus).
func (c *Conf) PresetsFrom(spec *powermode.BoardSpec, current int) ([]Preset, error) {
	space, err := spec.Space()
	if err != nil {
		return nil, fmt.Errorf("nvpmodel presets: %w", err)
	}
	ref, ok := c.Model(current)
	if !ok {
		return nil, fmt.Errorf("nvpmodel presets: current mode %d is not in the conf (ids %v): check /var/lib/nvpmodel/status", current, c.ids())
	}
	refMask, err := tpcMask(ref)
	if err != nil {
		return nil, err
	}
	out := make([]Preset, 0, len(c.Models))
	for i := range c.Models {
		m := &c.Models[i]
		p := Preset{ID: m.ID, Name: m.Name, Default: m.ID == c.Default}
		if p.Caps, err = c.caps(m, spec); err != nil {
			return nil, err
		}
		if p.TPCPGMask, err = tpcMask(m); err != nil {
			return nil, err
		}
		p.NeedsReboot = p.TPCPGMask != refMask
		p.Mode = space.Snap(spec.PresetMode(powermode.PresetSpec{
			Cores: p.Caps.Cores, CPUMaxKHz: p.Caps.CPUKHz, GPUMaxHz: p.Caps.GPUHz, EMCMaxHz: p.Caps.EMCHz,
		}))
		out = append(out, p)
	}
	return out, nil
}

func (c *Conf) ids() []int {
	var ids []int
	for _, m := range c.Models {
		ids = append(ids, m.ID)
	}
	return ids
}

func tpcMask(m *PowerModel) (int, error) {
	v, ok := m.Value("TPC_POWER_GATING", "TPC_PG_MASK")
	if !ok {
		return 0, nil
	}
	mask, err := strconv.Atoi(v)
	if err != nil {
		return 0, settingErr(m, "TPC_POWER_GATING", "TPC_PG_MASK", v, "an integer mask")
	}
	return mask, nil
}

func settingErr(m *PowerModel, param, arg, v, want string) error {
	line := m.Line
	for _, s := range m.Settings {
		if s.Param == param && s.Arg == arg {
			line = s.Line
		}
	}
	return fmt.Errorf("nvpmodel conf line %d: POWER_MODEL %d (%s) %s %s = %q: want %s", line, m.ID, m.Name, param, arg, v, want)
}

// caps reads a model's core count and CPU/GPU/EMC caps; 0 = no cap.
func (c *Conf) caps(m *PowerModel, spec *powermode.BoardSpec) (powermode.Mode, error) {
	var caps powermode.Mode
	// cpu0 cannot be taken offline, so it counts whether or not the conf lists it.
	online := map[int]bool{0: true}
	sawOnline := false
	var cpuCaps []int64
	for _, s := range m.Settings {
		switch {
		case s.Param == "CPU_ONLINE":
			sawOnline = true
			n, err := strconv.Atoi(strings.TrimPrefix(s.Arg, "CORE_"))
			if err != nil || !strings.HasPrefix(s.Arg, "CORE_") || n < 0 {
				return caps, settingErr(m, s.Param, s.Arg, s.Value, "CORE_<n>")
			}
			if n >= spec.CPU.Cores {
				return caps, fmt.Errorf("nvpmodel conf line %d: POWER_MODEL %d (%s) names CORE_%d, board %s has cores 0..%d: is this the conf of another board?", s.Line, m.ID, m.Name, n, spec.Name, spec.CPU.Cores-1)
			}
			switch s.Value {
			case "1":
				online[n] = true
			case "0":
				if n != 0 {
					delete(online, n)
				}
			default:
				return caps, settingErr(m, s.Param, s.Arg, s.Value, "1 or 0")
			}
		case strings.HasPrefix(s.Param, "CPU_") && s.Arg == "MAX_FREQ":
			v, err := capValue(s.Value)
			if err != nil {
				return caps, settingErr(m, s.Param, s.Arg, s.Value, "kHz or -1")
			}
			cpuCaps = append(cpuCaps, v)
		}
	}
	caps.Cores = len(online)
	if !sawOnline {
		caps.Cores = spec.CPU.Cores
	}
	if caps.Cores > spec.CPU.Cores {
		return caps, fmt.Errorf("nvpmodel conf line %d: POWER_MODEL %d (%s) puts %d cores online, board %s has %d: is this the conf of another board?", m.Line, m.ID, m.Name, caps.Cores, spec.Name, spec.CPU.Cores)
	}
	// Clusters normally share one cap; if they differ, the highest one is what the
	// busiest cluster may run at, and Fulcrum's mode has one CPU frequency.
	if len(cpuCaps) > 0 && !slices.Contains(cpuCaps, 0) {
		caps.CPUKHz = slices.Max(cpuCaps)
	}
	for _, k := range []struct {
		param string
		dst   *int64
	}{{"GPU", &caps.GPUHz}, {"EMC", &caps.EMCHz}} {
		if v, ok := m.Value(k.param, "MAX_FREQ"); ok {
			hz, err := capValue(v)
			if err != nil {
				return caps, settingErr(m, k.param, "MAX_FREQ", v, "Hz, 0 or -1")
			}
			*k.dst = hz
		}
	}
	return caps, nil
}

// capValue parses a MAX_FREQ value: -1 (INT_MAX) and 0 mean no cap (0 returned).
func capValue(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < -1 {
		return 0, fmt.Errorf("bad cap %q", v)
	}
	return max(n, 0), nil
}

// Load reads and parses root's /etc/nvpmodel.conf. The file is normally an absolute
// symlink (to /etc/nvpmodel/nvpmodel_<module>.conf), which is resolved under root.
func Load(root string) (*Conf, error) {
	p, err := resolveUnder(root, ConfPath)
	if err != nil {
		return nil, fmt.Errorf("nvpmodel conf: %w (is nvpmodel installed? on a development host, use a simulated board's --root)", err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("nvpmodel conf: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

// resolveUnder follows symlinks of the last element of abs, interpreting absolute
// targets relative to root rather than the host's /.
func resolveUnder(root, abs string) (string, error) {
	p := filepath.Join(root, abs)
	for range 8 {
		st, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		t, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(t) {
			p = filepath.Join(root, t)
		} else {
			p = filepath.Join(filepath.Dir(p), t)
		}
	}
	return "", fmt.Errorf("%s: too many levels of symbolic links", abs)
}

// ReadStatus returns the current nvpmodel mode id from root's
// /var/lib/nvpmodel/status ("pmode:0002", possibly followed by " fmode:...").
func ReadStatus(root string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(root, StatusPath))
	if err != nil {
		return 0, fmt.Errorf("nvpmodel status: %w (nvpmodel writes it at boot; run `sudo nvpmodel -q` to see the mode)", err)
	}
	for _, f := range strings.Fields(string(raw)) {
		if v, ok := strings.CutPrefix(f, "pmode:"); ok {
			id, err := strconv.Atoi(v)
			if err != nil || id < 0 {
				return 0, fmt.Errorf("nvpmodel status %s: %q: want pmode:NNNN", StatusPath, f)
			}
			return id, nil
		}
	}
	return 0, fmt.Errorf("nvpmodel status %s: %q has no pmode:NNNN field", StatusPath, strings.TrimSpace(string(raw)))
}
