package truth

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestRoundTrip(t *testing.T) {
	rows := []Row{
		{"resnet18", Train, powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}, 32, 0, 101.3456789, 49876.25},
		{"mobilenetv3", Infer, powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}, 8, 0, 12.5, 14000},
	}
	var buf bytes.Buffer
	if err := Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	tab, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != 2 || tab.Rows[0] != rows[0] || tab.Rows[1] != rows[1] {
		t.Fatalf("round trip: got %+v", tab.Rows)
	}
	if r, ok := tab.Lookup(rows[1].Key()); !ok || r != rows[1] {
		t.Errorf("lookup: %v %v", r, ok)
	}
	if got := tab.Workloads(Train); len(got) != 1 || got[0] != "resnet18" {
		t.Errorf("workloads: %v", got)
	}
}

func TestReadErrors(t *testing.T) {
	h := strings.Join(Header(), ",") + "\n"
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "empty file"},
		{"missing column", "workload,role\n", "lacks column"},
		{"no rows", h, "no rows"},
		{"bad role", h + "a,serve,1,1,1,1,1,1,1\n", "column role"},
		{"bad number", h + "a,train,x,1,1,1,1,1,1\n", "column cores"},
		{"negative time", h + "a,train,1,1,1,1,1,-1,1\n", "column time_ms"},
		{"nan power", h + "a,train,1,1,1,1,1,1,NaN\n", "column power_mw"},
		{"duplicate", h + "a,train,1,1,1,1,1,1,1\na,train,1,1,1,1,1,2,2\n", "both give"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestColumnsInAnyOrder(t *testing.T) {
	in := "power_mw,time_ms,batch,emc_hz,gpu_hz,cpu_khz,cores,role,workload,extra\n5000,10,1,204000000,306000000,115200,1,infer,w,x\n"
	tab, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if r := tab.Rows[0]; r.PowerMW != 5000 || r.Mode.Cores != 1 || r.Workload != "w" {
		t.Errorf("row = %+v", r)
	}
}

// TestLookupBetween: a batch the table skips (an inference batch of 3 in a table of 2
// and 4, the partial batch the scheduler grants with 3 requests queued) is answered by
// the two nearest table batches at the same mode (and micro-batch), interpolated; a table batch is its
// own row; a batch outside the table's range, or at a mode with a row on one side only,
// is not answered.
func TestLookupBetween(t *testing.T) {
	m := powermode.Mode{Cores: 4, CPUKHz: 1000, GPUHz: 500, EMCHz: 600}
	other := powermode.Mode{Cores: 2, CPUKHz: 1000, GPUHz: 500, EMCHz: 600}
	tab, err := NewTable([]Row{
		{Workload: "w", Role: Infer, Mode: m, Batch: 2, TimeMS: 10, PowerMW: 8000},
		{Workload: "w", Role: Infer, Mode: m, Batch: 4, TimeMS: 16, PowerMW: 9000},
		{Workload: "w", Role: Infer, Mode: m, Batch: 8, TimeMS: 30, PowerMW: 11000},
		{Workload: "w", Role: Infer, Mode: other, Batch: 2, TimeMS: 12, PowerMW: 7000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Lookup(Key{Workload: "w", Role: Infer, Mode: m, Batch: 3}); ok {
		t.Fatal("Lookup answered a batch the table does not have")
	}
	cases := []struct {
		batch           int
		ok              bool
		timeMS, powerMW float64
	}{
		{3, true, 13, 8500},
		{4, true, 16, 9000},
		{6, true, 23, 10000},
		{1, false, 0, 0},
		{9, false, 0, 0},
	}
	for _, c := range cases {
		r, ok := tab.LookupBetween(Key{Workload: "w", Role: Infer, Mode: m, Batch: c.batch})
		if ok != c.ok {
			t.Fatalf("batch %d: answered %v, want %v", c.batch, ok, c.ok)
		}
		if ok && (r.Batch != c.batch || r.TimeMS != c.timeMS || r.PowerMW != c.powerMW || r.Mode != m) {
			t.Errorf("batch %d: got %+v, want %g ms, %g mW at %s", c.batch, r, c.timeMS, c.powerMW, m)
		}
	}
	if _, ok := tab.LookupBetween(Key{Workload: "w", Role: Infer, Mode: other, Batch: 3}); ok {
		t.Error("a mode with a row below the batch only answered it")
	}
	if _, ok := tab.LookupBetween(Key{Workload: "w", Role: Train, Mode: m, Batch: 3}); ok {
		t.Error("another role's rows answered the batch")
	}
}

// Issue 32: training rows at micro-batch sizes round-trip through the optional
// micro_batch column; a table without it is written exactly as before (no column), and an
// old table (no column) reads with every row whole.
func TestMicroBatchColumn(t *testing.T) {
	m := powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000}
	rows := []Row{
		{"resnet18", Train, m, 32, 0, 101.25, 49876.25},
		{"resnet18", Train, m, 32, 8, 30.5, 48000},
		{"resnet18", Train, m, 32, 16, 55.5, 49000},
		{"mobilenetv3", Infer, m, 8, 0, 12.5, 14000},
	}
	var buf bytes.Buffer
	if err := Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(buf.String(), "\n"); head != strings.Join(Header(), ",")+","+MicroColumn {
		t.Fatalf("header %q", head)
	}
	tab, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if tab.Rows[i] != r {
			t.Fatalf("row %d: %+v, want %+v", i, tab.Rows[i], r)
		}
	}
	if got := tab.MicroBatches("resnet18", 32); len(got) != 2 || got[0] != 8 || got[1] != 16 {
		t.Fatalf("micro-batches %v", got)
	}
	if got := tab.Batches("resnet18", Train); len(got) != 1 || got[0] != 32 {
		t.Fatalf("minibatches %v: micro-batch rows keep the minibatch in batch", got)
	}
	if r, ok := tab.Lookup(Key{"resnet18", Train, m, 32, 0}); !ok || r.TimeMS != 101.25 {
		t.Fatalf("whole minibatch lookup: %+v %v", r, ok)
	}
	buf.Reset()
	if err := Write(&buf, []Row{rows[0], rows[3]}); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(buf.String(), "\n"); head != strings.Join(Header(), ",") {
		t.Fatalf("a table without micro-batches got header %q", head)
	}
	h := strings.Join(Header(), ",") + "," + MicroColumn + "\n"
	for _, tc := range []struct{ name, in, want string }{
		{"not a divisor", h + "a,train,1,1,1,1,32,1,1,5\n", "not a divisor"},
		{"the whole", h + "a,train,1,1,1,1,32,1,1,32\n", "not a divisor"},
		{"inference", h + "a,infer,1,1,1,1,32,1,1,8\n", "inference row"},
		{"garbage", h + "a,train,1,1,1,1,32,1,1,x\n", "column micro_batch"},
	} {
		if _, err := Read(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if tab, err := Read(strings.NewReader(h + "a,train,1,1,1,1,32,1,1,0\na,train,1,1,1,1,32,1,1,\n")); err == nil {
		t.Fatalf("0 and empty both mean the whole minibatch: want a duplicate error, got %+v", tab.Rows)
	}
}
