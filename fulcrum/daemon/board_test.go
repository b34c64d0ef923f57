package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

func TestOpenBoard(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	spec := testboard.Spec(t, testboard.AGXOrin)
	dir := filepath.Join(t.TempDir(), "board")
	testboard.Sim(t, dir, spec, sim.Options{Logger: log})
	for _, name := range []string{"sim:agx-orin-64gb", "auto"} {
		b, err := OpenBoard(ctx, name, dir, t.TempDir(), log)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b.Backend == nil || b.Backend.Info().Name != "agx-orin-64gb" {
			t.Fatalf("%s: backend %+v", name, b.Backend)
		}
		b.Close(ctx) // releases the board lock for the next open
	}
	b, err := OpenBoard(ctx, "none", "/", "", log)
	if err != nil || b.Backend != nil {
		t.Fatalf("none: %v %+v", err, b)
	}
	for spec, want := range map[string]string{
		"auto":              "simulat", // a non-Jetson tree: the error names the simulator
		"sim:no-such":       "known boards are",
		"sim:agx-orin-64gb": "board_root",
		"jetson":            `want "auto"`,
	} {
		root := t.TempDir()
		if spec == "sim:agx-orin-64gb" {
			root = "/"
		}
		_, err := OpenBoard(ctx, spec, root, "", log)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("board %s: error %v, want one containing %q", spec, err, want)
		}
	}
}
