package tegra

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
)

// Every catalog board in every layout it ships with, as powermode/faketree builds it,
// starting after boot and in a MODE_15W-like state (only the first cluster online):
// discovery finds the catalog's tables, Current reads the boot mode, a walk through the
// space keeps the kernel's rules and the documented order, a refused write anywhere
// rolls back exactly, and Restore gives back the original bytes.
func TestEveryCatalogBoardViaFaketree(t *testing.T) {
	cat := testboard.Catalog(t)
	for _, name := range cat.Names() {
		spec, _ := cat.Board(name)
		for _, l4t := range spec.L4T {
			for _, start := range []string{"boot", "first-cluster"} {
				if start == "first-cluster" && l4t != spec.L4T[len(spec.L4T)-1] {
					continue // one layout per board is enough for the offline-cluster start
				}
				t.Run(name+"/"+l4t+"/"+start, func(t *testing.T) {
					opts := faketree.Options{L4T: l4t}
					if start == "first-cluster" {
						st := faketree.BootState(spec)
						st.OnlineCores = len(spec.CPU.Clusters[0].CPUs)
						opts.State = &st
					}
					ft, err := faketree.Build(t.TempDir(), spec, opts)
					if err != nil {
						t.Fatal(err)
					}
					root := ft.Root()
					kfs := newKernelFS(root)
					be, err := OpenWith(context.Background(), root, spec, powermode.BoardInfo{Name: spec.Name}, Options{FS: kfs, Logger: slog.New(slog.DiscardHandler)})
					if err != nil {
						t.Fatal(err)
					}
					lv := be.Space().Levels()
					if !slices.Equal(lv.CPUKHz, spec.CPU.FreqsKHz) || !slices.Equal(lv.GPUHz, spec.GPU.FreqsHz) || !slices.Equal(lv.EMCHz, spec.EMC.RatesHz) || be.Cores() != spec.CPU.Cores {
						t.Fatalf("levels %+v, cores %d: want the catalog's", lv, be.Cores())
					}
					cur, err := be.Current(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					st := faketree.BootState(spec)
					if opts.State != nil {
						st = *opts.State
					}
					if want := (powermode.Mode{Cores: st.OnlineCores, CPUKHz: st.CPUMaxKHz, GPUHz: st.GPUMaxHz, EMCHz: slices.Max(spec.EMC.RatesHz)}); cur != want {
						t.Errorf("Current = %v, want %v", cur, want)
					}
					checkCatalogPower(t, be, spec)
					original := digest(t, root)
					snap, err := be.Snapshot(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					modes := walkModes(spec.CPU.Cores, len(spec.CPU.Clusters[0].CPUs), spec.CPU.FreqsKHz, spec.GPU.FreqsHz, spec.EMC.RatesHz)
					for _, m := range modes {
						n0 := len(kfs.Writes())
						if err := be.Apply(context.Background(), m); err != nil {
							t.Fatalf("Apply %v: %v", m, err)
						}
						checkWriteOrder(t, m, kfs.Writes()[n0:])
						if got, _ := be.Current(context.Background()); got != m {
							t.Errorf("Current after Apply = %v, want %v", got, m)
						}
					}
					// Refuse the first, a middle and the last write of one more Apply: each
					// time the tree must come back to exactly what it was
					// (TestApplyRollsBackRefusedWrite refuses every write, on every layout).
					before := digest(t, root)
					target := modes[2]
					n0 := len(kfs.Writes())
					if err := be.Apply(context.Background(), target); err != nil {
						t.Fatal(err)
					}
					nw := len(kfs.Writes()) - n0
					if err := be.Apply(context.Background(), modes[len(modes)-1]); err != nil {
						t.Fatal(err)
					}
					for _, k := range []int{1, (nw + 1) / 2, nw} {
						n0 := len(kfs.Writes())
						kfs.refuseAt, kfs.refuseBy = n0+k, syscall.EINVAL
						err := be.Apply(context.Background(), target)
						kfs.refuseAt = 0
						if err == nil || !strings.Contains(err.Error(), "invalid argument") || !strings.Contains(err.Error(), "board left in mode "+modes[len(modes)-1].String()) {
							t.Errorf("refusing write %d of %d: err = %v", k, nw, err)
						}
						sameTree(t, before, root, fmt.Sprintf("refusing write %d of %d", k, nw))
					}
					if err := be.Restore(context.Background(), snap); err != nil {
						t.Fatal(err)
					}
					sameTree(t, original, root, "after Restore")
				})
			}
		}
	}
}

// checkCatalogPower checks that the rails found are the catalog's connected channels
// and that the total follows the catalog's rule.
func checkCatalogPower(t *testing.T, be *Backend, spec *powermode.BoardSpec) {
	t.Helper()
	r, err := be.Power(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, s := range spec.Power.Sensors {
		for _, c := range s.Channels {
			if c.Label != "NC" {
				want = append(want, c.Label)
			}
		}
	}
	var got []string
	var sum, named float64
	for _, rp := range r.Rails {
		got = append(got, rp.Name)
		sum += rp.PowerMW
		if rp.Name == spec.Power.Total {
			named = rp.PowerMW
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rails %v, want the catalog's %v", got, want)
	}
	wantTotal := sum
	if spec.Power.Total != "sum" {
		wantTotal = named
	}
	if r.TotalMW != wantTotal || r.TotalMW <= 0 {
		t.Errorf("total %v mW, want %v (rule %q)", r.TotalMW, wantTotal, spec.Power.Total)
	}
}
