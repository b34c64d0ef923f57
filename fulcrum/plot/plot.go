// Package plot draws Fulcrum's profile and benchmark figures with gonum/plot: the
// minibatch time / board power trade-off of the profiled modes with its Pareto front,
// and a per-searcher summary of a benchmark. Images are SVG or PNG, chosen by the file
// name's extension.
package plot

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Image size. 16 cm × 11 cm keeps a PNG of a few hundred points well under 200 KB while
// the labels stay readable.
const (
	width  = 16 * vg.Centimeter
	height = 11 * vg.Centimeter
)

// Colours (Okabe–Ito, readable by colour-blind people).
var (
	colProfiled = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
	colFront    = color.RGBA{R: 0x00, G: 0x72, B: 0xb2, A: 0xff}
	colPreset   = color.RGBA{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff}
	colMark     = color.RGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff}
	colBudget   = color.RGBA{R: 0xcc, G: 0x79, B: 0xa7, A: 0xff}
	colGreen    = color.RGBA{R: 0x00, G: 0x9e, B: 0x73, A: 0xff}
)

// Point is one profiled mode: its mean minibatch time and mean board power.
type Point struct {
	Mode    powermode.Mode
	TimeMS  float64
	PowerMW float64
}

// Preset is a named mode to mark, e.g. an nvpmodel preset.
type Preset struct {
	Name string
	Mode powermode.Mode
}

// ProfileOptions say what to draw besides the profiled modes.
type ProfileOptions struct {
	Title string
	// Presets are marked and labelled where they were profiled; the others are skipped
	// (see ProfileFigure's result).
	Presets []Preset
	// Mark, if set, is a chosen mode to highlight; it must be among the points.
	Mark *powermode.Mode
	// BudgetPowerMW, if above zero, draws the power budget as a vertical line.
	BudgetPowerMW float64
}

// ParetoFront returns the points no other point beats in both time and power (less or
// equal in both, less in one), sorted by power ascending — the lower-left frontier.
func ParetoFront(pts []Point) []Point {
	x := make([]float64, len(pts))
	y := make([]float64, len(pts))
	for i, p := range pts {
		x[i], y[i] = p.PowerMW, p.TimeMS
	}
	var out []Point
	for _, i := range plan.ParetoFront(x, y) {
		out = append(out, pts[i])
	}
	slices.SortFunc(out, func(a, b Point) int {
		return cmp.Or(cmp.Compare(a.PowerMW, b.PowerMW), cmp.Compare(a.TimeMS, b.TimeMS))
	})
	return out
}

// ProfileResult reports what a profile figure shows, so a caller can tell the user.
type ProfileResult struct {
	Front          []Point
	PresetsShown   []string // presets that were profiled, hence marked
	PresetsMissing []string // presets not among the points
}

