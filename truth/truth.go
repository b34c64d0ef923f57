// Package truth reads and writes ground-truth tables (docs/design.md §8): per workload, role,
// mode and batch size, the mean minibatch time and the mean board power. The simulator
// writes them, the profiler exports its store in this format, and the benchmark scores
// searchers against them.
//
// It is vocabulary shared by the board simulator (powermode/sim), the profiler and the
// planner, so it sits at the top level beside powermode and imports nothing of the
// project but powermode's Mode and Space (leaf_test.go keeps it that way). The CSV
// reader and writer stay with the types: the column set is the contract, and they need
// only the standard library.
package truth

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Role says whether a row is a training or an inference minibatch.
type Role string

// The two roles of docs/design.md §2.
const (
	Train Role = "train"
	Infer Role = "infer"
)

// ParseRole accepts "train" or "infer".
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case Train, Infer:
		return Role(s), nil
	}
	return "", fmt.Errorf("role %q: want train or infer", s)
}

// Header returns the required columns, in the order Write uses; Read finds columns by
// name, in any order.
func Header() []string {
	return []string{"workload", "role", "cores", "cpu_khz", "gpu_hz", "emc_hz", "batch", "time_ms", "power_mw"}
}

// MicroColumn is the optional column of a training row run as a micro-batch turn
// (issue 32): the turn's samples, batch staying the minibatch B_T. Empty or 0: the row
// is the whole minibatch. Tables without it read as before, and Write adds it only when
// a row has a micro-batch, so such tables are written as before.
const MicroColumn = "micro_batch"

// Row is one line of a ground-truth table.
type Row struct {
	Workload string
	Role     Role
	Mode     powermode.Mode
	Batch    int
	// MicroBatch is, for a training row, the samples of one micro-batch turn of the
	// minibatch Batch (TimeMS and PowerMW are that turn's); 0: the whole minibatch.
	MicroBatch int
	TimeMS     float64
	PowerMW    float64
}

// Key identifies what a row measures.
type Key struct {
	Workload   string
	Role       Role
	Mode       powermode.Mode
	Batch      int
	MicroBatch int // 0: the whole minibatch (every inference row)
}

// Key returns the row's identity.
func (r Row) Key() Key { return Key{r.Workload, r.Role, r.Mode, r.Batch, r.MicroBatch} }

// Table is a ground-truth table with an index by Key.
type Table struct {
	Rows  []Row
	index map[Key]int
}

// NewTable indexes rows; a repeated key is an error.
func NewTable(rows []Row) (*Table, error) {
	t := &Table{Rows: rows, index: make(map[Key]int, len(rows))}
	for i, r := range rows {
		if j, dup := t.index[r.Key()]; dup {
			return nil, fmt.Errorf("ground truth: rows %d and %d both give %s %s at %s batch %d%s", j+1, i+1, r.Workload, r.Role, r.Mode, r.Batch, microWords(r.MicroBatch))
		}
		t.index[r.Key()] = i
	}
	return t, nil
}

func microWords(micro int) string {
	if micro == 0 {
		return ""
	}
	return fmt.Sprintf(" micro-batch %d", micro)
}

// MicroBatches lists the distinct micro-batch sizes of a training workload at minibatch
// batch, ascending (none for a table without micro-batch rows).
func (t *Table) MicroBatches(workload string, batch int) []int {
	var out []int
	for _, r := range t.Rows {
		if r.Workload == workload && r.Role == Train && r.Batch == batch && r.MicroBatch > 0 && !slices.Contains(out, r.MicroBatch) {
			out = append(out, r.MicroBatch)
		}
	}
	slices.Sort(out)
	return out
}

// Lookup returns the row for k.
func (t *Table) Lookup(k Key) (Row, bool) {
	i, ok := t.index[k]
	if !ok {
		return Row{}, false
	}
	return t.Rows[i], true
}

// maxBatchGap bounds how far LookupBetween looks for a table batch on either side.
const maxBatchGap = 64

// LookupBetween returns the row for k, or, when the table has no row at k.Batch but
// has rows at the same workload, role, mode and micro-batch for a smaller and a larger batch (the
// nearest on each side, at most maxBatchGap away), their linear interpolation in the
// batch size: time and power of a batch the table skips (a table generated at 1, 2, 4,
// 6, … answers an inference batch of 3, the partial batch the scheduler grants when 3
// requests are queued). A batch outside the table's range is not answered.
func (t *Table) LookupBetween(k Key) (Row, bool) {
	if r, ok := t.Lookup(k); ok {
		return r, true
	}
	near := func(step int) (Row, bool) {
		for d := 1; d <= maxBatchGap; d++ {
			b := k.Batch + step*d
			if b < 1 {
				break
			}
			if r, ok := t.Lookup(Key{k.Workload, k.Role, k.Mode, b, k.MicroBatch}); ok {
				return r, true
			}
		}
		return Row{}, false
	}
	lo, okLo := near(-1)
	hi, okHi := near(+1)
	if !okLo || !okHi {
		return Row{}, false
	}
	f := float64(k.Batch-lo.Batch) / float64(hi.Batch-lo.Batch)
	r := lo
	r.Batch = k.Batch
	r.TimeMS = lo.TimeMS + f*(hi.TimeMS-lo.TimeMS)
	r.PowerMW = lo.PowerMW + f*(hi.PowerMW-lo.PowerMW)
	return r, true
}

