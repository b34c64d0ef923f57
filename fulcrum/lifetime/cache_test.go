package lifetime

import (
	"context"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// TestStepCacheReadsWhatTheTreeHolds: the Jetson backend reading through the cache
// answers what it answers reading the files, after every physics step and mode change
// (power, every thermal zone, heat, the mode).
func TestStepCacheReadsWhatTheTreeHolds(t *testing.T) {
	ctx := context.Background()
	spec := testboard.Spec(t, testboard.AGXOrin)
	models := testboard.Workloads(t)
	root := filepath.Join(t.TempDir(), "board")
	var acts []sim.Activity
	b, err := sim.New(root, spec, sim.Options{Workloads: models, Logger: slog.New(slog.DiscardHandler), Activities: func() []sim.Activity { return acts }})
	if err != nil {
		t.Fatal(err)
	}
	cache := newStepCache(root)
	b.Tree().SetInPlace(cache.written)
	info := powermode.BoardInfo{Name: spec.Name, Model: spec.Model, SoC: spec.SoC}
	fixed := func() time.Time { return time.Unix(0, 0) }
	plain, err := tegra.OpenWith(ctx, root, spec, info, tegra.Options{Now: fixed})
	if err != nil {
		t.Fatal(err)
	}
	cached, err := tegra.OpenWith(ctx, root, spec, info, tegra.Options{FS: cache, Now: fixed})
	if err != nil {
		t.Fatal(err)
	}
	sp := testboard.Space(t, spec)
	modes := []powermode.Mode{defaultMode(spec), sp.Snap(powermode.Mode{Cores: 4, CPUKHz: 1, GPUHz: 1, EMCHz: 1})}
	now := time.Now()
	for i := range 12 {
		if i%4 == 0 {
			if err := cached.Apply(ctx, modes[(i/4)%2]); err != nil {
				t.Fatal(err)
			}
		}
		acts = nil
		if i%3 != 0 {
			acts = []sim.Activity{{Workload: "resnet18-train", Role: "train", Batch: 32, PID: 1, Share: float64(i%3) / 3}}
		}
		now = now.Add(500 * time.Millisecond)
		if _, err := b.Step(now); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second read comes from the cache
			pp, err1 := plain.Power(ctx)
			pc, err2 := cached.Power(ctx)
			if err1 != nil || err2 != nil || pp.TotalMW != pc.TotalMW || !reflect.DeepEqual(pp.Rails, pc.Rails) {
				t.Fatalf("step %d: power through the cache %+v (%v), from the files %+v (%v)", i, pc, err2, pp, err1)
			}
			hp, err1 := plain.Heat(ctx)
			hc, err2 := cached.Heat(ctx)
			if err1 != nil || err2 != nil || !reflect.DeepEqual(hp, hc) {
				t.Fatalf("step %d: heat through the cache %+v (%v), from the files %+v (%v)", i, hc, err2, hp, err1)
			}
			mp, _ := plain.Current(ctx)
			mc, _ := cached.Current(ctx)
			if mp != mc {
				t.Fatalf("step %d: mode through the cache %s, from the files %s", i, mc, mp)
			}
		}
	}
}
