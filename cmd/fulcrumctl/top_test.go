package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

var updateTop = flag.Bool("update", false, "rewrite testdata/top.golden from the current rendering")

func readStrict(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// One frame of fulcrumctl top from a fixed status and event list: per-stream p99
// against budget, power against budget, training, mode, GPU load, temperatures against
// their trip points with the throttling, and the recent events, every name from a
// worker or the board escaped (the testdata has names carrying terminal escapes).
func TestTopFrameGolden(t *testing.T) {
	var st api.Status
	readStrict(t, "testdata/top_status.json", &st)
	var evs api.EventsResponse
	readStrict(t, "testdata/top_events.json", &evs)
	var b bytes.Buffer
	now := time.Date(2026, 11, 25, 9, 30, 0, 0, time.UTC)
	renderTop(&b, st, lastEvents(evs.Events, 3), now, 110, time.UTC)
	got := b.String()
	if strings.ContainsAny(got, "\x1b\x07") {
		t.Errorf("the frame carries a raw terminal control character:\n%q", got)
	}
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if n := len([]rune(l)); n > 110 {
			t.Errorf("line of %d columns over the 110 asked: %q", n, l)
		}
	}
	const golden = "testdata/top.golden"
	if *updateTop {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/fulcrumctl -run TestTopFrameGolden -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("the top frame changed; if intended, run go test ./cmd/fulcrumctl -run TestTopFrameGolden -update\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// top over a real control socket: plain frames (no terminal escapes) when stdout is
// not a terminal, clear-and-home frames on one.
func TestTopPlainAndTerminal(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	withMeasurements(fake)
	sock := apitest.Serve(t, allowAll, fake)
	out := mustRun(t, "top", "--socket", sock, "--count", "2", "--interval", "100ms")
	if strings.Contains(out, "\x1b[") {
		t.Fatal("top wrote terminal escapes to a non-terminal")
	}
	if n := strings.Count(out, "--- "); n != 2 || strings.Count(out, "POWER ") != 2 {
		t.Fatalf("want 2 plain frames with power:\n%s", out)
	}
	c := client.New(sock)
	defer c.Close()
	var b bytes.Buffer
	if err := top(context.Background(), &b, true, c, topOptions{interval: 100 * time.Millisecond, count: 2, events: 3}); err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(b.String(), "\x1b[H\x1b[2J")
	if len(frames) != 3 || frames[0] != "" || !strings.Contains(frames[2], "MODE ") {
		t.Fatalf("terminal frames: %q", b.String())
	}
}

// fulcrumctl status (and watch) show the heat: temperatures with the zones over their
// trip point, GPU load, the throttling and the plan's thermal cap.
func TestStatusShowsHeat(t *testing.T) {
	var st api.Status
	readStrict(t, "testdata/top_status.json", &st)
	var b bytes.Buffer
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"GPU load 87%, GPU runs 816 MHz, CPU 2201 MHz  cpu-thermal 48.2°C  gpu-thermal 51.5°C (OVER its 50.0°C trip point)",
		"throttled    since ", ": GPU runs 816 MHz under its 918 MHz floor (the board runs slower than the mode set)",
		"thermal cap  the plan keeps the GPU ≤ 918 MHz",
		`"evil\x1b[2Jzone" 40.0°C`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "heat ") && strings.Contains(l, "\x1b") {
			t.Errorf("the heat line carries a raw escape: %q", l)
		}
	}
	st.Heat = nil
	b.Reset()
	if err := writeStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "heat ") || strings.Contains(b.String(), "throttled") {
		t.Errorf("heat lines without heat sensors:\n%s", b.String())
	}
}

// The profile table marks a profile measured while the board throttled, and a whole
// minibatch stored as a bound.
func TestProfileListMarksThrottled(t *testing.T) {
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	p := store.Profile{Board: "agx-orin-64gb", Workload: "resnet18-train", Role: truth.Train,
		Mode: powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 918000000, EMCHz: 3199000000}, Batch: 32,
		TimeMS: store.TimeStats{Mean: 100, P50: 100, P95: 100}, PowerMW: store.PowerStats{Mean: 30000},
		Samples: 5, PowerSamples: 5, StartedAt: at, FinishedAt: at, Source: store.SourceLive}
	cool := p
	cool.Workload = "mobilenet-infer"
	p.Throttled = &store.Throttled{Readings: 3, GPUHzMin: 816000000}
	var b bytes.Buffer
	bound := cool
	bound.Workload, bound.Bound = "lstm-train", true
	if err := printProfiles(&b, []store.Profile{p, cool, bound}, "table"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[1], "live (throttled)") || !strings.HasSuffix(lines[2], "live") || !strings.HasSuffix(lines[3], "live (bound)") {
		t.Errorf("profile table:\n%s\nwant the throttled one and the bound marked, the cool one not", b.String())
	}
}
