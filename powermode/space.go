package powermode

import (
	"errors"
	"fmt"
	"iter"
	"slices"
)

// Knob numbers the four dimensions of a Space, in the order of Index.
type Knob int

// The four knobs of a power mode, in Index order.
const (
	KnobCores Knob = iota
	KnobCPU
	KnobGPU
	KnobEMC
	NumKnobs = 4
)

func (k Knob) String() string {
	return [...]string{"cores", "cpu_khz", "gpu_hz", "emc_hz"}[k]
}

// Levels are the allowed values of each knob, each list ascending and without repeats.
type Levels struct {
	Cores  []int   `json:"cores" yaml:"cores"`
	CPUKHz []int64 `json:"cpu_khz" yaml:"cpu_khz"`
	GPUHz  []int64 `json:"gpu_hz" yaml:"gpu_hz"`
	EMCHz  []int64 `json:"emc_hz" yaml:"emc_hz"`
}

// Index is a position in a Space: one level index per knob (cores, cpu, gpu, emc).
type Index [NumKnobs]int

// Space is the grid of a board's allowed levels, or a subset of that grid (for example
// the modes present in a ground-truth table). It is immutable after construction and
// safe for concurrent use.
type Space struct {
	levels Levels
	dims   Index
	// member is nil for a full grid; otherwise member[ordinal] says whether the mode at
	// that grid position is part of the space.
	member []bool
	size   int
}

// NewSpace builds the full grid of the given levels. Levels are sorted and
// de-duplicated; every knob needs at least one positive level.
func NewSpace(l Levels) (*Space, error) {
	l = Levels{
		Cores:  sortedUnique(l.Cores),
		CPUKHz: sortedUnique(l.CPUKHz),
		GPUHz:  sortedUnique(l.GPUHz),
		EMCHz:  sortedUnique(l.EMCHz),
	}
	for _, c := range []struct {
		name string
		n    int
		min  int64
	}{
		{"cores", len(l.Cores), int64(first(l.Cores))},
		{"cpu_khz", len(l.CPUKHz), first(l.CPUKHz)},
		{"gpu_hz", len(l.GPUHz), first(l.GPUHz)},
		{"emc_hz", len(l.EMCHz), first(l.EMCHz)},
	} {
		if c.n == 0 {
			return nil, fmt.Errorf("space: knob %s has no levels", c.name)
		}
		if c.min <= 0 {
			return nil, fmt.Errorf("space: knob %s has a non-positive level %d", c.name, c.min)
		}
	}
	s := &Space{levels: l, dims: Index{len(l.Cores), len(l.CPUKHz), len(l.GPUHz), len(l.EMCHz)}}
	s.size = s.dims[0] * s.dims[1] * s.dims[2] * s.dims[3]
	return s, nil
}

// NewSubspace builds the space made of exactly the given modes; the levels of each knob
// are the distinct values that occur among them.
func NewSubspace(modes []Mode) (*Space, error) {
	if len(modes) == 0 {
		return nil, errors.New("space: no modes given")
	}
	var l Levels
	for _, m := range modes {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("space: %w", err)
		}
		l.Cores = append(l.Cores, m.Cores)
		l.CPUKHz = append(l.CPUKHz, m.CPUKHz)
		l.GPUHz = append(l.GPUHz, m.GPUHz)
		l.EMCHz = append(l.EMCHz, m.EMCHz)
	}
	s, err := NewSpace(l)
	if err != nil {
		return nil, err
	}
	member := make([]bool, s.size)
	n := 0
	for _, m := range modes {
		idx, _ := s.gridIndex(m)
		o := s.ordinal(idx)
		if !member[o] {
			member[o] = true
			n++
		}
	}
	if n < s.size {
		s.member = member
		s.size = n
	}
	return s, nil
}

