package nvpmodel

import (
	"errors"
	"fmt"
	"io/fs"

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
	// Notes say what was not used and why (a conf that failed to parse, a missing
	// status): worth a warning, never fatal.
	Notes []string
}

// ForBoard returns the presets of the board spec whose tree is at root: from root's
// /etc/nvpmodel.conf relative to the mode in /var/lib/nvpmodel/status, or, when there
// is no conf or it does not fit the board, from the catalog entry. Each preset's
// NeedsReboot says whether its TPC mask differs from the running mode's.
func ForBoard(root string, spec *powermode.BoardSpec) (*BoardPresets, error) {
	var notes []string
	current, statusErr := ReadStatus(root)
	conf, err := Load(root)
	if err == nil {
		bp, perr := fromConf(conf, spec, current, statusErr)
		if perr == nil {
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
	if statusErr != nil {
		notes = append(notes, fmt.Sprintf("%v: assuming the catalog's default mode %d", statusErr, spec.NVP.Default))
	}
	bp.Notes = append(notes, bp.Notes...)
	return bp, nil
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
