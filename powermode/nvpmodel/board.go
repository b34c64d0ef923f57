package nvpmodel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Where a board's presets came from (Preset.Source, BoardPresets.Source).
const (
	SourceLiveConf = "live-conf" // the board's /etc/nvpmodel.conf
	SourceCatalog  = "catalog"   // the catalog entry (configs/boards), NVIDIA's conf as published
)

// BoardPresets are a board's nvpmodel presets and the mode it runs. Everything that
// uses presets (GMD's start points, the profiler's "presets" modes, fulcrumctl board
// info/modes, the API's nvpmodel field) reads them through ForBoard, so the live conf
// wins and the reboot rule holds everywhere.
type BoardPresets struct {
	Source string // SourceLiveConf or SourceCatalog
	// Current is the nvpmodel mode the board runs: /var/lib/nvpmodel/status, or the
	// default mode when the status cannot be read (CurrentKnown false).
	Current      int
	CurrentKnown bool
	Presets      []Preset
	// TPCMask is the GPU's running TPC power-gating mask that NeedsReboot compares
	// with: read from the GPU's tpc_pg_mask node (TPCMaskSource "sysfs"), which wins
	// over the mask of the mode the status file names ("status": no readable node).
	TPCMask       int
	TPCMaskSource string
	// Notes say what was not used and why (a conf that failed to parse, a missing
	// status): worth a warning, never fatal.
	Notes    []string
	root     string // where the status file is read again (Now); "" when not from ForBoard
	maskPath string // the GPU's TPC mask node (the conf's, else TPCMaskPath)
}

// Where BoardPresets.TPCMask came from.
const (
	TPCMaskSysfs  = "sysfs"
	TPCMaskStatus = "status"
)

// ForBoard returns the presets of the board spec whose tree is at root: from root's
// /etc/nvpmodel.conf relative to the mode in /var/lib/nvpmodel/status, or, when there
// is no conf or it does not fit the board, from the catalog entry. Each preset's
// NeedsReboot says whether its TPC mask differs from the running mode's.
//
// The running TPC mask is read from the GPU's tpc_pg_mask node (the path the conf's
// TPC_POWER_GATING section names, else TPCMaskPath) and trusted over the status file:
// after `nvpmodel -m` to a mode with another mask the status names the new mode while
// the GPU runs the old mask until a reboot, and only presets with the mask the GPU runs
// are live.
func ForBoard(root string, spec *powermode.BoardSpec) (*BoardPresets, error) {
	bp, err := forBoard(root, spec)
	if err != nil {
		return nil, err
	}
	bp.root = root
	bp.trustGPUMask(root, spec)
	return bp, nil
}

func forBoard(root string, spec *powermode.BoardSpec) (*BoardPresets, error) {
	var notes []string
	current, statusErr := ReadStatus(root)
	conf, err := Load(root)
	if err == nil {
		bp, perr := fromConf(conf, spec, current, statusErr)
		if perr == nil {
			bp.TPCMask, bp.TPCMaskSource = tpcOf(bp), TPCMaskStatus
			bp.maskPath = TPCMaskPath
			if p, ok := conf.Param("TPC_POWER_GATING"); ok && p.Args["TPC_PG_MASK"] != "" {
				bp.maskPath = p.Args["TPC_PG_MASK"]
			}
			return bp, nil
		}
		notes = append(notes, fmt.Sprintf("live nvpmodel conf not used: %v", perr))
	} else if !errors.Is(err, fs.ErrNotExist) {
		notes = append(notes, fmt.Sprintf("live nvpmodel conf not used: %v", err))
	}
	bp, err := Catalog(spec, current, statusErr == nil)
	if err != nil {
		return nil, err
	}
	bp.TPCMask, bp.TPCMaskSource, bp.maskPath = tpcOf(bp), TPCMaskStatus, TPCMaskPath
	if statusErr != nil {
		notes = append(notes, fmt.Sprintf("%v: assuming the catalog's default mode %d", statusErr, spec.NVP.Default))
	}
	bp.Notes = append(notes, bp.Notes...)
	return bp, nil
}

// TPCMaskPath is the GPU's TPC power-gating mask node as NVIDIA's nvpmodel confs name
// it (TPC_POWER_GATING TPC_PG_MASK), used when the conf names none.
const TPCMaskPath = "/sys/devices/gpu.0/tpc_pg_mask"

// tpcOf is the TPC mask of the mode the status names (the reference of NeedsReboot).
func tpcOf(bp *BoardPresets) int {
	if p, ok := bp.Running(); ok {
		return p.TPCPGMask
	}
	return 0
}

// trustGPUMask reads the running mask from the GPU's node and, where it can, makes it
// the reference of NeedsReboot, saying so when it disagrees with the status file.
func (b *BoardPresets) trustGPUMask(root string, spec *powermode.BoardSpec) {
	mask, err := ReadTPCMask(root, b.maskPath)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			b.Notes = append(b.Notes, fmt.Sprintf("%v: trusting the status file's mode for the TPC mask", err))
		}
		return
	}
	if mask != b.TPCMask {
		b.Notes = append(b.Notes, fmt.Sprintf("nvpmodel status names mode %d (TPC mask %d) but the GPU runs TPC mask %d (%s; nvpmodel -m since the last boot?): trusting the GPU, so only presets with mask %d are live",
			b.Current, b.TPCMask, mask, b.maskPath, mask))
	}
	b.TPCMask, b.TPCMaskSource = mask, TPCMaskSysfs
	for i := range b.Presets {
		b.Presets[i].NeedsReboot = b.Presets[i].TPCPGMask != mask
	}
}

