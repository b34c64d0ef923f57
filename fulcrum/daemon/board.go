package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/nvml"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// Board is the board fulcrumd drives, or none (Backend nil) when it only schedules.
// Its Apply snapshots the board (into the state directory) before the first change, and
// Close restores that snapshot, so the board is put back on a clean stop; after a crash
// the next OpenBoard restores it.
type Board struct {
	Backend powermode.Backend
	// Spec is the catalog entry (nil with no board or NVML).
	Spec *powermode.BoardSpec
	// NVP are the board's nvpmodel presets (nil with no Spec): from its live
	// /etc/nvpmodel.conf, else the catalog's; the live ones are GMD's start points.
	NVP      *nvpmodel.BoardPresets
	log      *slog.Logger
	stateDir string
	// lock is the board lock (powermode.LockBoard), held from before the snapshot is
	// read until Close: one fulcrumd per board, whatever its runtime and state dirs.
	lock *powermode.BoardLock

	mu   sync.Mutex
	snap *powermode.Snapshot // taken before the first Apply; nil until then
}

// OpenBoard opens the board named by spec: "none", "auto" (detect the Jetson under
// root) or "sim:NAME" (the catalog board NAME whose simulated tree is at root). A board
// snapshot left in stateDir by a crash after a mode change is restored first.
func OpenBoard(ctx context.Context, spec, root, stateDir string, log *slog.Logger) (*Board, error) {
	return OpenBoardWith(ctx, spec, root, stateDir, log, tegra.Options{})
}

// OpenBoardWith is OpenBoard with the Jetson backend's options (the daemon on virtual
// time passes its clock's Now).
func OpenBoardWith(ctx context.Context, spec, root, stateDir string, log *slog.Logger, topt tegra.Options) (*Board, error) {
	if spec == "" || spec == "none" {
		log.Info("no board configured: scheduling only, power modes are not changed")
		return &Board{log: log}, nil
	}
	cat, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return nil, fmt.Errorf("load the board catalog: %w", err)
	}
	var bs *powermode.BoardSpec
	var info powermode.BoardInfo
	switch {
	case spec == "auto":
		bs, info, err = powermode.Detect(root, cat)
		if err != nil {
			return nil, fmt.Errorf("board auto: %w (or set board: none to schedule without changing power modes)", err)
		}
	case strings.HasPrefix(spec, "sim:"):
		name := strings.TrimPrefix(spec, "sim:")
		bs, err = cat.Board(name)
		if err != nil {
			return nil, fmt.Errorf("board %s: %w", spec, err) // err lists the known boards
		}
		info = powermode.BoardInfo{Name: bs.Name, Model: bs.Model, SoC: bs.SoC}
		if root == "" || root == "/" {
			return nil, fmt.Errorf("board %s needs board_root set to the simulator's tree (fulcrumctl sim board --dir DIR), not %q", spec, root)
		}
	default:
		return nil, fmt.Errorf(`board %q: want "auto", "sim:NAME", "nvml" or "none"`, spec)
	}
	nvp, err := nvpmodel.ForBoard(root, bs)
	if err != nil {
		return nil, fmt.Errorf("board %s: %w", bs.Name, err)
	}
	for _, n := range nvp.Notes {
		log.Warn("nvpmodel", "note", n)
	}
	be, err := tegra.OpenWith(ctx, root, bs, info, topt)
	if err != nil {
		return nil, fmt.Errorf("open board %s under %s: %w", bs.Name, root, err)
	}
	b, err := adopt(ctx, be, bs, stateDir, log)
	if err != nil {
		return nil, err
	}
	b.NVP = nvp
	var reboot []string
	for _, p := range nvp.Presets {
		if p.NeedsReboot {
			reboot = append(reboot, p.Name)
		}
	}
	log.Info("nvpmodel presets", "source", nvp.Source, "running", nvp.RunningName(), "needs_reboot", strings.Join(reboot, ","))
	return b, nil
}

// OpenNVMLBoard opens a discrete NVIDIA GPU through NVML (board: nvml). The backend
// only reads unless o.ClockControl is set; it has no catalog entry, so no nvpmodel
// presets (GMD then starts in the middle of every knob).
func OpenNVMLBoard(ctx context.Context, o nvml.Options, stateDir string, log *slog.Logger) (*Board, error) {
	if o.Logger == nil {
		o.Logger = log
	}
	be, err := nvml.Open(o)
	if err != nil {
		return nil, fmt.Errorf("board nvml: %w (or set board: none to schedule without a board)", err)
	}
	b, err := adopt(ctx, be, nil, stateDir, log)
	if err != nil {
		be.Close()
		return nil, err
	}
	return b, nil
}

