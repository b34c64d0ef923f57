package sim_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

// simBoard builds a tree (the physics loop is not needed to run minibatches).
func simBoard(t *testing.T) (*sim.Board, *powermode.BoardSpec) {
	t.Helper()
	sp := testboard.Spec(t, testboard.AGXOrin)
	return testboard.Sim(t, filepath.Join(t.TempDir(), "b"), sp, sim.Options{}), sp
}

func setGPU(t *testing.T, b *sim.Board, hz int64) {
	t.Helper()
	df := b.Tree().GPUDevfreq()
	v := []byte(strconv.FormatInt(hz, 10) + "\n")
	// Order as a backend would: never min > max in between.
	first, second := "/max_freq", "/min_freq"
	if cur, _ := b.Tree().ReadFile(df + "/max_freq"); cur > string(v) {
		first, second = second, first
	}
	for _, f := range []string{first, second} {
		if err := os.WriteFile(b.Tree().Path(df+f), v, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunMinibatchFollowsGPUClock runs in a synctest bubble: the runner's timers and
// time.Now are the bubble's virtual clock, so the slow/fast ratio is the model's, not the
// host's load (on a busy host the wall-clock version measured what the scheduler of
// the host allowed).
func TestRunMinibatchFollowsGPUClock(t *testing.T) {
	b, sp := simBoard(t)
	w := testboard.Workloads(t)["resnet50-infer"]
	synctest.Test(t, func(t *testing.T) { followsGPUClock(t, b, sp, w) })
}

func followsGPUClock(t *testing.T, b *sim.Board, sp *powermode.BoardSpec, w *sim.Workload) {
	const batch = 32 // ~80 ms at the top GPU clock, ~280 ms at the bottom
	low, high := sp.GPU.FreqsHz[0], sp.GPU.FreqsHz[len(sp.GPU.FreqsHz)-1]
	run := func() time.Duration {
		d, err := sim.RunMinibatch(context.Background(), b.Root(), sp, w, batch, newRand(7))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	setGPU(t, b, low)
	dLow := run()
	setGPU(t, b, high)
	dHigh := run()
	maxn := sp.PresetMode(sp.NVP.Presets[0])
	lowMode := maxn
	lowMode.GPUHz = low
	want := w.TimeMS(sp, lowMode, batch) / w.TimeMS(sp, maxn, batch)
	got := dLow.Seconds() / dHigh.Seconds()
	t.Logf("low GPU %v, high GPU %v: ratio %.2f, model %.2f", dLow, dHigh, got, want)
	if got < 1+(want-1)/2 || got > want*1.5 {
		t.Errorf("slow/fast ratio %.2f, model says %.2f", got, want)
	}

	// A clock raised mid-run shortens the rest of the run.
	setGPU(t, b, low)
	// The run's error comes back on the channel: t.Fatal from this goroutine would end
	// it without sending, and the test would wait forever (seen once under load: a
	// 10-minute timeout).
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := sim.RunMinibatch(context.Background(), b.Root(), sp, w, batch, newRand(7))
		done <- result{d, err}
	}()
	time.Sleep(dLow / 3)
	setGPU(t, b, high)
	r := <-done
	if r.err != nil {
		t.Fatalf("run with the clock raised mid-way: %v", r.err)
	}
	dMixed := r.d
	t.Logf("raised after a third: %v", dMixed)
	if dMixed >= dLow || dMixed <= dHigh {
		t.Errorf("mid-run change: %v, want between %v and %v", dMixed, dHigh, dLow)
	}
}

// TestConcurrentMinibatchesShareTheGPU runs in a synctest bubble: the runner's timers
// and time.Now are the bubble's virtual clock, so the ratio is the model's, not the
// host's load (on a busy 2-core host the wall-clock version measured 1.54x).
func TestConcurrentMinibatchesShareTheGPU(t *testing.T) {
	b, sp := simBoard(t)
	w := testboard.Workloads(t)["resnet50-infer"]
	const batch = 16
	synctest.Test(t, func(t *testing.T) {
		alone, err := sim.RunMinibatch(context.Background(), b.Root(), sp, w, batch, newRand(3))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		shared := make([]time.Duration, 2)
		errs := make([]error, 2)
		for i := range shared {
			wg.Go(func() {
				shared[i], errs[i] = sim.RunMinibatch(context.Background(), b.Root(), sp, w, batch, newRand(3))
			})
		}
		wg.Wait()
		for i, d := range shared {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			r := d.Seconds() / alone.Seconds()
			t.Logf("alone %v, shared %v: %.2fx", alone, d, r)
			if r < 1.6 || r > 2.8 {
				t.Errorf("minibatch sharing the GPU took %.2fx as long as alone, want ≈2x (+switch cost)", r)
			}
		}
	})
	// Both unregistered.
	entries, _ := os.ReadDir(filepath.Join(b.Root(), sim.ActivityDir))
	if len(entries) != 0 {
		t.Errorf("%d activity files left", len(entries))
	}
}

func TestRunMinibatchRegistersActivity(t *testing.T) {
	b, sp := simBoard(t)
	w := testboard.Workloads(t)["yolov8n-train"]
	setGPU(t, b, sp.GPU.FreqsHz[0]) // ~1.4 s: long enough to be seen by a slow poll
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sim.RunMinibatch(ctx, b.Root(), sp, w, w.Batch, newRand(1))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := b.Step(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Active) == 1 {
			a := res.Active[0]
			if a.Workload != w.Name || a.Role != "train" || a.Batch != w.Batch || a.PID != os.Getpid() {
				t.Errorf("activity %+v", a)
			}
			if want := w.PowerMW(sp, res.Mode, w.Batch); math.Abs(res.TotalMW-want) > 1e-6*want {
				t.Errorf("board power while training at %s: %.0f mW, model %.0f", res.Mode, res.TotalMW, want)
			}
			if res.Mode.GPUHz != sp.GPU.FreqsHz[0] {
				t.Errorf("mode %s, want the GPU at its lowest clock", res.Mode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("minibatch never showed in the activity set")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("cancelled run returned %v", err)
	}
	res, err := b.Step(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Active) != 0 {
		t.Errorf("cancelled minibatch still registered")
	}
}

func TestRunMinibatchNeedsATree(t *testing.T) {
	if _, err := sim.RunMinibatch(context.Background(), t.TempDir(), testboard.Spec(t, testboard.AGXOrin), testboard.Workloads(t)["lstm-train"], 20, newRand(1)); err == nil {
		t.Error("empty root: want an error naming fulcrumctl sim board")
	}
}

// A clock file caught empty mid-rewrite (the simulated sysfs is plain files) does not
// fail a running minibatch: the runner keeps the clocks it read last and reads again.
func TestRunMinibatchSurvivesAFileCaughtMidWrite(t *testing.T) {
	b, sp := simBoard(t)
	w := testboard.Workloads(t)["resnet50-infer"]
	setGPU(t, b, sp.GPU.FreqsHz[0])
	path := b.Tree().Path(b.Tree().GPUDevfreq() + "/max_freq")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := sim.RunMinibatch(context.Background(), b.Root(), sp, w, 32, newRand(7))
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(80 * time.Millisecond) // several refreshes (20 ms) see it empty
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Errorf("a minibatch failed on a clock file caught empty: %v", err)
	}
}
