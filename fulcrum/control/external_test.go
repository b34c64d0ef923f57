package control

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// leavingBoard is a real (tegra) backend over a temp sysfs tree that counts the mode
// writes tried and records LeaveAsIs, as daemon.Board implements it.
type leavingBoard struct {
	countingBoard
	mu2    sync.Mutex
	leaves []string
}

func (b *leavingBoard) LeaveAsIs(reason string) {
	b.mu2.Lock()
	defer b.mu2.Unlock()
	b.leaves = append(b.leaves, reason)
}

func (b *leavingBoard) left() int {
	b.mu2.Lock()
	defer b.mu2.Unlock()
	return len(b.leaves)
}

// extEnv is a controller driving a faketree board through the tegra backend, holding the
// operator's mode 8 cores / 1728 MHz / 612 MHz GPU (the MODE_30W-like mode).
type extEnv struct {
	*env
	tree  *faketree.Tree
	board *leavingBoard
	c     *Controller
	held  powermode.Mode
}

func newExtEnv(t *testing.T, policy string) *extEnv {
	e := newEnv(t, sched.NewFakeClock())
	e.modes = nil
	for _, g := range []int64{408e6, 612e6, 816e6} {
		e.modes = append(e.modes, powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: g, EMCHz: 3199000000})
	}
	e.seed()
	ctx := context.Background()
	tree, err := faketree.Build(t.TempDir(), e.spec, faketree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	be, err := tegra.Open(ctx, tree.Root(), e.spec, powermode.BoardInfo{Name: e.spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	board := &leavingBoard{countingBoard: countingBoard{Backend: be}}
	c, err := New(Options{Config: Config{ExternalChange: policy}, Sched: e.sched, Board: board, Store: e.store, Clock: e.clock,
		Targets: plan.Targets{LatencyMS: 400, PowerMW: 30000, RateRPS: 20}})
	if err != nil {
		t.Fatal(err)
	}
	e.register(nil)
	e.tick(c, 100*time.Millisecond)
	if c.Status().Current == nil {
		t.Fatalf("no plan applied: %+v", c.Status())
	}
	held := e.modes[1]
	if _, err := c.ApplyMode(ctx, held); err != nil {
		t.Fatal(err)
	}
	if cur, err := be.Current(ctx); err != nil || cur != held || !c.Held() {
		t.Fatalf("board at %v (%v), held %v: want the operator's %v held", cur, err, c.Held(), held)
	}
	return &extEnv{env: e, tree: tree, board: board, c: c, held: held}
}

// jetsonClocks does to the tree what jetson_clocks does: every core online, each CPU
// policy and the GPU pinned at their maximum (min = max = top), the EMC locked at its
// top rate.
func (x *extEnv) jetsonClocks() {
	x.t.Helper()
	write := func(abs, v string) {
		if err := os.WriteFile(x.tree.Path(abs), []byte(v+"\n"), 0o644); err != nil {
			x.t.Fatal(err)
		}
	}
	spec := x.spec
	for cpu := 1; cpu < spec.CPU.Cores; cpu++ {
		write("/sys/devices/system/cpu/cpu"+strconv.Itoa(cpu)+"/online", "1")
	}
	topCPU := strconv.FormatInt(slices.Max(spec.CPU.FreqsKHz), 10)
	for _, cl := range spec.CPU.Clusters {
		p := "/sys/devices/system/cpu/cpufreq/policy" + strconv.Itoa(cl.Policy)
		write(p+"/scaling_max_freq", topCPU)
		write(p+"/scaling_min_freq", topCPU)
	}
	topGPU := strconv.FormatInt(slices.Max(spec.GPU.FreqsHz), 10)
	write(x.tree.GPUDevfreq()+"/max_freq", topGPU)
	write(x.tree.GPUDevfreq()+"/min_freq", topGPU)
	write("/sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked", "1")
	write("/sys/kernel/debug/bpmp/debug/clk/emc/rate", strconv.FormatInt(slices.Max(spec.EMC.RatesHz), 10))
}

func (x *extEnv) boardMode() powermode.Mode {
	x.t.Helper()
	m, err := x.board.Current(context.Background())
	if err != nil {
		x.t.Fatal(err)
	}
	return m
}

func (x *extEnv) top() powermode.Mode {
	return powermode.Mode{Cores: x.spec.CPU.Cores, CPUKHz: slices.Max(x.spec.CPU.FreqsKHz), GPUHz: slices.Max(x.spec.GPU.FreqsHz), EMCHz: slices.Max(x.spec.EMC.RatesHz)}
}

func lastOf(evs []Event, k Kind) *Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == k {
			return &evs[i]
		}
	}
	return nil
}

