package main

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// hostile is a workload name a worker may register (the protocol bounds only its
// length): it clears the screen, retitles the terminal, rings the bell, returns the
// cursor and forges a table row, then ends in invalid UTF-8 and a bidi override.
const hostile = "yolo\x1b[2J\x1b]0;owned\a\rFORGED  infer  1  999.0\nFORGED2\t\xff\u202e"

// terminalSafe fails the test if out holds a byte a terminal acts on (every C0 control
// but the line feed, DEL, C1 controls), invalid UTF-8, a bidi override, or a line that
// a name forged.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not valid UTF-8:\n%q", what, out)
	}
	for i, r := range out {
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r < 0xa0) || r == '\u202e' {
			t.Errorf("%s: control %U at byte %d reaches the terminal:\n%q", what, r, i, out)
			break
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "FORGED") {
			t.Errorf("%s: a name forged the line %q", what, l)
		}
	}
}

func TestHostileNamesAreEscaped(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	fake.SetMeasurements(
		[]api.Worker{{ID: hostile, Role: "infer", Workload: hostile, Batch: 1, PID: 4242, UID: 1001}},
		[]api.WorkloadStats{
			{Workload: hostile, Role: "infer", LiveWorkers: 1, Requests: 10, Served: 10, ArrivalRateHz: 5},
			{Workload: hostile + "-train", Role: "train", LiveWorkers: 1, ThroughputPerS: 10},
		},
		&api.Power{TotalMW: 1000, Avg1sMW: 1000, Rails: []api.Rail{{Name: hostile, PowerMW: 1000}}},
	)
	fake.SetPlan(&api.Plan{Mode: apitest.Mode30W, InferBatch: 1, Binding: hostile, Source: hostile, PredPowerMW: 1, PredLatencyMS: 1, ApplyError: hostile})
	fake.Publish(api.EventPlan, "worker "+hostile+" registered", &api.Caller{UID: 1001, PID: 4242, Comm: hostile}, nil)
	p := store.Profile{
		Board: "agx-orin-64gb", Workload: hostile, Role: truth.Infer, Mode: apitest.Mode30W, Batch: 1,
		TimeMS: store.TimeStats{Mean: 10, P50: 10, P95: 11}, PowerMW: store.PowerStats{Mean: 20000},
		Samples: 3, Source: store.SourceLive, StartedAt: time.Unix(1, 0), FinishedAt: time.Unix(2, 0),
	}
	if err := fake.Store.Put(p); err != nil {
		t.Fatal(err)
	}
	sock := apitest.Serve(t, allowAll, fake)
	mustRun(t, "budget", "set", "--socket", sock, "--workload", hostile, "--latency", "50ms")

	for _, args := range [][]string{
		{"status"}, {"workers"}, {"events"}, {"budget", "get"}, {"daemon", "profiles", "ls"}, {"watch", "--count", "1"},
	} {
		out, stderr, err := fulcrumctl(context.Background(), append(args, "--socket", sock)...)
		if err != nil {
			t.Fatalf("fulcrumctl %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		what := strings.Join(args, " ")
		terminalSafe(t, what, out)
		terminalSafe(t, what+" (stderr)", stderr)
		// The name is still there for the operator to read, escaped.
		if !strings.Contains(out, `\x1b[2J\x1b]0;owned\a\rFORGED`) {
			t.Errorf("%s does not show the escaped name:\n%s", what, out)
		}
	}
	// A daemon error that echoes a name is escaped too.
	_, _, err := fulcrumctl(context.Background(), "budget", "set", "--socket", sock, "--workload", hostile+strings.Repeat("x", 200), "--latency", "50ms")
	if err == nil {
		t.Fatal("an over-long workload name was accepted")
	}
	terminalSafe(t, "budget set error", shownLines(err.Error()))
}

func TestShown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"resnet18", "resnet18"},
		{"yolo v8 ünïcode", "yolo v8 ünïcode"},
		{"a\tb", `"a\tb"`},
		{"a\x1bb", `"a\x1bb"`},
		{"\xff", `"\xff"`},
		{"a\u202eb", `"a\u202eb"`},
		{"a\u0085b", `"a\u0085b"`},
	} {
		if got := shown(tc.in); got != tc.want {
			t.Errorf("shown(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := shownLines("line one\nbad \x07 line"); got != "line one\n\"bad \\a line\"" {
		t.Errorf("shownLines = %q", got)
	}
}
