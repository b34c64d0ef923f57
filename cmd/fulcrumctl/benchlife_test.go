package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// lifeTruth writes a small simulator truth (2 pairs) for the lifetime command's tests.
func lifeTruth(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "truth.csv")
	if _, _, err := simExec(context.Background(), "sim", "truth", "--board", "agx-orin-64gb", "--workloads", "resnet18-train,lstm-train,mobilenetv3-infer",
		"--cores", "4,12", "--batches", "1,4", "--out", p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Flags of the other mode, bad times and half-given changes are refused before anything
// runs, each saying what to give instead.
func TestBenchLifetimeFlagErrors(t *testing.T) {
	tp := lifeTruth(t)
	base := []string{"bench", "--truth", tp, "--rates", "10", "--latency", "200ms", "--power", "20W,30W"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--methods", "gmd"}, "add --lifetime D"},
		{[]string{"--rate-double-at", "30m"}, "add --lifetime D"},
		{[]string{"--lifetime", "1h", "--searchers", "gmd"}, "give --methods"},
		{[]string{"--lifetime", "1h", "--confidence", "0.9"}, "does not apply with --lifetime"},
		{[]string{"--lifetime", "-1h"}, "want a positive virtual time"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--rate-double-at", "1h"}, "before the end of --lifetime"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--power-drop-at", "30m"}, "needs --power-drop-to"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--power-drop-to", "15W"}, "needs --power-drop-at"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--power-drop-at", "30m", "--power-drop-to", "25W"}, "below every --power budget"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--power-drop-at", "30m", "--power-drop-to", "15000"}, "write 15W"},
		{[]string{"--lifetime", "1h", "--methods", "random-15"}, "gmd, als or preset"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--parallel", "0"}, "--parallel 0: want 1 or more"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--pairs", "x"}, "want train:infer"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--lifetime-board", "sim"}, "want truth"},
		{[]string{"--lifetime-board", "physics"}, "add --lifetime D"},
		{[]string{"--budgets-every", "10m"}, "add --lifetime D"},
		{[]string{"--lifetime", "1h", "--methods", "oracle-m3", "--budgets-every", "1h"}, "below --lifetime"},
		{[]string{"--lifetime", "1h", "--methods", "gmd-replan", "--budgets-every", "10m"}, "only a margin oracle"},
	} {
		_, _, err := simExec(context.Background(), append(base, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// The oracle's one-shot row needs no harness: its JSON is the same at --parallel 1 and 2
// and run twice, and a power drop it does not follow shows as power broken.
func TestBenchLifetimeOracleJSON(t *testing.T) {
	tp := lifeTruth(t)
	args := []string{"bench", "--truth", tp, "--lifetime", "1h", "--methods", "oracle-m3", "--rates", "10,30", "--latency", "100ms,200ms",
		"--power", "20W,40W", "--power-drop-at", "30m", "--power-drop-to", "15W", "--seed", "3", "-o", "json", "--quiet"}
	var outs []string
	for _, p := range []string{"1", "2", "2"} {
		out, _, err := simExec(context.Background(), append(args, "--parallel", p)...)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	if outs[0] != outs[1] || outs[1] != outs[2] {
		t.Fatalf("JSON differs between --parallel 1 and 2 or between runs:\n%s\n%s\n%s", outs[0], outs[1], outs[2])
	}
	var rep struct {
		Configs      int     `json:"configs"`
		ConfigsApart int     `json:"configs_apart"`
		DurationS    float64 `json:"duration_s"`
		Changes      []struct {
			AtS     float64 `json:"at_s"`
			PowerMW float64 `json:"power_mw"`
		} `json:"changes"`
		Methods []struct {
			Name           string  `json:"name"`
			Source         string  `json:"source"`
			LifetimeRatio  float64 `json:"lifetime_ratio"`
			PowerBrokenPct float64 `json:"power_broken_pct"`
			ByBudgets      []struct {
				PowerMW float64 `json:"power_mw"`
			} `json:"by_budgets"`
		} `json:"methods"`
	}
	if err := json.Unmarshal([]byte(outs[0]), &rep); err != nil {
		t.Fatalf("%v\n%s", err, outs[0])
	}
	if rep.Configs != 16 || rep.DurationS != 3600 || len(rep.Changes) != 1 || rep.Changes[0].AtS != 1800 || rep.Changes[0].PowerMW != 15000 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Methods) != 1 || rep.Methods[0].Source != "truth" || rep.Methods[0].LifetimeRatio <= 0 || rep.Methods[0].PowerBrokenPct <= 0 {
		t.Fatalf("oracle row %+v: want a positive ratio and power broken after the drop it holds through", rep.Methods)
	}
	// The human table names the change and the row.
	out, _, err := simExec(context.Background(), append(args[:len(args)-3], "--quiet")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"16 configurations (2 pairs)", "at 30m0s: power budget 15W", "oracle-m3", "truth"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Budgets moved every 20 min: the held decision breaks what the re-planning one keeps.
	out, _, err = simExec(context.Background(), "bench", "--truth", tp, "--lifetime", "1h", "--budgets-every", "20m", "--methods", "oracle-m3,oracle-m3-replan",
		"--rates", "10", "--latency", "100ms,200ms", "--power", "20W,40W", "--quiet", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Methods) != 2 || rep.Methods[1].Name != "oracle-m3-replan" || rep.Methods[1].PowerBrokenPct != 0 || rep.Methods[0].PowerBrokenPct <= 0 {
		t.Fatalf("rows %+v: want the held oracle to break the power budgets the tour lowers, the re-planning one none", rep.Methods)
	}
	if b := rep.Methods[1].ByBudgets; len(b) != 4 || b[0].PowerMW != 20000 || b[3].PowerMW != 40000 {
		t.Fatalf("by budgets %+v: want the 4 pairs of the tour, by power", b)
	}
	// The table: one row a pair of budgets, a column a method.
	out, _, err = simExec(context.Background(), "bench", "--truth", tp, "--lifetime", "1h", "--budgets-every", "20m", "--methods", "oracle-m3,oracle-m3-replan",
		"--rates", "10", "--latency", "100ms,200ms", "--power", "20W,40W", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "by budgets:") || !regexp.MustCompile(`(?m)^\s*10\s+100\s+20\s+\d+\s+[0-9.-]+\s+[0-9.-]+\s*$`).MatchString(out) {
		t.Fatalf("the table has no by-budgets rows:\n%s", out)
	}
}
