package main

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// simStore fills a bbolt store with the simulator's truth rows for a training and an
// inference workload on the AGX Orin 64GB at 4, 8 and 12 cores (which hold its presets).
func simStore(t *testing.T) string {
	t.Helper()
	spec, ws := testboard.Spec(t, testboard.AGXOrin), testboard.Workloads(t)
	rows, err := sim.TruthRows(spec, ws, sim.TruthOptions{
		Workloads: []string{"resnet18-train", "mobilenetv3-infer"},
		Cores:     []int{4, 8, 12},
		Batches:   []int{1, 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A profiled subset, as a campaign would leave: five CPU levels (the presets' among
	// them), every GPU and EMC level. It keeps the test to seconds under -race.
	cpus := []int64{729600, 1113600, 1497600, 1728000, 2201600}
	rows = slices.DeleteFunc(rows, func(r truth.Row) bool { return !slices.Contains(cpus, r.Mode.CPUKHz) })
	var buf bytes.Buffer
	if err := truth.Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profiles.db")
	s := storetest.OpenAt(t, path, store.Options{})
	defer s.Close()
	if _, err := s.Import(&buf, store.ImportOptions{Board: spec.Name}); err != nil {
		t.Fatal(err)
	}
	return path
}

// One store for both subtests: filling it is most of the test's time.
func TestProfilePlot(t *testing.T) {
	db := simStore(t)
	t.Run("from sim store", func(t *testing.T) { testProfilePlotFromSimStore(t, db) })
	t.Run("rejects bad input", func(t *testing.T) { testProfilePlotRejectsBadInput(t, db) })
}

func testProfilePlotFromSimStore(t *testing.T, db string) {
	dir := t.TempDir()

	svg := filepath.Join(dir, "train.svg")
	_, stderr, err := runProfile(t, "plot", "--db", db, "--workload", "resnet18-train", "--budget-power", "30W",
		"--mark", "8/1728000/612000000/3199000000", "--out", svg)
	if err != nil {
		t.Fatalf("plot: %v (stderr %s)", err, stderr)
	}
	// The AGX Orin 64GB presets all lie on the 4/8/12-core grid, so all are marked.
	if !strings.Contains(stderr, "presets marked: MAXN, MODE_15W, MODE_30W, MODE_50W") {
		t.Errorf("stderr %q: want every preset marked", stderr)
	}
	texts := svgTextsOf(t, svg)
	for _, want := range []string{"MODE_15W", "MAXN", "minibatch time (ms)", "mean board power (W)", "power budget 30 W", "resnet18-train train, batch 32, on agx-orin-64gb"} {
		if !texts[want] {
			t.Errorf("%s has no text %q", svg, want)
		}
	}

	pngPath := filepath.Join(dir, "infer.png")
	_, stderr, err = runProfile(t, "plot", "--db", db, "--workload", "mobilenetv3-infer", "--role", "infer", "--batch", "4", "--out", pngPath)
	if err != nil {
		t.Fatalf("plot infer: %v (stderr %s)", err, stderr)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("%s is not a PNG: %v", pngPath, err)
	}
	if !strings.Contains(stderr, "wrote "+pngPath+": 660 modes") {
		t.Errorf("stderr %q: want all 660 modes of the stored grid (3 cores × 5 CPU × 11 GPU × 4 EMC levels)", stderr)
	}
}

func testProfilePlotRejectsBadInput(t *testing.T, db string) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.svg")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no workload":   {[]string{"--out", out}, "--workload is required"},
		"no out":        {[]string{"--workload", "resnet18-train"}, "--out is required"},
		"bad role":      {[]string{"--workload", "resnet18-train", "--role", "serve", "--out", out}, "--role"},
		"unknown":       {[]string{"--workload", "nope", "--out", out}, "no profiles stored"},
		"missing batch": {[]string{"--workload", "mobilenetv3-infer", "--role", "infer", "--batch", "3", "--out", out}, "stored batches are 1, 4"},
		"bad mark":      {[]string{"--workload", "resnet18-train", "--mark", "8/1", "--out", out}, "--mark"},
		"unprofiled":    {[]string{"--workload", "resnet18-train", "--mark", "2/1728000/612000000/3199000000", "--out", out}, "not profiled"},
		"bad budget":    {[]string{"--workload", "resnet18-train", "--budget-power", "30000", "--out", out}, "--budget-power"},
		"bad type":      {[]string{"--workload", "resnet18-train", "--out", filepath.Join(dir, "x.gif")}, ".svg or .png"},
		"no store":      {[]string{"--workload", "resnet18-train", "--out", out, "--db", filepath.Join(dir, "none.db")}, ""},
	} {
		args := append([]string{"plot", "--db", db}, tc.args...)
		_, _, err := runProfile(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed plots left files: %v", ents)
	}
}

func svgTextsOf(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	texts := map[string]bool{}
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("%s is not valid XML: %v", path, err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			inText = el.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts[string(el)] = true
			}
		case xml.EndElement:
			inText = false
		}
	}
}

func TestBenchPlot(t *testing.T) {
	spec, ws := testboard.Spec(t, testboard.AGXOrin), testboard.Workloads(t)
	rows, err := sim.TruthRows(spec, ws, sim.TruthOptions{
		Workloads: []string{"resnet18-train", "mobilenetv3-infer"}, Cores: []int{4, 8, 12}, Batches: []int{1, 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	cpus := []int64{1113600, 1497600, 1728000, 2201600}
	rows = slices.DeleteFunc(rows, func(r truth.Row) bool { return !slices.Contains(cpus, r.Mode.CPUKHz) })
	dir := t.TempDir()
	tab := filepath.Join(dir, "truth.csv")
	var buf bytes.Buffer
	if err := truth.Write(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tab, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := newRootCmd()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"bench", "--truth", tab, "--rates", "5", "--latency", "200ms", "--power", "20W,40W",
			"--searchers", "oracle,preset,maxn", "--parallel", "1", "--format", "csv"}, args...))
		err := cmd.ExecuteContext(t.Context())
		return errOut.String(), err
	}
	bad := filepath.Join(dir, "b.jpg")
	if _, err := run("--plot", bad); err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("--plot b.jpg: %v", err)
	}
	svg := filepath.Join(dir, "b.svg")
	if stderr, err := run("--plot", svg); err != nil {
		t.Fatalf("bench --plot: %v (%s)", err, stderr)
	}
	texts := svgTextsOf(t, svg)
	for _, want := range []string{"oracle", "preset", "maxn", "within both budgets (%)", "mean throughput / oracle (%)"} {
		if !texts[want] {
			t.Errorf("%s has no text %q", svg, want)
		}
	}
}
