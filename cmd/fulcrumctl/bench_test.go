package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
)

func TestParseBudgetFlags(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{"15", 15000, ""}, {"15W", 15000, ""}, {"15.5w", 15500, ""}, {"15000mW", 15000, ""},
		{"15000", 0, "write 15W"}, {"-3W", 0, "want watts"}, {"x", 0, "want watts"}, {"0", 0, "want watts"},
	} {
		got, err := parsePowerMW(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("power %q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("power %q = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{"100ms", 100, ""}, {"0.2s", 200, ""}, {"1m", 60000, ""},
		{"100", 0, "no unit"}, {"-5ms", 0, "positive duration"}, {"fast", 0, "positive duration"},
	} {
		got, err := parseLatencyMS(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("latency %q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("latency %q = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestBenchCommandOnSimulatorTruth(t *testing.T) {
	ctx := context.Background()
	csvPath := filepath.Join(t.TempDir(), "truth.csv")
	if _, _, err := simExec(ctx, "sim", "truth", "--board", "agx-orin-64gb", "--workloads", "resnet18-train,lstm-train,mobilenetv3-infer",
		"--cores", "4,12", "--batches", "1,4", "--out", csvPath); err != nil {
		t.Fatal(err)
	}
	args := []string{"bench", "--truth", csvPath, "--rates", "10,30", "--latency", "100ms,0.2s", "--power", "20W,40",
		"--searchers", "oracle,gmd,preset,maxn,random-5", "--parallel", "2", "--seed", "7"}
	out, _, err := simExec(ctx, append(args, "--json")...) // --json is --format json, as everywhere
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		ConfigsTotal            int `json:"configs_total"`
		ConfigsOracleInfeasible int `json:"configs_oracle_infeasible"`
		Searchers               []struct {
			Name            string   `json:"name"`
			WithinBudgetPct float64  `json:"within_budget_pct"`
			ViolationPct    float64  `json:"violation_pct"`
			NoAnswerPct     float64  `json:"no_answer_pct"`
			MeanOptRatio    float64  `json:"mean_opt_ratio"`
			P5OptRatio      *float64 `json:"p5_opt_ratio"`
			MeanProfiles    float64  `json:"mean_profiles"`
			MaxProfiles     int      `json:"max_profiles"`
			WallS           *float64 `json:"wall_s"`
		} `json:"searchers"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, out)
	}
	// 2 pairs × 2 rates × 2 latencies × 2 powers.
	if rep.ConfigsTotal != 16 || len(rep.Searchers) != 5 {
		t.Fatalf("configs %d, searchers %d; want 16 and 5", rep.ConfigsTotal, len(rep.Searchers))
	}
	for _, s := range rep.Searchers {
		if s.P5OptRatio == nil || s.WallS == nil {
			t.Errorf("%s: missing p5_opt_ratio or wall_s", s.Name)
		}
		if rep.ConfigsOracleInfeasible < rep.ConfigsTotal {
			if sum := s.WithinBudgetPct + s.ViolationPct + s.NoAnswerPct; sum < 99.999 || sum > 100.001 {
				t.Errorf("%s: percentages sum to %v", s.Name, sum)
			}
		}
		switch s.Name {
		case "maxn":
			if s.MaxProfiles != 1 {
				t.Errorf("maxn profiled %d modes", s.MaxProfiles)
			}
		case "random-5":
			if s.MaxProfiles != 5 || s.MeanProfiles != 5 {
				t.Errorf("random-5 profiled mean %v max %d", s.MeanProfiles, s.MaxProfiles)
			}
		case "gmd":
			if s.MaxProfiles > 15 {
				t.Errorf("gmd profiled %d modes, over its budget of 15", s.MaxProfiles)
			}
		}
	}
	// CSV and table carry the same rows.
	out, _, err = simExec(ctx, append(args, "--format", "csv")...)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) != 6 || recs[0][0] != "name" || recs[2][0] != "gmd" {
		t.Errorf("csv: %v %q", err, out)
	}
	out, _, err = simExec(ctx, append(args, "--format", "table")...)
	if err != nil || !strings.Contains(out, "16 configurations") || !strings.Contains(out, "random-5") {
		t.Errorf("table: %v %q", err, out)
	}
}

func TestBenchCommandRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "--truth is required"},
		{[]string{"bench", "--truth", "x.csv", "--latency", "100"}, "no unit"},
		{[]string{"bench", "--truth", "x.csv", "--power", "30000"}, "write 30W"},
		{[]string{"bench", "--truth", "x.csv", "--searchers", "gmd,nope"}, "unknown searcher"},
		{[]string{"bench", "--truth", "x.csv", "--format", "xml"}, "table, json or csv"},
		{[]string{"bench", "--truth", "x.csv", "--pairs", "onlyone"}, "train:infer"},
		{[]string{"bench", "--truth", "x.csv", "--board", "nano-9000"}, "unknown board"},
		{[]string{"bench", "--truth", filepath.Join(t.TempDir(), "missing.csv")}, "--truth"},
		{[]string{"bench", "--truth", "x.csv", "--confidence", "1"}, "--confidence"},
		{[]string{"bench", "--truth", "x.csv", "--dev-k", "-1"}, "--dev-k"},
		{[]string{"bench", "--truth", "x.csv", "--admission-margin", "-5ms"}, "--admission-margin"},
		{[]string{"bench", "--truth", "x.csv", "--decision-noise", "2"}, "--decision-noise"},
	} {
		_, _, err := simExec(ctx, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// bench decides with fulcrumd's defaults: its flags' defaults give the rules a daemon
// with its default options plans with (noise: the daemon's noise_rel, as --noise's
// default).
func TestBenchRulesAreTheDaemonDefaults(t *testing.T) {
	f := newBenchCmd().Flags()
	get := func(name string) string { return f.Lookup(name).DefValue }
	conf, _ := strconv.ParseFloat(get("confidence"), 64)
	devK, _ := strconv.ParseFloat(get("dev-k"), 64)
	noise, _ := strconv.ParseFloat(get("noise"), 64)
	margin, err := time.ParseDuration(get("admission-margin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := benchRules(noise, -1, conf, margin, devK)
	if err != nil {
		t.Fatal(err)
	}
	o := daemon.DefaultOptions()
	if want := control.DecisionRules(o.Control, o.Server.Sched); got != want {
		t.Errorf("bench decides with %+v by default, fulcrumd with %+v", got, want)
	}
}

// Progress lines start once the run is longer than the threshold, come at most once a
// second, and estimate the time left from the rate so far.
func TestBenchProgress(t *testing.T) {
	var out strings.Builder
	now := time.Unix(0, 0)
	p := newProgress(&out, func() time.Time { return now }, 3*time.Second)
	now = now.Add(time.Second)
	p(10, 100) // too early
	now = now.Add(3 * time.Second)
	p(40, 100) // 4 s for 40: about 6 s left
	now = now.Add(500 * time.Millisecond)
	p(45, 100) // within the second: quiet
	now = now.Add(time.Second)
	p(100, 100)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "40/100") || !strings.Contains(lines[0], "about 6s left") || !strings.Contains(lines[1], "100/100") {
		t.Errorf("progress:\n%s", out.String())
	}
}

// --streams 2: a trainer with two inference streams, the baselines and the oracle.
func TestBenchStreams(t *testing.T) {
	ctx := context.Background()
	csvPath := filepath.Join(t.TempDir(), "truth.csv")
	if _, _, err := simExec(ctx, "sim", "truth", "--board", "agx-orin-64gb", "--workloads", "resnet18-train,mobilenetv3-infer,resnet50-infer",
		"--cores", "4,12", "--batches", "1,4", "--out", csvPath); err != nil {
		t.Fatal(err)
	}
	args := []string{"bench", "--truth", csvPath, "--streams", "2", "--rates", "5,10", "--latency", "200ms,400ms", "--power", "20W,40W", "--parallel", "2", "--quiet"}
	out, _, err := simExec(ctx, append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		ConfigsTotal int `json:"configs_total"`
		Pairs        int `json:"pairs"`
		Streams      int `json:"streams"`
		Searchers    []struct {
			Name string `json:"name"`
		} `json:"searchers"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json output: %v\n%s", err, out)
	}
	var names []string
	for _, s := range rep.Searchers {
		names = append(names, s.Name)
	}
	if rep.Streams != 2 || rep.Pairs != 1 || rep.ConfigsTotal != 8 || strings.Join(names, ",") != "oracle,gmd,preset,maxn,random-15" {
		t.Fatalf("streams %d, sets %d, configs %d, searchers %v; want 2, 1, 8 and the default baselines", rep.Streams, rep.Pairs, rep.ConfigsTotal, names)
	}
	out, _, err = simExec(ctx, args...)
	if err != nil || !strings.Contains(out, "1 sets of a trainer and 2 inference streams") {
		t.Errorf("table: %v %q", err, out)
	}
	// The truth has micro-batch rows (sim truth's default): --micro (the default) scores
	// them with several streams too, --micro=false does not (issue 32).
	if !strings.Contains(out, "training micro-batches on") {
		t.Errorf("table with --micro: %q: want training micro-batches on", out)
	}
	if out, _, err := simExec(ctx, append(slices.Clone(args), "--micro=false")...); err != nil || !strings.Contains(out, "whole minibatches only (k = 1)") {
		t.Errorf("table with --micro=false: %v %q", err, out)
	}
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--streams", "0"}, "--streams 0"},
		{[]string{"--pairs", "resnet18-train:resnet50-infer"}, "--pairs and --streams"},
		{[]string{"--searchers", "nope"}, "nope"},
		{[]string{"--streams", "3"}, "3 streams but the ground truth has 2 inference workloads"},
	} {
		if _, _, err := simExec(ctx, append(slices.Clone(args), tc.extra...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.extra, err, tc.want)
		}
	}
}