// Levels returns a copy of the levels of each knob.
func (s *Space) Levels() Levels {
	return Levels{
		Cores:  slices.Clone(s.levels.Cores),
		CPUKHz: slices.Clone(s.levels.CPUKHz),
		GPUHz:  slices.Clone(s.levels.GPUHz),
		EMCHz:  slices.Clone(s.levels.EMCHz),
	}
}

// Dims is the number of levels of each knob.
func (s *Space) Dims() Index { return s.dims }

// Size is the number of modes in the space.
func (s *Space) Size() int { return s.size }

// IsGrid reports whether every combination of levels is in the space.
func (s *Space) IsGrid() bool { return s.member == nil }

// Mode returns the mode at idx. It panics on an index outside the grid, like a slice.
func (s *Space) Mode(idx Index) Mode {
	return Mode{
		Cores:  s.levels.Cores[idx[0]],
		CPUKHz: s.levels.CPUKHz[idx[1]],
		GPUHz:  s.levels.GPUHz[idx[2]],
		EMCHz:  s.levels.EMCHz[idx[3]],
	}
}

// Index returns the position of m and whether m is in the space.
func (s *Space) Index(m Mode) (Index, bool) {
	idx, ok := s.gridIndex(m)
	if !ok {
		return Index{}, false
	}
	return idx, s.ContainsIndex(idx)
}

// Contains reports whether m is one of the space's modes.
func (s *Space) Contains(m Mode) bool {
	_, ok := s.Index(m)
	return ok
}

// ContainsIndex reports whether idx lies in the grid and, for a subset, is a member.
func (s *Space) ContainsIndex(idx Index) bool {
	for k := range NumKnobs {
		if idx[k] < 0 || idx[k] >= s.dims[k] {
			return false
		}
	}
	return s.member == nil || s.member[s.ordinal(idx)]
}

func (s *Space) gridIndex(m Mode) (Index, bool) {
	c, ok0 := slices.BinarySearch(s.levels.Cores, m.Cores)
	p, ok1 := slices.BinarySearch(s.levels.CPUKHz, m.CPUKHz)
	g, ok2 := slices.BinarySearch(s.levels.GPUHz, m.GPUHz)
	e, ok3 := slices.BinarySearch(s.levels.EMCHz, m.EMCHz)
	return Index{c, p, g, e}, ok0 && ok1 && ok2 && ok3
}

// ordinal is the row-major position of idx in the full grid (cores slowest).
func (s *Space) ordinal(idx Index) int {
	o := 0
	for k := range NumKnobs {
		o = o*s.dims[k] + idx[k]
	}
	return o
}

// Ordinal returns the row-major grid position of idx (cores vary slowest, EMC fastest).
// It is stable for a given set of levels and is what All iterates in.
func (s *Space) Ordinal(idx Index) int { return s.ordinal(idx) }

// FromOrdinal is the inverse of Ordinal.
func (s *Space) FromOrdinal(o int) Index {
	var idx Index
	for k := NumKnobs - 1; k >= 0; k-- {
		idx[k] = o % s.dims[k]
		o /= s.dims[k]
	}
	return idx
}

// GridSize is the number of positions in the full grid (Size for a grid space).
func (s *Space) GridSize() int { return s.dims[0] * s.dims[1] * s.dims[2] * s.dims[3] }

// All iterates the space's modes in ordinal order.
func (s *Space) All() iter.Seq2[Index, Mode] {
	return func(yield func(Index, Mode) bool) {
		n := s.GridSize()
		for o := range n {
			if s.member != nil && !s.member[o] {
				continue
			}
			idx := s.FromOrdinal(o)
			if !yield(idx, s.Mode(idx)) {
				return
			}
		}
	}
}

// Modes returns every mode of the space in ordinal order.
func (s *Space) Modes() []Mode {
	out := make([]Mode, 0, s.size)
	for _, m := range s.All() {
		out = append(out, m)
	}
	return out
}

