package plan

import (
	"cmp"
	"slices"
	"sort"
)

// ParetoFront returns, ascending, the indices of the points (x[i], y[i]) that no other
// point dominates when both coordinates are minimised. Of exact duplicates only the
// lowest index is kept. O(N log N).
func ParetoFront(x, y []float64) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	// By x, then y, then index: a point is on the front iff its y is below every y
	// seen before it in this order.
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmp.Compare(x[a], x[b]); c != 0 {
			return c
		}
		if c := cmp.Compare(y[a], y[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var out []int
	for k, i := range idx {
		if k == 0 || y[i] < y[out[len(out)-1]] {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// ParetoCandidates is the discard rule of ε-PAL (Zuluaga et al., "ε-PAL: an active
// learning approach to the multi-objective optimization problem", JMLR 2016) for two
// minimised objectives with confidence boxes [lo, hi]: point i is discarded when some
// other point j is, at its worst, no more than eps worse than i at its best in both
// objectives (hiX[j] ≤ loX[i]+eps and hiY[j] ≤ loY[i]+eps). It returns keep[i] for the
// points that may still be Pareto-optimal. O(N log N).
func ParetoCandidates(loX, loY, hiX, hiY []float64, eps float64) []bool {
	n := len(loX)
	keep := make([]bool, n)
	if n == 0 {
		return keep
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(hiX[a], hiX[b]) })
	sortedHiX := make([]float64, n)
	// best1/best2: the two smallest hiY among the first k+1 points of order, so a
	// point can be compared with the others without itself.
	best1, best2 := make([]int, n), make([]int, n)
	for k, i := range order {
		sortedHiX[k] = hiX[i]
		if k == 0 {
			best1[k], best2[k] = i, -1
			continue
		}
		b1, b2 := best1[k-1], best2[k-1]
		switch {
		case hiY[i] < hiY[b1]:
			b1, b2 = i, b1
		case b2 < 0 || hiY[i] < hiY[b2]:
			b2 = i
		}
		best1[k], best2[k] = b1, b2
	}
	for i := range n {
		// Points whose hiX is within reach: the prefix of order up to c.
		c := sort.Search(n, func(k int) bool { return sortedHiX[k] > loX[i]+eps })
		keep[i] = true
		if c == 0 {
			continue
		}
		j := best1[c-1]
		if j == i {
			j = best2[c-1]
		}
		if j >= 0 && hiY[j] <= loY[i]+eps {
			keep[i] = false
		}
	}
	return keep
}
