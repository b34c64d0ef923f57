package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Board is the board fulcrumd drives, or none (Backend nil) when it only schedules.
type Board struct {
	Backend powermode.Backend
	log     *slog.Logger
}

// OpenBoard opens the board named by spec: "none", "auto" or "sim:NAME" (root is the
// filesystem root of the real or simulated tree).
func OpenBoard(ctx context.Context, spec, root string, log *slog.Logger) (*Board, error) {
	switch {
	case spec == "" || spec == "none":
		log.Info("no board configured: scheduling only, power modes are not changed")
		return &Board{log: log}, nil
	case spec == "auto" || strings.HasPrefix(spec, "sim:"):
		return nil, fmt.Errorf("board %q: this build has no board backend wired yet; set board: none (scheduling only)", spec)
	default:
		return nil, fmt.Errorf(`board %q: want "auto", "sim:NAME" or "none"`, spec)
	}
}

// Close gives the board back as fulcrumd found it.
func (b *Board) Close(ctx context.Context) {}
