package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// Board is the board fulcrumd drives, or none (Backend nil) when it only schedules.
type Board struct {
	Backend powermode.Backend
	log     *slog.Logger
}

// OpenBoard opens the board named by spec: "none", "auto" (detect the Jetson under
// root) or "sim:NAME" (the catalog board NAME whose simulated tree is at root). A board
// snapshot left in stateDir by a crash after a mode change is restored first.
func OpenBoard(ctx context.Context, spec, root, stateDir string, log *slog.Logger) (*Board, error) {
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
			return nil, fmt.Errorf("board %s: %w (known: %s)", spec, err, strings.Join(cat.Names(), ", "))
		}
		info = powermode.BoardInfo{Name: bs.Name, Model: bs.Model, SoC: bs.SoC}
		if root == "" || root == "/" {
			return nil, fmt.Errorf("board %s needs board_root set to the simulator's tree (fulcrumctl sim board --dir DIR), not %q", spec, root)
		}
	default:
		return nil, fmt.Errorf(`board %q: want "auto", "sim:NAME" or "none"`, spec)
	}
	be, err := tegra.Open(ctx, root, bs, info)
	if err != nil {
		return nil, fmt.Errorf("open board %s under %s: %w", bs.Name, root, err)
	}
	b := &Board{Backend: be, log: log}
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
		return nil, fmt.Errorf("read the current power mode of %s: %w", bs.Name, err)
	}
	log.Info("board open", "board", bs.Name, "model", info.Model, "l4t", info.L4T, "mode", cur.String(), "modes", be.Space().Size())
	return b, nil
}

// Close gives the board back. fulcrumd changes no power mode in this version, so there
// is nothing to restore yet; the controller will restore its snapshot here.
func (b *Board) Close(context.Context) {}
