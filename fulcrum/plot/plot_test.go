package plot

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

func mode(i int) powermode.Mode {
	return powermode.Mode{Cores: 4, CPUKHz: int64(1000000 + i), GPUHz: 306000000, EMCHz: 2133000000}
}

func TestParetoFrontHandMade(t *testing.T) {
	// power mW, time ms. Front: a(10W,300) b(15W,200) d(25W,120) f(40W,100); c is beaten
	// by b (more power, more time), e by d, g duplicates f's power with more time, h is
	// beaten by a at equal time.
	pts := []Point{
		{mode(0), 300, 10000}, // a
		{mode(1), 200, 15000}, // b
		{mode(2), 250, 18000}, // c
		{mode(3), 120, 25000}, // d
		{mode(4), 130, 30000}, // e
		{mode(5), 100, 40000}, // f
		{mode(6), 110, 40000}, // g
		{mode(7), 300, 12000}, // h
	}
	got := ParetoFront(pts)
	want := []int{0, 1, 3, 5}
	if len(got) != len(want) {
		t.Fatalf("front = %v, want modes %v", got, want)
	}
	for k, i := range want {
		if got[k] != pts[i] {
			t.Errorf("front[%d] = %+v, want %+v", k, got[k], pts[i])
		}
	}
	if ParetoFront(nil) != nil {
		t.Error("front of nothing should be empty")
	}
}

// TestParetoFrontMatchesBruteForce checks the front against the definition on random
// sets, with ties in both coordinates.
func TestParetoFrontMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		n := 1 + r.IntN(60)
		pts := make([]Point, n)
		for i := range pts {
			pts[i] = Point{mode(i), float64(1 + r.IntN(20)), float64(1000 * (1 + r.IntN(20)))}
		}
		var want []Point
		for i, p := range pts {
			dominated := false
			for j, q := range pts {
				if j == i {
					continue
				}
				better := q.TimeMS <= p.TimeMS && q.PowerMW <= p.PowerMW && (q.TimeMS < p.TimeMS || q.PowerMW < p.PowerMW)
				dupEarlier := q.TimeMS == p.TimeMS && q.PowerMW == p.PowerMW && j < i
				if better || dupEarlier {
					dominated = true
					break
				}
			}
			if !dominated {
				want = append(want, p)
			}
		}
		got := ParetoFront(pts)
		byPower := func(a, b Point) int {
			if a.PowerMW != b.PowerMW {
				if a.PowerMW < b.PowerMW {
					return -1
				}
				return 1
			}
			return 0
		}
		slices.SortStableFunc(want, byPower)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: front %v, want %v", trial, got, want)
		}
	}
}

func TestProfileFigureWritesSVGAndPNG(t *testing.T) {
	pts := []Point{{mode(0), 300, 10000}, {mode(1), 200, 15000}, {mode(2), 250, 18000}, {mode(3), 100, 40000}}
	m := mode(1)
	p, res, err := ProfileFigure(pts, ProfileOptions{
		Title:         "test",
		Presets:       []Preset{{"MODE_LOW", mode(0)}, {"MODE_NOT_PROFILED", mode(99)}},
		Mark:          &m,
		BudgetPowerMW: 20000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.PresetsShown, []string{"MODE_LOW"}) || !slices.Equal(res.PresetsMissing, []string{"MODE_NOT_PROFILED"}) {
		t.Errorf("presets shown %v, missing %v", res.PresetsShown, res.PresetsMissing)
	}
	if len(res.Front) != 3 {
		t.Errorf("front %v: want 3 points", res.Front)
	}
	dir := t.TempDir()
	svg := filepath.Join(dir, "f.svg")
	if err := Save(p, svg); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, svg)
	for _, want := range []string{"MODE_LOW", "minibatch time (ms)", "mean board power (W)", "power budget 20 W", "chosen " + m.String()} {
		if !slices.Contains(texts, want) {
			t.Errorf("SVG has no text %q; texts: %q", want, texts)
		}
	}
	if slices.Contains(texts, "MODE_NOT_PROFILED") {
		t.Error("an unprofiled preset is labelled")
	}
	pngPath := filepath.Join(dir, "f.png")
	if err := Save(p, pngPath); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, pngPath)
}

func TestProfileFigureRejects(t *testing.T) {
	pts := []Point{{mode(0), 300, 10000}}
	other := mode(5)
	for name, tc := range map[string]struct {
		pts  []Point
		opt  ProfileOptions
		want string
	}{
		"empty":        {nil, ProfileOptions{}, "no profiles"},
		"zero power":   {[]Point{{mode(0), 300, 0}}, ProfileOptions{}, "above zero"},
		"mark missing": {pts, ProfileOptions{Mark: &other}, "not profiled"},
	} {
		if _, _, err := ProfileFigure(tc.pts, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

func TestSaveRefusesUnknownTypeAndWritesNothing(t *testing.T) {
	p, _, err := ProfileFigure([]Point{{mode(0), 300, 10000}}, ProfileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Save(p, filepath.Join(dir, "f.jpg")); err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("Save .jpg: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left files behind: %v", ents)
	}
}

func TestPlotBenchSummary(t *testing.T) {
	rep := &bench.BenchReport{ConfigsTotal: 90, Pairs: 1, Noise: 0.03, Searchers: []bench.SearcherStats{
		{Name: "oracle", WithinBudgetPct: 100, MeanOptRatio: 1, MeanProfiles: 3828},
		{Name: "gmd", WithinBudgetPct: 98.5, MeanOptRatio: 0.95, MeanProfiles: 14.2},
		{Name: "preset", WithinBudgetPct: 80, MeanOptRatio: 0.6, MeanProfiles: 4},
	}}
	dir := t.TempDir()
	svg := filepath.Join(dir, "b.svg")
	if err := PlotBenchSummary(rep, svg); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, svg)
	for _, want := range []string{"gmd", "14.2 profiles", "within both budgets (%)", "mean throughput / oracle (%)"} {
		if !slices.Contains(texts, want) {
			t.Errorf("SVG has no text %q; texts: %q", want, texts)
		}
	}
	pngPath := filepath.Join(dir, "b.png")
	if err := PlotBenchSummary(rep, pngPath); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, pngPath)
	if err := PlotBenchSummary(&bench.BenchReport{}, pngPath); err == nil {
		t.Error("a report with no searchers was plotted")
	}
}

// svgTexts parses the file as XML (failing the test if it is not) and returns the
// contents of its <text> elements.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	var inText bool
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not valid XML: %v", path, err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			inText = el.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(el))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", path, root)
	}
	return texts
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 300 {
		t.Errorf("%s is %v: too small to read", path, b)
	}
}

func TestProfileFigureLogTimeAxis(t *testing.T) {
	for name, tc := range map[string]struct {
		slowMS float64
		want   string
	}{
		"4x span: linear": {400, "minibatch time (ms)"},
		"20x span: log":   {2000, "minibatch time (ms, log scale)"},
	} {
		pts := []Point{{mode(0), tc.slowMS, 8000}, {mode(1), 100, 20000}, {mode(2), 150, 15000}}
		p, _, err := ProfileFigure(pts, ProfileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "f.svg")
		if err := Save(p, path); err != nil {
			t.Fatal(err)
		}
		if texts := svgTexts(t, path); !slices.Contains(texts, tc.want) {
			t.Errorf("%s: no axis label %q in %q", name, tc.want, texts)
		}
	}
}