// Workloads lists the distinct workload names of a role, sorted.
func (t *Table) Workloads(role Role) []string {
	var out []string
	for _, r := range t.Rows {
		if r.Role == role && !slices.Contains(out, r.Workload) {
			out = append(out, r.Workload)
		}
	}
	slices.Sort(out)
	return out
}

// Batches lists the distinct batch sizes of a workload, ascending.
func (t *Table) Batches(workload string, role Role) []int {
	var out []int
	for _, r := range t.Rows {
		if r.Workload == workload && r.Role == role && !slices.Contains(out, r.Batch) {
			out = append(out, r.Batch)
		}
	}
	slices.Sort(out)
	return out
}

// Modes lists the distinct modes of the table (its search space), in first-seen order.
func (t *Table) Modes() []powermode.Mode {
	seen := map[powermode.Mode]bool{}
	var out []powermode.Mode
	for _, r := range t.Rows {
		if !seen[r.Mode] {
			seen[r.Mode] = true
			out = append(out, r.Mode)
		}
	}
	return out
}

// Space is the search space the table defines: its distinct modes.
func (t *Table) Space() (*powermode.Space, error) { return powermode.NewSubspace(t.Modes()) }

// Read parses a ground-truth CSV. Columns are found by header name; extra columns are
// ignored. Every error names the line and the column.
func Read(r io.Reader) (*Table, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.Comment = '#'
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("ground truth: empty file: want a header line " + strings.Join(Header(), ","))
		}
		return nil, fmt.Errorf("ground truth: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(strings.ToLower(h))] = i
	}
	var missing []string
	for _, h := range Header() {
		if _, ok := col[h]; !ok {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("ground truth: header lacks column(s) %s: want %s", strings.Join(missing, ", "), strings.Join(Header(), ","))
	}
	var rows []Row
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ground truth: %w", err)
		}
		line, _ := cr.FieldPos(0)
		row, err := parseRow(rec, col)
		if err != nil {
			return nil, fmt.Errorf("ground truth line %d: %w", line, err)
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, errors.New("ground truth: no rows after the header")
	}
	return NewTable(rows)
}

func parseRow(rec []string, col map[string]int) (Row, error) {
	get := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
	integer := func(name string) (int64, error) {
		v, err := strconv.ParseInt(get(name), 10, 64)
		if err != nil || v <= 0 {
			return 0, fmt.Errorf("column %s: %q is not a positive integer", name, get(name))
		}
		return v, nil
	}
	real := func(name string) (float64, error) {
		v, err := strconv.ParseFloat(get(name), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return 0, fmt.Errorf("column %s: %q is not a positive number", name, get(name))
		}
		return v, nil
	}
	var r Row
	var err error
	if r.Workload = get("workload"); r.Workload == "" {
		return r, errors.New("column workload: empty")
	}
	if r.Role, err = ParseRole(get("role")); err != nil {
		return r, fmt.Errorf("column role: %w", err)
	}
	var v [5]int64
	for i, name := range []string{"cores", "cpu_khz", "gpu_hz", "emc_hz", "batch"} {
		if v[i], err = integer(name); err != nil {
			return r, err
		}
	}
	r.Mode = powermode.Mode{Cores: int(v[0]), CPUKHz: v[1], GPUHz: v[2], EMCHz: v[3]}
	r.Batch = int(v[4])
	if _, ok := col[MicroColumn]; ok && get(MicroColumn) != "" && get(MicroColumn) != "0" {
		mb, err := integer(MicroColumn)
		if err != nil {
			return r, err
		}
		switch {
		case r.Role != Train:
			return r, fmt.Errorf("column %s: %d on an inference row: only training rows run as micro-batches; leave it empty", MicroColumn, mb)
		case mb >= int64(r.Batch) || int64(r.Batch)%mb != 0:
			return r, fmt.Errorf("column %s: %d is not a divisor of the minibatch %d below it: a micro-batch is B/k samples for k ≥ 2", MicroColumn, mb, r.Batch)
		}
		r.MicroBatch = int(mb)
	}
	if r.TimeMS, err = real("time_ms"); err != nil {
		return r, err
	}
	if r.PowerMW, err = real("power_mw"); err != nil {
		return r, err
	}
	return r, nil
}

// Write writes rows as CSV with Header, times and powers with enough digits to
// round-trip exactly.
func Write(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	micro := slices.ContainsFunc(rows, func(r Row) bool { return r.MicroBatch != 0 })
	head := Header()
	if micro {
		head = append(head, MicroColumn)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{
			r.Workload, string(r.Role),
			strconv.Itoa(r.Mode.Cores), strconv.FormatInt(r.Mode.CPUKHz, 10),
			strconv.FormatInt(r.Mode.GPUHz, 10), strconv.FormatInt(r.Mode.EMCHz, 10),
			strconv.Itoa(r.Batch),
			strconv.FormatFloat(r.TimeMS, 'g', -1, 64), strconv.FormatFloat(r.PowerMW, 'g', -1, 64),
		}
		if micro {
			rec = append(rec, strconv.Itoa(r.MicroBatch))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
