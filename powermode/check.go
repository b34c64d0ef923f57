package powermode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Check says why m is not one of the space's modes: each knob whose value is not one of
// its levels, with the nearest allowed levels (nil when m is in the space). Callers add
// where to look the levels up (fulcrumctl board modes, GET /v1/mode).
func (s *Space) Check(m Mode) error {
	if s.Contains(m) {
		return nil
	}
	lv := s.Levels()
	var bad []string
	add := func(knob string, v int64, levels []int64) {
		if !slices.Contains(levels, v) {
			bad = append(bad, fmt.Sprintf("%s %d is not a level of this board (nearest: %s)", knob, v, NearestLevels(levels, v)))
		}
	}
	cores := make([]int64, len(lv.Cores))
	for i, c := range lv.Cores {
		cores[i] = int64(c)
	}
	add("cores", int64(m.Cores), cores)
	add("cpu_khz", m.CPUKHz, lv.CPUKHz)
	add("gpu_hz", m.GPUHz, lv.GPUHz)
	add("emc_hz", m.EMCHz, lv.EMCHz)
	if len(bad) == 0 {
		bad = append(bad, "not in the space")
	}
	return fmt.Errorf("mode %s: %s", m, strings.Join(bad, "; "))
}

// NearestLevels names the allowed levels (sorted) on either side of v.
func NearestLevels(levels []int64, v int64) string {
	i, _ := slices.BinarySearch(levels, v)
	var near []string
	if i > 0 {
		near = append(near, strconv.FormatInt(levels[i-1], 10))
	}
	if i < len(levels) {
		near = append(near, strconv.FormatInt(levels[i], 10))
	}
	return strings.Join(near, " or ")
}