// jetson_clocks while the operator's mode is held (the case): within a control
// period an event names what changed and by how much; fulcrumd stands down (status
// DEGRADED naming the other tool's mode and the unenforced power budget, no mode write
// for as long as it lasts, the board's snapshot forgotten so exit leaves jetson_clocks'
// settings); fulcrumctl mode resume writes the held mode again.
func TestJetsonClocksStandsDown(t *testing.T) {
	x := newExtEnv(t, "") // the default policy
	seq := x.c.Status().LastEvent
	x.jetsonClocks()
	x.tick(x.c, x.c.Config().Period)
	ev := lastOf(x.c.Events().List(seq), KindExternal)
	if ev == nil {
		t.Fatalf("no external_change event after jetson_clocks: %v", kinds(x.c.Events().List(seq)))
	}
	for _, want := range []string{"CPU cores online 8 → 12", "CPU 1728 → 2201 MHz", "GPU 612.0 → 1300.5 MHz (+688.5)", "as jetson_clocks sets", "stands down"} {
		if !strings.Contains(ev.Reason, want) {
			t.Errorf("event %q does not say %q", ev.Reason, want)
		}
	}
	st := x.c.Status()
	if !x.c.StoodDown() || !strings.Contains(st.Degraded, "another tool set the board to "+x.top().Human()) || !strings.Contains(st.Degraded, "the 30.0 W power budget is not enforced") {
		t.Fatalf("status degraded %q, stood down %v", st.Degraded, x.c.StoodDown())
	}
	if x.board.left() != 1 {
		t.Fatalf("LeaveAsIs called %d times, want once (exit must leave jetson_clocks' settings)", x.board.left())
	}
	as, err := NewAPI(x.c, time.Time{}).Status(context.Background())
	if err != nil || !as.Degraded || !as.StoodDown || as.Mode != x.top() || string(KindExternal) != api.EventExternal {
		t.Fatalf("API status: degraded %v, mode %v (%v)", as.Degraded, as.Mode, err)
	}
	if g := gauge(t, x.c, "fulcrum_degraded"); g != 1 {
		t.Fatalf("fulcrum_degraded %v while standing down", g)
	}
	// Standing down: nothing is written, whatever the rules would do (a lowered budget
	// takes the board back, so the test waits without one).
	tries := x.board.count()
	x.tick(x.c, 10*time.Second)
	if n := x.board.count() - tries; n != 0 || x.boardMode() != x.top() {
		t.Fatalf("%d mode writes while standing down; board at %v", n, x.boardMode())
	}
	if _, err := x.c.Resume(context.Background(), &Caller{UID: 1000}); err != nil {
		t.Fatal(err)
	}
	if x.boardMode() != x.held || x.c.StoodDown() || x.c.Status().Degraded != "" || !x.c.Held() {
		t.Fatalf("after resume: board %v, stood down %v, degraded %q, held %v; want the held %v back", x.boardMode(), x.c.StoodDown(), x.c.Status().Degraded, x.c.Held(), x.held)
	}
	if _, err := x.c.Resume(context.Background(), nil); err != ErrNotStoodDown {
		t.Fatalf("second resume: %v, want ErrNotStoodDown", err)
	}
	// Watching again: the next change is seen too.
	x.jetsonClocks()
	x.tick(x.c, x.c.Config().Period)
	if !x.c.StoodDown() {
		t.Fatal("a second jetson_clocks after resume was not seen")
	}
}

// A budget change takes the board back: the stand-down ends and the new budgets are
// planned for and written.
func TestBudgetChangeTakesBoardBack(t *testing.T) {
	x := newExtEnv(t, ExternalStandDown)
	x.jetsonClocks()
	x.tick(x.c, x.c.Config().Period)
	if !x.c.StoodDown() {
		t.Fatal("not standing down after jetson_clocks")
	}
	if err := x.c.SetTargets(plan.Targets{LatencyMS: 400, PowerMW: 28000, RateRPS: 20}); err != nil {
		t.Fatal(err)
	}
	x.tick(x.c, time.Second)
	st := x.c.Status()
	if x.c.StoodDown() || st.Current == nil || x.boardMode() != st.Current.Mode || x.boardMode() == x.top() || !slices.Contains(x.modes, st.Current.Mode) {
		t.Fatalf("after a budget change: stood down %v, plan %+v, board %v", x.c.StoodDown(), st.Current, x.boardMode())
	}
}

// reapply writes fulcrumd's mode again within the period; the snapshot is kept.
func TestExternalChangeReapply(t *testing.T) {
	x := newExtEnv(t, ExternalReapply)
	x.jetsonClocks()
	x.tick(x.c, x.c.Config().Period)
	ev := lastOf(x.c.Events().List(0), KindExternal)
	if x.boardMode() != x.held || x.c.StoodDown() || ev == nil || !strings.Contains(ev.Reason, "reapply") || x.board.left() != 0 {
		t.Fatalf("reapply: board %v (want %v), stood down %v, event %+v, leaves %d", x.boardMode(), x.held, x.c.StoodDown(), ev, x.board.left())
	}
}

// adopt takes jetson_clocks' mode as fulcrumd's, held, without writing, with a batch
// chosen for it; the snapshot is forgotten (the other tool's state is the one to keep).
func TestExternalChangeAdopt(t *testing.T) {
	x := newExtEnv(t, ExternalAdopt)
	tries := x.board.count()
	x.jetsonClocks()
	x.tick(x.c, 2*time.Second)
	st := x.c.Status()
	if st.Current == nil || st.Current.Mode != x.top() || !x.c.Held() || x.c.StoodDown() || st.Degraded != "" {
		t.Fatalf("adopt: plan %+v, held %v, stood down %v, degraded %q", st.Current, x.c.Held(), x.c.StoodDown(), st.Degraded)
	}
	if n := x.board.count() - tries; n != 0 || x.boardMode() != x.top() || x.board.left() != 1 {
		t.Fatalf("adopt wrote %d modes; board %v; leaves %d", n, x.boardMode(), x.board.left())
	}
	if ev := lastOf(x.c.Events().List(0), KindExternal); ev == nil || !strings.Contains(ev.Reason, "adopt") {
		t.Fatalf("event %+v", ev)
	}
}

// An unknown policy is refused at New and by Validate.
func TestExternalPolicyChecked(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	if _, err := New(Options{Config: Config{ExternalChange: "ignore"}, Sched: e.sched, Store: e.store, Targets: plan.Targets{LatencyMS: 400}}); err == nil || !strings.Contains(err.Error(), "stand_down") {
		t.Fatalf("New with policy ignore: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Live = DefaultLiveOptions()
	cfg.ExternalChange = "ignore"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ExternalChange") {
		t.Fatalf("Validate: %v", err)
	}
}