// adopt wraps an open backend: it restores a snapshot left in stateDir by a run that
// crashed after a mode change, then logs the board's present mode.
//
// It first takes the board lock: a second fulcrumd on the same board (with its own
// runtime and state directories or not) fails here, before it reads or removes a
// snapshot or writes a file of the board. Discovery before it (tegra.Open, nvml.Open)
// only reads.
func adopt(ctx context.Context, be powermode.Backend, bs *powermode.BoardSpec, stateDir string, log *slog.Logger) (_ *Board, err error) {
	info := be.Info()
	b := &Board{Backend: be, Spec: bs, log: log, stateDir: stateDir}
	if lp, ok := be.(interface{ LockPath() string }); ok {
		if b.lock, err = powermode.LockBoard(lp.LockPath()); err != nil {
			return nil, fmt.Errorf("board %s: %w", info.Name, err)
		}
		defer func() {
			if err != nil {
				b.lock.Close()
			}
		}()
		log.Info("board lock taken", "node", b.lock.Path())
	}
	if stateDir != "" {
		if snap, err := powermode.LoadSnapshot(stateDir); err == nil {
			log.Warn("restoring the board state saved before an earlier run's mode change (that run did not exit cleanly)", "taken_at", snap.TakenAt)
			if err := be.Restore(ctx, snap); err != nil {
				return nil, fmt.Errorf("restore the saved board state from %s: %w (fix the board by hand, e.g. sudo jetson_clocks --restore, then remove the snapshot)", stateDir, err)
			}
			if err := powermode.RemoveSnapshot(stateDir); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("read the saved board state: %w", err)
		}
	}
	cur, err := be.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the current power mode of %s: %w", info.Name, err)
	}
	log.Info("board open", "board", info.Name, "model", info.Model, "l4t", info.L4T, "mode", cur.String(), "modes", be.Space().Size())
	return b, nil
}

// Info, Space, Current and Power pass through to the backend (the controller's Board).
func (b *Board) Info() powermode.BoardInfo { return b.Backend.Info() }

// Space is the board's set of modes.
func (b *Board) Space() *powermode.Space { return b.Backend.Space() }

// Current reads the mode the board is set to.
func (b *Board) Current(ctx context.Context) (powermode.Mode, error) { return b.Backend.Current(ctx) }

// Power reads board power.
func (b *Board) Power(ctx context.Context) (powermode.PowerReading, error) {
	return b.Backend.Power(ctx)
}

// Heat reads the board's heat where the backend can (tegra), else powermode.ErrNoHeat.
func (b *Board) Heat(ctx context.Context) (powermode.HeatReading, error) {
	if hs, ok := b.Backend.(powermode.HeatSensor); ok {
		return hs.Heat(ctx)
	}
	return powermode.HeatReading{}, powermode.ErrNoHeat
}

// Apply sets mode m. Before the first change it snapshots the board and saves the
// snapshot in the state directory (the first snapshot there wins: one left by a crashed
// run that OpenBoard could not restore is never replaced).
func (b *Board) Apply(ctx context.Context, m powermode.Mode) error {
	if b.Backend == nil {
		return errors.New("no board configured (board: none): power modes are not changed")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.snap == nil {
		snap, err := b.Backend.Snapshot(ctx)
		if err != nil {
			return fmt.Errorf("snapshot the board before the first mode change: %w (nothing was changed)", err)
		}
		if b.stateDir != "" {
			if err := powermode.SaveSnapshot(b.stateDir, snap); err != nil {
				return fmt.Errorf("%w (nothing was changed)", err)
			}
		}
		b.snap = snap
		b.log.Info("board state saved before the first mode change", "state_dir", b.stateDir)
	}
	return b.Backend.Apply(ctx, m)
}

// Presets are the board's nvpmodel presets that need no reboot from the running mode
// (nvpmodel.BoardPresets.LiveModes), as modes of its space, and their names: GMD starts
// from the one nearest the power budget. A preset with another TPC mask is never
// offered, so no search starts from, or profiles, a mode the board cannot reach live.
func (b *Board) Presets() ([]powermode.Mode, []string) {
	if b.Backend == nil || b.NVP == nil {
		return nil, nil
	}
	sp := b.Backend.Space()
	var modes []powermode.Mode
	var names []string
	ms, ns := b.NVP.LiveModes()
	for i, m := range ms {
		if sp != nil {
			m = sp.Snap(m)
		}
		modes = append(modes, m)
		names = append(names, ns[i])
	}
	return modes, names
}

// Nvpmodel is the name of the nvpmodel mode the board runs, or "" when not known
// (the API's ModeInfo.Nvpmodel).
func (b *Board) Nvpmodel() string {
	if b.NVP == nil {
		return ""
	}
	return b.NVP.RunningName()
}

// Close restores the state saved before the first mode change (if fulcrumd changed
// any), removes the saved snapshot and releases the backend. A failed restore leaves the
// snapshot for the next start to retry.
func (b *Board) Close(ctx context.Context) {
	if b.Backend == nil {
		return
	}
	b.restoreSaved(ctx)
	b.release()
	if err := b.lock.Close(); err != nil {
		b.log.Error("release the board lock", "err", err)
	}
}

func (b *Board) restoreSaved(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.snap == nil {
		return
	}
	if err := b.Backend.Restore(ctx, b.snap); err != nil {
		b.log.Error("restore the board state saved at start failed; the next fulcrumd start retries it", "err", err)
		return
	}
	b.snap = nil
	if b.stateDir != "" {
		if err := powermode.RemoveSnapshot(b.stateDir); err != nil {
			b.log.Error("remove the board snapshot", "err", err)
			return
		}
	}
	b.log.Info("board state restored")
}

// release lets go of a backend that holds a library or handle (NVML).
func (b *Board) release() {
	if c, ok := b.Backend.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			b.log.Error("close the board backend", "err", err)
		}
	}
}