// ProfileFigure draws minibatch time (ms, y) against mean board power (W, x) for the
// points, the Pareto front as a line, the profiled presets, the marked mode and the
// power budget.
func ProfileFigure(pts []Point, opt ProfileOptions) (*gplot.Plot, ProfileResult, error) {
	var res ProfileResult
	if len(pts) == 0 {
		return nil, res, errors.New("no profiles to plot: profile some modes first (fulcrumctl profile run) or check --workload/--role/--batch/--board")
	}
	byMode := map[powermode.Mode]Point{}
	for _, p := range pts {
		if !(p.TimeMS > 0) || !(p.PowerMW > 0) || math.IsInf(p.TimeMS, 0) || math.IsInf(p.PowerMW, 0) {
			return nil, res, fmt.Errorf("mode %s: time %v ms, power %v mW: want finite values above zero (run fulcrumctl profile check)", p.Mode, p.TimeMS, p.PowerMW)
		}
		byMode[p.Mode] = p
	}
	p := gplot.New()
	p.Title.Text = opt.Title
	p.X.Label.Text = "mean board power (W)"
	p.Y.Label.Text = "minibatch time (ms)"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.ThumbnailWidth = 0.6 * vg.Centimeter

	all, err := plotter.NewScatter(toXYs(pts))
	if err != nil {
		return nil, res, fmt.Errorf("plot: %w", err)
	}
	all.GlyphStyle = draw.GlyphStyle{Color: colProfiled, Radius: vg.Points(2), Shape: draw.CircleGlyph{}}
	p.Add(all)
	p.Legend.Add(fmt.Sprintf("profiled modes (%d)", len(pts)), all)

	res.Front = ParetoFront(pts)
	line, points, err := plotter.NewLinePoints(toXYs(res.Front))
	if err != nil {
		return nil, res, fmt.Errorf("plot: %w", err)
	}
	line.Color = colFront
	line.Width = vg.Points(1.5)
	line.StepStyle = plotter.NoStep
	points.GlyphStyle = draw.GlyphStyle{Color: colFront, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
	p.Add(line, points)
	p.Legend.Add(fmt.Sprintf("Pareto front (%d)", len(res.Front)), line, points)

	var presetPts []Point
	var presetNames []string
	for _, pr := range opt.Presets {
		if q, ok := byMode[pr.Mode]; ok {
			presetPts = append(presetPts, q)
			presetNames = append(presetNames, pr.Name)
			res.PresetsShown = append(res.PresetsShown, pr.Name)
		} else {
			res.PresetsMissing = append(res.PresetsMissing, pr.Name)
		}
	}
	if len(presetPts) > 0 {
		sc, err := plotter.NewScatter(toXYs(presetPts))
		if err != nil {
			return nil, res, fmt.Errorf("plot: %w", err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: colPreset, Radius: vg.Points(4.5), Shape: draw.BoxGlyph{}}
		p.Add(sc)
		p.Legend.Add("nvpmodel presets", sc)
		if err := addPresetLabels(p, pts, presetPts, presetNames); err != nil {
			return nil, res, err
		}
	}

	if opt.Mark != nil {
		q, ok := byMode[*opt.Mark]
		if !ok {
			return nil, res, fmt.Errorf("--mark %s: this mode was not profiled for the selected workload, role and batch (list them with fulcrumctl profile ls)", *opt.Mark)
		}
		sc, err := plotter.NewScatter(toXYs([]Point{q}))
		if err != nil {
			return nil, res, fmt.Errorf("plot: %w", err)
		}
		// A ring, drawn last and larger than a preset's box, so a chosen preset stays
		// visible under it.
		sc.GlyphStyle = draw.GlyphStyle{Color: colMark, Radius: vg.Points(7), Shape: thickRing{}}
		p.Add(sc)
		p.Legend.Add("chosen "+q.Mode.String(), sc)
	}

	// Room for the preset labels right of their markers and for the legend on top.
	xlo, xhi := minMax(pts, func(p Point) float64 { return p.PowerMW / 1000 })
	if opt.BudgetPowerMW > 0 {
		xlo, xhi = min(xlo, opt.BudgetPowerMW/1000), max(xhi, opt.BudgetPowerMW/1000)
	}
	ylo, yhi := minMax(pts, func(p Point) float64 { return p.TimeMS })
	p.X.Min, p.X.Max = max(0, xlo-0.03*(xhi-xlo)), xhi+0.15*(xhi-xlo)
	if logTime(pts) {
		// Times spanning more than 8× (inference at low clocks) squash the fast modes,
		// where the front lies, into a line at the bottom on a linear axis.
		p.Y.Scale = gplot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Label.Text = "minibatch time (ms, log scale)"
		p.Y.Min, p.Y.Max = ylo/1.1, yhi*math.Pow(yhi/ylo, 0.3)
	} else {
		p.Y.Min, p.Y.Max = max(0, ylo-0.05*(yhi-ylo)), yhi+0.30*(yhi-ylo)
		p.Y.Tick.Marker = niceTicks{}
	}
	p.X.Tick.Marker = niceTicks{}
	if opt.BudgetPowerMW > 0 {
		w := opt.BudgetPowerMW / 1000
		l, err := plotter.NewLine(plotter.XYs{{X: w, Y: p.Y.Min}, {X: w, Y: p.Y.Max}})
		if err != nil {
			return nil, res, fmt.Errorf("plot: %w", err)
		}
		l.Color = colBudget
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("power budget %.4g W", w), l)
	}
	return p, res, nil
}

func logTime(pts []Point) bool {
	lo, hi := minMax(pts, func(p Point) float64 { return p.TimeMS })
	return hi/lo > 8
}

// addPresetLabels writes each preset's name right of its marker, moving a label below
// its marker when it would otherwise overlap the one placed before it (presets often
// sit close together, e.g. MODE_30W and MODE_50W at low inference power).
func addPresetLabels(p *gplot.Plot, all, presets []Point, names []string) error {
	xlo, xhi := minMax(all, func(p Point) float64 { return p.PowerMW })
	ylo, yhi := minMax(all, func(p Point) float64 { return p.TimeMS })
	norm := func(q Point) (float64, float64) {
		x := (q.PowerMW - xlo) / max(xhi-xlo, 1e-9)
		if logTime(all) {
			return x, math.Log(q.TimeMS/ylo) / max(math.Log(yhi/ylo), 1e-9)
		}
		return x, (q.TimeMS - ylo) / max(yhi-ylo, 1e-9)
	}
	order := make([]int, len(presets))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(presets[a].PowerMW, presets[b].PowerMW) })
	type placed struct{ x, y, dy float64 }
	var done []placed
	for _, i := range order {
		x, y := norm(presets[i])
		dy := 2.0 // points above the marker's centre
		for _, d := range done {
			// A label is ~0.15 of the width long and ~0.05 of the height tall.
			if math.Abs(x-d.x) < 0.15 && math.Abs(y-d.y) < 0.08 && d.dy == dy {
				dy = -12
			}
		}
		done = append(done, placed{x, y, dy})
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: toXYs(presets[i : i+1]), Labels: names[i : i+1]})
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(dy)}
		l.TextStyle[0].Font.Size = vg.Points(9)
		p.Add(l)
	}
	return nil
}