// ReadTPCMask reads a TPC power-gating mask node under root (decimal, as nvgpu prints
// it; an error wrapping fs.ErrNotExist when the board has none).
func ReadTPCMask(root, path string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return 0, fmt.Errorf("GPU TPC mask: %w", err)
	}
	v := strings.TrimSpace(string(raw))
	mask, err := strconv.ParseInt(v, 0, 32)
	if err != nil || mask < 0 {
		return 0, fmt.Errorf("GPU TPC mask %s: %q is not a mask", path, v)
	}
	return int(mask), nil
}

// Now is the nvpmodel mode the board runs now: the status file read again (nvpmodel -m
// since start shows), else the mode found at start; ok false when not known.
func (b *BoardPresets) Now() (id int, name string, ok bool) {
	cur, known := b.Current, b.CurrentKnown
	if b.root != "" {
		if v, err := ReadStatus(b.root); err == nil {
			cur, known = v, true
		}
	}
	if !known {
		return 0, "", false
	}
	for _, p := range b.Presets {
		if p.ID == cur {
			return cur, p.Name, true
		}
	}
	return cur, "", true
}

func fromConf(conf *Conf, spec *powermode.BoardSpec, current int, statusErr error) (*BoardPresets, error) {
	bp := &BoardPresets{Source: SourceLiveConf, Current: current, CurrentKnown: statusErr == nil}
	if statusErr != nil {
		bp.Current = conf.Default
		bp.Notes = append(bp.Notes, fmt.Sprintf("%v: assuming the conf's default mode %d", statusErr, conf.Default))
	} else if _, ok := conf.Model(current); !ok {
		bp.Current, bp.CurrentKnown = conf.Default, false
		bp.Notes = append(bp.Notes, fmt.Sprintf("nvpmodel status names mode %d, which the conf does not have (ids %v): assuming the default mode %d", current, conf.ids(), conf.Default))
	}
	ps, err := conf.PresetsFrom(spec, bp.Current)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		ps[i].Source = SourceLiveConf
	}
	bp.Presets = ps
	return bp, nil
}

// Catalog returns the catalog entry's presets, NeedsReboot relative to the mode with id
// current (the catalog default when known is false or the id is not a preset).
func Catalog(spec *powermode.BoardSpec, current int, known bool) (*BoardPresets, error) {
	space, err := spec.Space()
	if err != nil {
		return nil, fmt.Errorf("nvpmodel presets of %s: %w", spec.Name, err)
	}
	bp := &BoardPresets{Source: SourceCatalog, Current: current, CurrentKnown: known}
	ref, ok := catalogPreset(spec, current)
	if !known || !ok {
		if known {
			bp.Notes = append(bp.Notes, fmt.Sprintf("nvpmodel status names mode %d, which board %s's catalog entry does not have: assuming its default mode %d", current, spec.Name, spec.NVP.Default))
		}
		bp.Current, bp.CurrentKnown = spec.NVP.Default, false
		ref, _ = catalogPreset(spec, spec.NVP.Default)
	}
	for _, p := range spec.NVP.Presets {
		caps := powermode.Mode{Cores: p.Cores, CPUKHz: max(p.CPUMaxKHz, 0), GPUHz: max(p.GPUMaxHz, 0), EMCHz: max(p.EMCMaxHz, 0)}
		if caps.Cores <= 0 || caps.Cores > spec.CPU.Cores {
			caps.Cores = spec.CPU.Cores
		}
		bp.Presets = append(bp.Presets, Preset{
			ID: p.ID, Name: p.Name, Caps: caps, Mode: space.Snap(spec.PresetMode(p)),
			TPCPGMask: p.TPCPGMask, NeedsReboot: p.TPCPGMask != ref.TPCPGMask,
			Default: p.ID == spec.NVP.Default, Source: SourceCatalog,
		})
	}
	return bp, nil
}

func catalogPreset(spec *powermode.BoardSpec, id int) (powermode.PresetSpec, bool) {
	for _, p := range spec.NVP.Presets {
		if p.ID == id {
			return p, true
		}
	}
	return powermode.PresetSpec{}, false
}

// Running is the preset the board runs, if it is one of Presets.
func (b *BoardPresets) Running() (Preset, bool) {
	for _, p := range b.Presets {
		if p.ID == b.Current {
			return p, true
		}
	}
	return Preset{}, false
}

// RunningName is the name of the running mode (e.g. MODE_30W), "" when not known.
func (b *BoardPresets) RunningName() string {
	p, ok := b.Running()
	if !ok || !b.CurrentKnown {
		return ""
	}
	return p.Name
}

// Live are the presets Fulcrum may use as modes: those with the running TPC mask.
// A preset that needs a reboot is left out, not approximated by its caps under the
// running mask: its name promises a power level that those caps would not give.
func (b *BoardPresets) Live() []Preset {
	var out []Preset
	for _, p := range b.Presets {
		if !p.NeedsReboot {
			out = append(out, p)
		}
	}
	return out
}

// LiveModes are Live's modes (in the board's space) and names, repeats dropped: GMD's
// start points and the profiler's "presets".
func (b *BoardPresets) LiveModes() ([]powermode.Mode, []string) {
	var modes []powermode.Mode
	var names []string
	seen := map[powermode.Mode]bool{}
	for _, p := range b.Live() {
		if seen[p.Mode] {
			continue
		}
		seen[p.Mode] = true
		modes = append(modes, p.Mode)
		names = append(names, p.Name)
	}
	return modes, names
}
