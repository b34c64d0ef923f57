package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// simExec runs fulcrumctl in-process with args and returns stdout, stderr and the error.
func simExec(ctx context.Context, args ...string) (string, string, error) {
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

func TestSimTruthWritesReadableTable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "truth.csv")
	_, stderr, err := simExec(context.Background(), "sim", "truth", "--board", "agx-orin-64gb",
		"--workloads", "resnet18-train,mobilenetv3-infer", "--cores", "4,8,12", "--batches", "1,4", "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := truth.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	modes := 3 * 29 * 11 * 4
	if got, want := len(tab.Rows), modes*(1+3+2); got != want {
		t.Errorf("%d rows, want %d (%d modes x (1 train + 3 micro-batches + 2 infer batches))", got, want, modes)
	}
	if mb := tab.MicroBatches("resnet18-train", 32); len(mb) != 3 || mb[0] != 4 || mb[2] != 16 {
		t.Errorf("micro-batches %v, want [4 8 16] (--micro-splits 2,4,8 by default)", mb)
	}
	// --micro-splits none writes the table of before: no micro-batch rows, no column.
	old := filepath.Join(t.TempDir(), "old.csv")
	if _, _, err := simExec(context.Background(), "sim", "truth", "--board", "agx-orin-64gb",
		"--workloads", "resnet18-train,mobilenetv3-infer", "--cores", "4", "--batches", "1", "--micro-splits", "none", "--out", old); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(old); strings.Contains(string(b), "micro_batch") || strings.Count(string(b), "\n") != 1+29*11*4*2 {
		t.Errorf("--micro-splits none: %d lines, micro_batch column %v", strings.Count(string(b), "\n"), strings.Contains(string(b), "micro_batch"))
	}
	if got := len(tab.Modes()); got != modes {
		t.Errorf("%d distinct modes, want %d", got, modes)
	}
	if b := tab.Batches("resnet18-train", truth.Train); len(b) != 1 || b[0] != 32 {
		t.Errorf("training batches %v, want [32]", b)
	}
	if b := tab.Batches("mobilenetv3-infer", truth.Infer); len(b) != 2 || b[0] != 1 || b[1] != 4 {
		t.Errorf("inference batches %v, want [1 4]", b)
	}
	if !strings.Contains(stderr, "wrote") {
		t.Errorf("no summary on stderr: %q", stderr)
	}

	// Noise-free output is deterministic; --noise changes values but not the rows.
	again := filepath.Join(t.TempDir(), "again.csv")
	noisy := filepath.Join(t.TempDir(), "noisy.csv")
	args := []string{"sim", "truth", "--board", "agx-orin-64gb", "--workloads", "lstm-train", "--cores", "2"}
	for _, a := range [][]string{append(args, "--out", out), append(args, "--out", again), append(args, "--out", noisy, "--noise", "0.03", "--seed", "9")} {
		if _, _, err := simExec(context.Background(), a...); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	n, _ := os.ReadFile(noisy)
	if !bytes.Equal(a, b) {
		t.Error("two noise-free runs differ")
	}
	if bytes.Equal(a, n) || strings.Count(string(a), "\n") != strings.Count(string(n), "\n") {
		t.Error("--noise 0.03 should change the values and keep the rows")
	}
}

func TestSimTruthDefaults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "all.csv")
	if _, _, err := simExec(context.Background(), "sim", "truth", "--board", "agx-orin-64gb", "--workloads", "lstm-train,bert-base-infer", "--out", out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := truth.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := simLoadModels("")
	if err != nil {
		t.Fatal(err)
	}
	// lstm-train's minibatch of 20 splits into micro-batches of 10 and 5 (k = 2, 4).
	perMode := len(ws["lstm-train"].BatchSizes()) + 2 + len(ws["bert-base-infer"].BatchSizes())
	modes := 6 * 29 * 11 * 4 // cores 2,4,…,12
	if perMode != 9 || len(tab.Rows) != modes*perMode {
		t.Errorf("%d rows, want %d", len(tab.Rows), modes*perMode)
	}
}

func TestSimTruthRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"sim", "truth", "--board", "agx-orin-64gb"},                                                                    // no --out
		{"sim", "truth", "--board", "nope", "--out", filepath.Join(dir, "x.csv")},                                       // unknown board
		{"sim", "truth", "--board", "agx-orin-64gb", "--workloads", "gpt5-train", "--out", filepath.Join(dir, "x.csv")}, // unknown workload
		{"sim", "truth", "--board", "agx-orin-64gb", "--cores", "64", "--out", filepath.Join(dir, "x.csv")},             // no core level fits
		{"sim", "truth", "--board", "agx-orin-64gb", "--noise", "loud", "--out", filepath.Join(dir, "x.csv")},           // bad noise
	} {
		if _, _, err := simExec(context.Background(), args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed runs left files: %v", entries)
	}
}

func TestSimBoardRunsUntilCancelled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orin")
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := simExec(ctx, "sim", "board", "--dir", dir, "--board", "agx-orin-64gb", "--interval", "5ms")
		done <- result{out, err}
	}()
	// Wait for the loop to own the tree (the marker carries its pid), then stop it the
	// way SIGINT does: by cancelling the command's context.
	deadline := time.Now().Add(20 * time.Second)
	for {
		raw, _ := os.ReadFile(filepath.Join(dir, sim.MarkerPath))
		if strings.Contains(string(raw), `"pid":`) && !strings.Contains(string(raw), `"pid":0`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sim board never started its loop")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("sim board: %v", r.err)
	}
	if !strings.Contains(r.out, "--root "+dir) {
		t.Errorf("output does not say how to point commands at the tree:\n%s", r.out)
	}
	// A second start on the same stopped tree is fine; a foreign non-empty dir is not.
	foreign := t.TempDir()
	os.WriteFile(filepath.Join(foreign, "keep"), []byte("x"), 0o644)
	if _, _, err := simExec(context.Background(), "sim", "board", "--dir", foreign, "--board", "agx-orin-64gb"); err == nil {
		t.Error("sim board over a foreign non-empty directory: want an error")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, _, err := simExec(ctx2, "sim", "board", "--dir", dir, "--board", "agx-orin-64gb"); err != nil {
		t.Errorf("restart on a stopped tree of the same board: %v", err)
	}
}

// sim board --heat: the trip point asked for is written into the tree, and past it the
// simulated firmware caps the clocks (the throttle state the runners read goes up);
// bad heat flags are refused.
func TestSimBoardHeat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orin")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var out string
	go func() {
		o, _, err := simExec(ctx, "sim", "board", "--dir", dir, "--board", "agx-orin-64gb", "--interval", "5ms",
			"--heat", "--trip-c", "40", "--thermal-tau", "100ms")
		out = o
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, _ := os.ReadFile(filepath.Join(dir, sim.ThrottlePath))
		if s := strings.TrimSpace(string(raw)); s != "" && s != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the simulated firmware never capped the clocks of a board past a 40 °C trip point")
		}
		time.Sleep(10 * time.Millisecond)
	}
	trip, err := os.ReadFile(filepath.Join(dir, "/sys/devices/virtual/thermal/thermal_zone0/trip_point_0_temp"))
	if err != nil || strings.TrimSpace(string(trip)) != "40000" {
		t.Errorf("trip point = %q, %v: want the 40 °C asked for", trip, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sim board --heat: %v", err)
	}
	if !strings.Contains(out, "heat on") {
		t.Errorf("output does not say heat is on:\n%s", out)
	}
	for _, bad := range [][]string{{"--c-per-w", "-1"}, {"--trip-c", "-5"}, {"--thermal-tau", "0s"}} {
		args := append([]string{"sim", "board", "--dir", filepath.Join(t.TempDir(), "x"), "--board", "agx-orin-64gb", "--heat"}, bad...)
		if _, _, err := simExec(context.Background(), args...); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}