// logTicks labels 1, 2 and 5 × 10^k on a log axis (gonum's LogTicks labels only powers
// of ten: one or two labels over a typical 10–200 ms range).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []gplot.Tick {
	var ts []gplot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := gplot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// thickRing is a ring glyph with a 2-point line, visible over other markers.
type thickRing struct{}

func (thickRing) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(2)})
	var path vg.Path
	path.Move(vg.Point{X: pt.X + sty.Radius, Y: pt.Y})
	path.Arc(pt, sty.Radius, 0, 2*math.Pi)
	path.Close()
	c.Stroke(path)
}

// niceTicks labels every 1, 2 or 5 × 10^k so that there are 5 to 10 labelled ticks
// (gonum's default often labels only three, too few to read a power off the plot).
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(hi > lo) {
		return gplot.DefaultTicks{}.Ticks(lo, hi)
	}
	step := math.Pow(10, math.Floor(math.Log10(hi-lo)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1} {
		if (hi-lo)/(step*m) <= 10 {
			step *= m
			break
		}
	}
	var ts []gplot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		v = math.Round(v/step) * step
		ts = append(ts, gplot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		for k := 1; k < 5; k++ { // unlabelled minor ticks
			if m := v + float64(k)*step/5; m <= hi {
				ts = append(ts, gplot.Tick{Value: m})
			}
		}
	}
	return ts
}

func toXYs(pts []Point) plotter.XYs {
	xy := make(plotter.XYs, len(pts))
	for i, p := range pts {
		xy[i].X, xy[i].Y = p.PowerMW/1000, p.TimeMS
	}
	return xy
}

func minMax(pts []Point, f func(Point) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		lo, hi = min(lo, f(p)), max(hi, f(p))
	}
	return lo, hi
}

