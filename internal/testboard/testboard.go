// Package testboard is the test setup for "a catalog board and its workloads": the
// shipped catalog (configs/boards), one board's spec and mode space, the workload
// models (configs/workloads) and a simulated board built from them. Each helper fails
// the test on error, so a test reads as what it checks rather than four if-err blocks.
//
// It imports powermode, faketree, sim and truth (through sim), so the internal tests of
// those packages (package powermode, package sim, …) cannot use it without an import
// cycle; their external _test packages can.
package testboard

import (
	"context"
	"log/slog"
	"testing"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// AGXOrin is the catalog board most tests run on (the demo's and the bench's
// board), named once here so a test says which board it means without a literal.
const AGXOrin = "agx-orin-64gb"

// Catalog loads the shipped board catalog.
func Catalog(t testing.TB) *powermode.Catalog {
	t.Helper()
	c, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		t.Fatalf("testboard: load catalog: %v", err)
	}
	return c
}

// Spec returns the catalog's spec of board name (AGXOrin for most tests).
func Spec(t testing.TB, name string) *powermode.BoardSpec {
	t.Helper()
	b, err := Catalog(t).Board(name)
	if err != nil {
		t.Fatalf("testboard: %v", err)
	}
	return b
}

// Space is spec's mode space.
func Space(t testing.TB, spec *powermode.BoardSpec) *powermode.Space {
	t.Helper()
	s, err := spec.Space()
	if err != nil {
		t.Fatalf("testboard: %s space: %v", spec.Name, err)
	}
	return s
}

// Workloads loads the shipped workload models, by name. Each call loads a fresh map,
// so a test may change its copy.
func Workloads(t testing.TB) map[string]*sim.Workload {
	t.Helper()
	ws, err := sim.LoadWorkloads(configs.FS, "workloads")
	if err != nil {
		t.Fatalf("testboard: load workloads: %v", err)
	}
	return ws
}

// Sim builds spec's simulated tree under root, without starting its physics loop (a
// test that owns the sensor files wants it stopped; Start runs it). The caller picks
// root because daemons and subprocesses under test find the board at a known path. A
// nil opts.Logger discards the simulator's notes, which would only clutter test output.
func Sim(t testing.TB, root string, spec *powermode.BoardSpec, opts sim.Options) *sim.Board {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := sim.New(root, spec, opts)
	if err != nil {
		t.Fatalf("testboard: %v", err)
	}
	return b
}

// Start runs b's physics loop until the test ends; the cleanup waits for the loop to
// return, so nothing writes into the tree while t.TempDir removes it.
func Start(t testing.TB, b *sim.Board) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
