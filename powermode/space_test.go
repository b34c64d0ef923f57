package powermode_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// small is a 3×4×2×3 grid with round numbers, so expectations can be worked by hand.
func small(t *testing.T) *powermode.Space {
	t.Helper()
	s, err := powermode.NewSpace(powermode.Levels{
		Cores:  []int{4, 1, 2, 2},
		CPUKHz: []int64{400, 100, 300, 200, 100},
		GPUHz:  []int64{20, 10},
		EMCHz:  []int64{9, 5, 7, 9},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mode(c int, cpu, gpu, emc int64) powermode.Mode {
	return powermode.Mode{Cores: c, CPUKHz: cpu, GPUHz: gpu, EMCHz: emc}
}

func TestNewSpaceSortsAndDedups(t *testing.T) {
	cores := []int{4, 1, 2, 2}
	if _, err := powermode.NewSpace(powermode.Levels{Cores: cores, CPUKHz: []int64{300, 100}, GPUHz: []int64{10}, EMCHz: []int64{5}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cores, []int{4, 1, 2, 2}) {
		t.Errorf("NewSpace reordered the caller's slice: %v", cores)
	}
	s := small(t)
	want := powermode.Levels{Cores: []int{1, 2, 4}, CPUKHz: []int64{100, 200, 300, 400}, GPUHz: []int64{10, 20}, EMCHz: []int64{5, 7, 9}}
	l := s.Levels()
	if !slices.Equal(l.Cores, want.Cores) || !slices.Equal(l.CPUKHz, want.CPUKHz) || !slices.Equal(l.GPUHz, want.GPUHz) || !slices.Equal(l.EMCHz, want.EMCHz) {
		t.Errorf("Levels = %+v, want %+v", l, want)
	}
	if s.Dims() != (powermode.Index{3, 4, 2, 3}) || s.Size() != 72 || s.GridSize() != 72 || !s.IsGrid() {
		t.Errorf("dims %v size %d grid %d isGrid %v", s.Dims(), s.Size(), s.GridSize(), s.IsGrid())
	}
	// Levels is a copy.
	l.CPUKHz[0] = 999
	if s.Levels().CPUKHz[0] != 100 {
		t.Error("Levels() shares its slices with the space")
	}
}

func TestNewSpaceErrors(t *testing.T) {
	ok := powermode.Levels{Cores: []int{1}, CPUKHz: []int64{1}, GPUHz: []int64{1}, EMCHz: []int64{1}}
	for _, tc := range []struct {
		name string
		edit func(*powermode.Levels)
		want string
	}{
		{"no cores", func(l *powermode.Levels) { l.Cores = nil }, "knob cores has no levels"},
		{"no cpu", func(l *powermode.Levels) { l.CPUKHz = []int64{} }, "knob cpu_khz has no levels"},
		{"no gpu", func(l *powermode.Levels) { l.GPUHz = nil }, "knob gpu_hz has no levels"},
		{"no emc", func(l *powermode.Levels) { l.EMCHz = nil }, "knob emc_hz has no levels"},
		{"zero cores", func(l *powermode.Levels) { l.Cores = []int{2, 0} }, "knob cores has a non-positive level 0"},
		{"negative cpu", func(l *powermode.Levels) { l.CPUKHz = []int64{5, -5} }, "knob cpu_khz has a non-positive level -5"},
		{"zero gpu", func(l *powermode.Levels) { l.GPUHz = []int64{0} }, "knob gpu_hz"},
		{"zero emc", func(l *powermode.Levels) { l.EMCHz = []int64{0, 1} }, "knob emc_hz"},
	} {
		l := powermode.Levels{Cores: slices.Clone(ok.Cores), CPUKHz: slices.Clone(ok.CPUKHz), GPUHz: slices.Clone(ok.GPUHz), EMCHz: slices.Clone(ok.EMCHz)}
		tc.edit(&l)
		if _, err := powermode.NewSpace(l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := powermode.NewSpace(ok); err != nil {
		t.Errorf("1-level space: %v", err)
	}
}

func TestIndexModeAndOrdinal(t *testing.T) {
	s := small(t)
	if got := s.Mode(powermode.Index{2, 1, 0, 2}); got != mode(4, 200, 10, 9) {
		t.Errorf("Mode = %v", got)
	}
	// Row-major: cores slowest, EMC fastest.
	for o, want := range map[int]powermode.Index{0: {0, 0, 0, 0}, 1: {0, 0, 0, 1}, 3: {0, 0, 1, 0}, 6: {0, 1, 0, 0}, 24: {1, 0, 0, 0}, 71: {2, 3, 1, 2}} {
		if got := s.FromOrdinal(o); got != want {
			t.Errorf("FromOrdinal(%d) = %v, want %v", o, got, want)
		}
	}
	n := 0
	seen := map[powermode.Mode]bool{}
	for idx, m := range s.All() {
		if o := s.Ordinal(idx); o != n {
			t.Errorf("All: %v has ordinal %d, want %d (ordinal order)", idx, o, n)
		}
		if s.FromOrdinal(s.Ordinal(idx)) != idx {
			t.Errorf("FromOrdinal(Ordinal(%v)) = %v", idx, s.FromOrdinal(s.Ordinal(idx)))
		}
		back, ok := s.Index(m)
		if !ok || back != idx || !s.Contains(m) || !s.ContainsIndex(idx) {
			t.Errorf("Index(%v) = %v, %v; want %v", m, back, ok, idx)
		}
		seen[m] = true
		n++
	}
	if n != 72 || len(seen) != 72 || len(s.Modes()) != 72 {
		t.Errorf("All yielded %d (%d distinct), Modes %d", n, len(seen), len(s.Modes()))
	}
	for _, m := range []powermode.Mode{mode(3, 100, 10, 5), mode(1, 150, 10, 5), mode(1, 100, 15, 5), mode(1, 100, 10, 6), {}} {
		if _, ok := s.Index(m); ok || s.Contains(m) {
			t.Errorf("%v: want not in space", m)
		}
	}
	for _, idx := range []powermode.Index{{-1, 0, 0, 0}, {3, 0, 0, 0}, {0, 4, 0, 0}, {0, 0, 2, 0}, {0, 0, 0, 3}} {
		if s.ContainsIndex(idx) {
			t.Errorf("ContainsIndex(%v) = true", idx)
		}
	}
	// Stopping early.
	k := 0
	for range s.All() {
		k++
		if k == 5 {
			break
		}
	}
	if k != 5 {
		t.Errorf("break after 5: %d", k)
	}
}

func TestNeighbours(t *testing.T) {
	s := small(t) // dims 3,4,2,3
	for _, tc := range []struct {
		idx  powermode.Index
		step int
		want []powermode.Index
	}{
		{powermode.Index{0, 0, 0, 0}, 1, []powermode.Index{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}},
		{powermode.Index{2, 3, 1, 2}, 1, []powermode.Index{{1, 3, 1, 2}, {2, 2, 1, 2}, {2, 3, 0, 2}, {2, 3, 1, 1}}},
		{powermode.Index{1, 1, 1, 1}, 1, []powermode.Index{{0, 1, 1, 1}, {2, 1, 1, 1}, {1, 0, 1, 1}, {1, 2, 1, 1}, {1, 1, 0, 1}, {1, 1, 1, 0}, {1, 1, 1, 2}}},
		// Step 2 clamps at the edges; a clamp back onto idx is dropped.
		{powermode.Index{1, 1, 0, 1}, 2, []powermode.Index{{0, 1, 0, 1}, {2, 1, 0, 1}, {1, 0, 0, 1}, {1, 3, 0, 1}, {1, 1, 1, 1}, {1, 1, 0, 0}, {1, 1, 0, 2}}},
		{powermode.Index{0, 2, 0, 0}, 2, []powermode.Index{{2, 2, 0, 0}, {0, 0, 0, 0}, {0, 3, 0, 0}, {0, 2, 1, 0}, {0, 2, 0, 2}}},
		// Step < 1 means 1.
		{powermode.Index{0, 0, 0, 0}, 0, []powermode.Index{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}},
		{powermode.Index{0, 0, 0, 0}, -3, []powermode.Index{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}},
		// A huge step lands on the far edge of each knob.
		{powermode.Index{1, 1, 1, 1}, 100, []powermode.Index{{0, 1, 1, 1}, {2, 1, 1, 1}, {1, 0, 1, 1}, {1, 3, 1, 1}, {1, 1, 0, 1}, {1, 1, 1, 0}, {1, 1, 1, 2}}},
	} {
		if got := s.Neighbours(tc.idx, tc.step); !slices.Equal(got, tc.want) {
			t.Errorf("Neighbours(%v, %d) =\n %v\nwant\n %v", tc.idx, tc.step, got, tc.want)
		}
	}
	// A knob with one level contributes nothing.
	one, err := powermode.NewSpace(powermode.Levels{Cores: []int{4}, CPUKHz: []int64{100, 200}, GPUHz: []int64{10}, EMCHz: []int64{5}})
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Neighbours(powermode.Index{0, 0, 0, 0}, 1); !slices.Equal(got, []powermode.Index{{0, 1, 0, 0}}) {
		t.Errorf("one-level knobs: %v", got)
	}
}

func TestSnap(t *testing.T) {
	s := small(t) // cores 1 2 4; cpu 100..400; gpu 10 20; emc 5 7 9
	for _, tc := range []struct {
		in, snap, nearest powermode.Mode
	}{
		{mode(2, 300, 20, 7), mode(2, 300, 20, 7), mode(2, 300, 20, 7)},       // on the grid
		{mode(3, 150, 15, 6), mode(2, 100, 10, 5), mode(2, 100, 10, 5)},       // midpoints: lower level
		{mode(3, 151, 16, 7), mode(2, 100, 10, 7), mode(2, 200, 20, 7)},       // past the midpoint: a cap stays below
		{mode(3, 199, 19, 8), mode(2, 100, 10, 7), mode(2, 200, 20, 7)},       // just below a level
		{mode(0, -5, 0, 0), mode(1, 100, 10, 5), mode(1, 100, 10, 5)},         // below every level
		{mode(64, 9999, 1e9, 1e12), mode(4, 400, 20, 9), mode(4, 400, 20, 9)}, // above every level
		{mode(4, 249, 11, 8), mode(4, 200, 10, 7), mode(4, 200, 10, 7)},
	} {
		if got := s.Snap(tc.in); got != tc.snap {
			t.Errorf("Snap(%v) = %v, want %v", tc.in, got, tc.snap)
		}
		if got := s.SnapNearest(tc.in); got != tc.nearest {
			t.Errorf("SnapNearest(%v) = %v, want %v", tc.in, got, tc.nearest)
		}
	}
	for _, tc := range []struct {
		k    powermode.Knob
		v    int64
		want int
	}{
		{powermode.KnobCores, 3, 1}, {powermode.KnobCores, 4, 2}, {powermode.KnobCPU, 399, 2}, {powermode.KnobCPU, 400, 3},
		{powermode.KnobGPU, -1, 0}, {powermode.KnobEMC, 8, 1}, {powermode.KnobEMC, 100, 2},
	} {
		if got := s.SnapLevel(tc.k, tc.v); got != tc.want {
			t.Errorf("SnapLevel(%s, %d) = %d, want %d", tc.k, tc.v, got, tc.want)
		}
	}
}

func TestSnapRealBoard(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	s := testboard.Space(t, spec)
	// 2000000 is 41600 kHz above 1958400 and 35200 below 2035200: a cap keeps the
	// level below, the nearest level is above.
	m := mode(12, 2000000, 650000000, 3000000000)
	if got, want := s.Snap(m), mode(12, 1958400, 612000000, 2133000000); got != want {
		t.Errorf("Snap = %v, want %v", got, want)
	}
	if got, want := s.SnapNearest(m), mode(12, 2035200, 612000000, 3199000000); got != want {
		t.Errorf("SnapNearest = %v, want %v", got, want)
	}
}

func TestSubspace(t *testing.T) {
	modes := []powermode.Mode{
		mode(4, 300, 20, 9),
		mode(2, 100, 10, 5),
		mode(4, 100, 20, 5),
		mode(2, 100, 10, 5), // repeat
		mode(8, 300, 10, 9),
	}
	s, err := powermode.NewSubspace(modes)
	if err != nil {
		t.Fatal(err)
	}
	if s.Size() != 4 || s.IsGrid() || s.GridSize() != 3*2*2*2 || s.Dims() != (powermode.Index{3, 2, 2, 2}) {
		t.Errorf("size %d grid %v gridSize %d dims %v", s.Size(), s.IsGrid(), s.GridSize(), s.Dims())
	}
	l := s.Levels()
	if !slices.Equal(l.Cores, []int{2, 4, 8}) || !slices.Equal(l.CPUKHz, []int64{100, 300}) || !slices.Equal(l.GPUHz, []int64{10, 20}) || !slices.Equal(l.EMCHz, []int64{5, 9}) {
		t.Errorf("levels %+v", l)
	}
	// All yields exactly the members, in ordinal order.
	want := []powermode.Mode{mode(2, 100, 10, 5), mode(4, 100, 20, 5), mode(4, 300, 20, 9), mode(8, 300, 10, 9)}
	if got := s.Modes(); !slices.Equal(got, want) {
		t.Errorf("Modes = %v, want %v", got, want)
	}
	prev := -1
	for idx, m := range s.All() {
		if o := s.Ordinal(idx); o <= prev {
			t.Errorf("All not in ordinal order at %v", m)
		} else {
			prev = o
		}
	}
	// On the grid's levels but not a member.
	off := mode(2, 300, 10, 5)
	if idx, ok := s.Index(off); ok || s.Contains(off) || s.ContainsIndex(idx) {
		t.Errorf("%v: want not a member (idx %v)", off, idx)
	}
	// SnapNearest: the grid point (4,300,10,9) is not a member; the nearest member in
	// level index distance is (4,300,20,9) or (8,300,10,9), both 1 away: the first in
	// ordinal order wins.
	if got := s.SnapNearest(mode(4, 300, 10, 9)); got != mode(4, 300, 20, 9) {
		t.Errorf("SnapNearest to member = %v", got)
	}
	if got := s.SnapNearest(mode(7, 290, 11, 8)); got != mode(8, 300, 10, 9) {
		t.Errorf("SnapNearest = %v", got)
	}
	// Snap keeps to members at or below the caps on every knob: of those only
	// (2,100,10,5) is, although (4,300,20,9) is nearer.
	if got := s.Snap(mode(4, 300, 10, 9)); got != mode(2, 100, 10, 5) {
		t.Errorf("Snap to member = %v", got)
	}
	// (8,300,20,9) is not a member; (4,300,20,9) and (8,300,10,9) are both below it and
	// 1 away: the first in ordinal order wins.
	if got := s.Snap(mode(8, 300, 20, 9)); got != mode(4, 300, 20, 9) {
		t.Errorf("Snap tie = %v", got)
	}
	// Neighbours skip non-members.
	idx, _ := s.Index(mode(4, 100, 20, 5))
	for _, n := range s.Neighbours(idx, 1) {
		if !s.ContainsIndex(n) {
			t.Errorf("neighbour %v is not a member", n)
		}
	}
	if got := s.Neighbours(idx, 1); len(got) != 0 {
		t.Errorf("Neighbours of an isolated member = %v (its grid neighbours are not members)", got)
	}
	// Modes that fill their grid make a grid space.
	full, err := powermode.NewSubspace([]powermode.Mode{mode(1, 100, 10, 5), mode(2, 100, 10, 5)})
	if err != nil || !full.IsGrid() || full.Size() != 2 {
		t.Errorf("full subspace: %v grid=%v", err, full != nil && full.IsGrid())
	}
	if _, err := powermode.NewSubspace(nil); err == nil {
		t.Error("no modes: want error")
	}
	if _, err := powermode.NewSubspace([]powermode.Mode{mode(1, 100, 10, 5), mode(0, 100, 10, 5)}); err == nil || !strings.Contains(err.Error(), "cores must be at least 1") {
		t.Errorf("invalid mode: err = %v", err)
	}
}

func TestKnobString(t *testing.T) {
	want := []string{"cores", "cpu_khz", "gpu_hz", "emc_hz"}
	for k := range powermode.NumKnobs {
		if got := powermode.Knob(k).String(); got != want[k] {
			t.Errorf("Knob(%d) = %q, want %q", k, got, want[k])
		}
	}
}
