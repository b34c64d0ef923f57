package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode/nvml"
)

// board: nvml on a host without the NVML library fails with a message that says what
// is missing and what to do, and leaves nothing held (the worker socket can be taken
// again at once).
func TestNVMLBoardWithoutLibrary(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	missing := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	_, err := OpenNVMLBoard(ctx, nvml.Options{LibraryPath: missing}, t.TempDir(), log)
	if err == nil {
		t.Fatal("OpenNVMLBoard without a library: want an error")
	}
	if !strings.Contains(err.Error(), "board nvml") || !strings.Contains(err.Error(), "board: none") {
		t.Fatalf("error %q: want it to name board nvml and the board: none alternative", err)
	}

	dir := t.TempDir()
	o := Options{
		Server:   Config{RuntimeDir: filepath.Join(dir, "run")},
		StateDir: filepath.Join(dir, "state"),
		Board:    "nvml",
		NVML:     nvml.Options{LibraryPath: missing},
		NoAPI:    true,
		Control:  control.DefaultConfig(),
		Targets:  plan.Targets{LatencyMS: 100},
		Log:      log,
	}
	if _, err := Open(ctx, o); err == nil || !strings.Contains(err.Error(), "board nvml") {
		t.Fatalf("daemon.Open with board nvml and no library: %v", err)
	}
	o.Board = "none"
	d, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("the failed start left something held: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.Run(cctx); err != nil {
		t.Fatal(err)
	}
}