// BenchFigure draws, per searcher, grouped bars of the share of configurations within
// both budgets (%) and the mean ratio to the oracle's throughput (%), with the mean
// number of profiled modes in the searcher's axis label.
func BenchFigure(r *bench.BenchReport) (*gplot.Plot, error) {
	if r == nil || len(r.Searchers) == 0 {
		return nil, errors.New("bench summary plot: the report has no searchers")
	}
	n := len(r.Searchers)
	within := make(plotter.Values, n)
	ratio := make(plotter.Values, n)
	names := make([]string, n)
	for i, s := range r.Searchers {
		within[i] = s.WithinBudgetPct
		ratio[i] = 100 * s.MeanOptRatio
		prof := strconv.FormatFloat(s.MeanProfiles, 'f', 1, 64)
		if s.MeanProfiles >= 100 {
			prof = strconv.FormatFloat(s.MeanProfiles, 'f', 0, 64)
		}
		names[i] = s.Name + "\n" + prof + " profiles"
	}
	p := gplot.New()
	p.Title.Text = fmt.Sprintf("benchmark: %d configurations (%d the oracle cannot satisfy), %d pair(s), noise %.3g",
		r.ConfigsTotal, r.ConfigsOracleInfeasible, r.Pairs, r.Noise)
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.Text = "percent of satisfiable configurations (%)"
	// Headroom above 100 % for the legend, so it never covers a bar.
	p.Y.Min, p.Y.Max = 0, 128
	p.Y.Tick.Marker = gplot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 20, Label: "20"}, {Value: 40, Label: "40"},
		{Value: 60, Label: "60"}, {Value: 80, Label: "80"}, {Value: 100, Label: "100"}}
	p.X.Min, p.X.Max = -0.6, float64(n)-0.4
	p.Add(plotter.NewGrid())
	barW := vg.Points(min(18, 300/float64(n)))
	b1, err := plotter.NewBarChart(within, barW)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	b1.Color, b1.LineStyle.Width, b1.Offset = colFront, 0, -barW/2
	b2, err := plotter.NewBarChart(ratio, barW)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	b2.Color, b2.LineStyle.Width, b2.Offset = colGreen, 0, barW/2
	p.Add(b1, b2)
	// The values over the bars: a reader compares 97 with 99, not bar heights.
	for k, vs := range []plotter.Values{within, ratio} {
		xys := make(plotter.XYs, n)
		lbls := make([]string, n)
		for i, v := range vs {
			xys[i] = plotter.XY{X: float64(i), Y: v}
			lbls[i] = strconv.FormatFloat(v, 'f', 1, 64)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: lbls})
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Font.Size = vg.Points(7)
			l.TextStyle[i].XAlign = draw.XCenter
		}
		l.Offset = vg.Point{X: barW * vg.Length(2*k-1) / 2, Y: vg.Points(2)}
		p.Add(l)
	}
	p.Legend.Add("within both budgets (%)", b1)
	p.Legend.Add("mean throughput / oracle (%)", b2)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	p.NominalX(names...)
	p.X.Tick.Label.Font.Size = vg.Points(8)
	return p, nil
}

// Save writes the figure to path as SVG or PNG (by extension), through a temporary
// file and a rename so a reader never sees half an image.
func Save(p *gplot.Plot, path string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format != "svg" && format != "png" {
		return fmt.Errorf("%s: unknown image type %q: name the file .svg or .png", path, filepath.Ext(path))
	}
	var wt io.WriterTo
	if format == "png" {
		// 144 dpi: sharp text on a laptop screen, still a small file.
		c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(144))
		p.Draw(draw.New(c))
		wt = vgimg.PngCanvas{Canvas: c}
	} else {
		var err error
		if wt, err = p.WriterTo(width, height, format); err != nil {
			return fmt.Errorf("render %s: %w", path, err)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w (is the folder there and writable?)", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename this fails harmlessly
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// PlotBenchSummary draws BenchFigure for the report into path (.svg or .png).
func PlotBenchSummary(r *bench.BenchReport, path string) error {
	p, err := BenchFigure(r)
	if err != nil {
		return err
	}
	return Save(p, path)
}