// Neighbours returns the members of the space reached from idx by moving step levels
// up or down along one knob at a time (at most 8), in knob order, down before up.
// Steps that leave the grid are clamped to its edge; positions equal to idx are dropped.
func (s *Space) Neighbours(idx Index, step int) []Index {
	if step < 1 {
		step = 1
	}
	out := make([]Index, 0, 2*NumKnobs)
	for k := range NumKnobs {
		for _, d := range []int{-step, step} {
			n := idx
			n[k] = min(max(idx[k]+d, 0), s.dims[k]-1)
			if n == idx || !s.ContainsIndex(n) {
				continue
			}
			if len(out) > 0 && out[len(out)-1] == n {
				continue
			}
			out = append(out, n)
		}
	}
	return out
}

// Snap returns the mode a set of caps amounts to: on each knob the highest level at or
// below the value, as the kernel applies a cap (scaling_max_freq, devfreq max_freq),
// or the lowest level where the value is below them all. For a subset space the result
// is, among the members at or below that grid point on every knob, the one nearest to it
// in level-index distance (ties go to the lower ordinal); with no such member, the
// member nearest to it.
func (s *Space) Snap(m Mode) Mode {
	return s.snap(Index{
		atOrBelow(s.levels.Cores, m.Cores),
		atOrBelow(s.levels.CPUKHz, m.CPUKHz),
		atOrBelow(s.levels.GPUHz, m.GPUHz),
		atOrBelow(s.levels.EMCHz, m.EMCHz),
	}, true)
}

// SnapNearest returns the grid mode whose levels are nearest to m knob by knob (ties go
// to the lower level): for a reading, such as a clock an NVML query reports, that is
// not a cap. For a subset space the result is the member nearest in level-index
// distance to that grid point.
func (s *Space) SnapNearest(m Mode) Mode {
	return s.snap(Index{
		nearest(s.levels.Cores, m.Cores),
		nearest(s.levels.CPUKHz, m.CPUKHz),
		nearest(s.levels.GPUHz, m.GPUHz),
		nearest(s.levels.EMCHz, m.EMCHz),
	}, false)
}

// snap returns the mode at idx if it is a member, else the nearest member (with below,
// preferring members at or below idx on every knob).
func (s *Space) snap(idx Index, below bool) Mode {
	if s.ContainsIndex(idx) {
		return s.Mode(idx)
	}
	best, bestD, bestBelow := Index{}, -1, false
	for j := range s.All() {
		d, under := 0, true
		for k := range NumKnobs {
			d += abs(j[k] - idx[k])
			under = under && j[k] <= idx[k]
		}
		under = under && below
		if bestD < 0 || (under && !bestBelow) || (under == bestBelow && d < bestD) {
			best, bestD, bestBelow = j, d, under
		}
	}
	return s.Mode(best)
}

// SnapLevel returns the index of the highest level of knob k at or below v (the lowest
// level where v is below them all), as Snap does for a cap.
func (s *Space) SnapLevel(k Knob, v int64) int {
	switch k {
	case KnobCores:
		return atOrBelow(s.levels.Cores, int(v))
	case KnobCPU:
		return atOrBelow(s.levels.CPUKHz, v)
	case KnobGPU:
		return atOrBelow(s.levels.GPUHz, v)
	default:
		return atOrBelow(s.levels.EMCHz, v)
	}
}

// atOrBelow is the index of the highest level <= v, or 0 when v is below every level.
func atOrBelow[T int | int64](levels []T, v T) int {
	i, found := slices.BinarySearch(levels, v)
	if found {
		return i
	}
	return max(i-1, 0)
}

func nearest[T int | int64](levels []T, v T) int {
	i, _ := slices.BinarySearch(levels, v)
	switch {
	case i == 0:
		return 0
	case i == len(levels):
		return len(levels) - 1
	case v-levels[i-1] <= levels[i]-v:
		return i - 1
	default:
		return i
	}
}

func sortedUnique[T int | int64](v []T) []T {
	out := slices.Clone(v)
	slices.Sort(out)
	return slices.Compact(out)
}

func first[T int | int64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
