package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/faketree"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
	"github.com/fulcrum-edge/fulcrum/profiler"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/profiler/store/storetest"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// runProfile runs `fulcrumctl profile args...` in-process and returns stdout and stderr.
func runProfile(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"profile"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func seedStore(t *testing.T, path string) []store.Profile {
	t.Helper()
	s := storetest.OpenAt(t, path, store.Options{})
	defer s.Close()
	var ps []store.Profile
	start := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	for i, m := range []powermode.Mode{
		{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000},
		{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000},
	} {
		for j, b := range []int{1, 8} {
			f := float64(10*i + j)
			p := store.Profile{
				Board: "agx-orin-64gb", Workload: "mobilenetv3-infer", Role: truth.Infer, Mode: m, Batch: b,
				TimeMS: store.TimeStats{Mean: 12.5 + f, P50: 12.25 + f, P95: 14 + f, Stddev: 0.3}, PowerMW: store.PowerStats{Mean: 20000 + 100*f, Stddev: 150},
				Samples: 6, PowerSamples: 11, Warmup: 3, StartedAt: start.Add(time.Duration(f) * time.Second), FinishedAt: start.Add(time.Duration(f)*time.Second + 700*time.Millisecond),
				RSE: 0.011, Source: store.SourceSim,
			}
			if err := s.Put(p); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
	}
	return ps
}

func TestProfileStoreCommands(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "a.db")
	ps := seedStore(t, db)

	out, _, err := runProfile(t, "ls", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1+len(ps) || !strings.Contains(lines[1], "mobilenetv3-infer") {
		t.Errorf("ls output:\n%s", out)
	}
	out, _, err = runProfile(t, "ls", "--db", db, "--json", "--role", "infer", "--workload", "mobilenetv3-infer")
	if err != nil {
		t.Fatal(err)
	}
	var got []store.Profile
	if err := json.Unmarshal([]byte(out), &got); err != nil || !slices.Equal(got, ps) {
		t.Errorf("ls --json = %v (%v), want the seeded profiles", got, err)
	}
	if out, _, err := runProfile(t, "ls", "--db", db, "--json", "--role", "train"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("ls --role train = %q, %v; want []", out, err)
	}
	if _, _, err := runProfile(t, "ls", "--db", db, "--role", "serve"); err == nil {
		t.Error("ls --role serve succeeded")
	}

	for _, format := range []string{"csv", "json"} {
		first := filepath.Join(dir, "first."+format)
		if _, _, err := runProfile(t, "export", "--db", db, "--format", format, "--out", first); err != nil {
			t.Fatal(err)
		}
		b := filepath.Join(dir, "b-"+format+".db")
		out, _, err := runProfile(t, "import", "--db", b, first)
		if err != nil || !strings.Contains(out, fmt.Sprintf("%d added, 0 unchanged", len(ps))) {
			t.Fatalf("import %s: %q, %v", format, out, err)
		}
		second, _, err := runProfile(t, "export", "--db", b, "--format", format)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(first)
		if second != string(want) {
			t.Errorf("%s: export → import → export differs:\n%s\n---\n%s", format, want, second)
		}
	}
	if _, _, err := runProfile(t, "export", "--db", db, "--format", "xml"); err == nil {
		t.Error("export --format xml succeeded")
	}

	// A plain ground-truth table needs --board.
	plain := filepath.Join(dir, "truth.csv")
	if err := os.WriteFile(plain, []byte("workload,role,cores,cpu_khz,gpu_hz,emc_hz,batch,time_ms,power_mw\nresnet18-train,train,12,2201600,1300500000,3199000000,32,101.7,45801\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runProfile(t, "import", "--db", db, plain); err == nil || !strings.Contains(err.Error(), "--board") {
		t.Errorf("import of a plain table without --board: %v", err)
	}
	if out, _, err := runProfile(t, "import", "--db", db, "--board", "agx-orin-64gb", plain); err != nil || !strings.Contains(out, "1 added") {
		t.Errorf("import --board: %q, %v", out, err)
	}

	out, _, err = runProfile(t, "check", "--db", db)
	if err != nil || !strings.Contains(out, "ok (schema version 1, 5 profiles)") {
		t.Errorf("check: %q, %v", out, err)
	}
	// Damage one value behind the store's back, in a copy (the seeded store is
	// checked when the test ends): check must fail and name it.
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	db = filepath.Join(dir, "damaged.db")
	if err := os.WriteFile(db, data, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := bolt.Open(db, 0o644, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("profiles")).Bucket([]byte("agx-orin-64gb")).Bucket([]byte("mobilenetv3-infer")).Bucket([]byte("infer")).Bucket([]byte(ps[0].Mode.String()))
		return b.Put([]byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte(`{"board":`))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runProfile(t, "check", "--db", db); err == nil || !strings.Contains(err.Error(), "decode profile") {
		t.Errorf("check of a damaged store: %v", err)
	}
	if _, _, err := runProfile(t, "check", "--db", filepath.Join(dir, "missing.db")); err == nil {
		t.Error("check of a missing store succeeded")
	}
}

func TestProfileRunRefusesRealBoard(t *testing.T) {
	root := t.TempDir()
	if _, err := faketree.Build(root, testboard.Spec(t, testboard.AGXOrin), faketree.Options{}); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "p.db")
	_, _, err := runProfile(t, "run", "--root", root, "--db", db, "--workload", "lstm-train", "--modes", "presets")
	if err == nil || !strings.Contains(err.Error(), "fulcrumctl cannot run a real workload yet") {
		t.Errorf("run on a non-simulated tree: %v", err)
	}
	_, _, err = runProfile(t, "run", "--root", root, "--db", db, "--workload", "lstm-train", "--modes", "presets", "--runner", "sim")
	if err == nil || !strings.Contains(err.Error(), "is not a simulated board's tree") {
		t.Errorf("run --runner sim on a non-simulated tree: %v", err)
	}
	// A simulator tree whose physics loop is not running would give power that never
	// changes: refused too.
	stopped := testboard.Sim(t, filepath.Join(t.TempDir(), "orin"), testboard.Spec(t, testboard.AGXOrin), sim.Options{})
	_, _, err = runProfile(t, "run", "--root", stopped.Root(), "--db", db, "--workload", "lstm-train", "--modes", "presets")
	if err == nil || !strings.Contains(err.Error(), "physics loop is not running") {
		t.Errorf("run on a stopped simulator tree: %v", err)
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a refused run created the store")
	}
}

// startSim runs a simulated AGX Orin's physics loop in this process until the test ends.
func startSim(t *testing.T) (root string, spec *powermode.BoardSpec) {
	t.Helper()
	spec = testboard.Spec(t, testboard.AGXOrin)
	board := testboard.Sim(t, filepath.Join(t.TempDir(), "orin"), spec, sim.Options{Interval: 10 * time.Millisecond})
	testboard.Start(t, board)
	return board.Root(), spec
}

func boardState(t *testing.T, root string, spec *powermode.BoardSpec) string {
	t.Helper()
	b, err := tegra.Open(context.Background(), root, spec, powermode.BoardInfo{Name: spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return string(s.State)
}

// A real `fulcrumctl profile run` process is killed with SIGKILL midway; the rerun
// finishes the campaign with exactly the full set: nothing duplicated, nothing lost,
// the store passes Check, and the board ends in the state it had before the first run
// (restored from the snapshot the killed run left in the store).
func TestProfileRunSurvivesSIGKILL(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fulcrumctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	root, spec := startSim(t)
	original := boardState(t, root, spec)
	dir := t.TempDir()
	db := filepath.Join(dir, "profiles.db")
	modesFile := filepath.Join(dir, "modes.txt")
	modes := []powermode.Mode{
		{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000},
		{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000},
		{Cores: 12, CPUKHz: 1497600, GPUHz: 816000000, EMCHz: 3199000000},
		{Cores: 8, CPUKHz: 2201600, GPUHz: 1020000000, EMCHz: 2133000000},
		{Cores: 6, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000},
		{Cores: 10, CPUKHz: 1958400, GPUHz: 1122000000, EMCHz: 3199000000},
	}
	var lines []string
	for _, m := range modes {
		lines = append(lines, m.String())
	}
	if err := os.WriteFile(modesFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"profile", "run", "--root", root, "--db", db, "--workload", "lstm-train", "--modes", modesFile,
		"--warmup", "1", "--warmup-time", "150ms", "--min-samples", "3", "--max-samples", "4", "--power-interval", "10ms"}

	// First run: kill it once two profiles are stored (its log says so).
	first := exec.Command(bin, args...)
	stderr, err := first.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	doneRe := regexp.MustCompile(`msg=profiled done=(\d+)`)
	sc := bufio.NewScanner(stderr)
	var log []string
	killed := false
	for sc.Scan() {
		log = append(log, sc.Text())
		if m := doneRe.FindStringSubmatch(sc.Text()); m != nil && m[1] == "2" {
			// Kill it while its third profile is measuring: once one of its minibatches
			// is registered in the simulator, the mode is applied, so the kill lands in
			// the profile in flight and not half-way through a control-file write (a
			// fake tree's file, unlike sysfs, can be left truncated by that).
			waitForActivity(t, root, first.Process.Pid)
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
			break
		}
	}
	go io.Copy(io.Discard, stderr) //nolint:errcheck // drain what is left
	werr := first.Wait()
	if !killed {
		t.Fatalf("the first run ended (%v) before two profiles were stored:\n%s", werr, strings.Join(log, "\n"))
	}
	s := storetest.OpenAt(t, db, store.Options{})
	before, err := s.List(store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) < 2 || len(before) >= len(modes) {
		t.Fatalf("after SIGKILL the store holds %d profiles, want 2..%d", len(before), len(modes)-1)
	}
	raw, err := s.GetCampaign(profiler.CampaignID(spec.Name, "lstm-train", truth.Train))
	if err != nil {
		t.Fatal(err)
	}
	var rec profiler.CampaignRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.State != profiler.StateRunning || rec.Snapshot == nil {
		t.Errorf("the killed run's record: state %q, snapshot %v; want running with the snapshot kept", rec.State, rec.Snapshot != nil)
	}
	s.Close()
	if out, _, err := runProfile(t, "ls", "--db", db, "--campaigns"); err != nil || !strings.Contains(out, "agx-orin-64gb/lstm-train/train  running") || !strings.Contains(out, "pending restore") {
		t.Errorf("ls --campaigns after SIGKILL: %v\n%s", err, out)
	}
	if boardState(t, root, spec) == original {
		t.Error("the board is in its original state after SIGKILL; the test did not exercise crash recovery")
	}

	// Rerun to completion.
	second := exec.Command(bin, args...)
	out, err := second.CombinedOutput()
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("campaign done: %d entries, %d profiled, %d already stored", len(modes), len(modes)-len(before), len(before)); !strings.Contains(string(out), want) {
		t.Errorf("rerun output lacks %q:\n%s", want, out)
	}
	if out, _, err := runProfile(t, "ls", "--db", db, "--campaigns", "--json"); err != nil || !strings.Contains(out, `"state": "finished"`) || strings.Contains(out, `"snapshot"`) {
		t.Errorf("ls --campaigns --json after the rerun: %v\n%s", err, out)
	}
	s = storetest.OpenAt(t, db, store.Options{})
	defer s.Close()
	after, err := s.List(store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var gotModes []powermode.Mode
	for _, p := range after {
		gotModes = append(gotModes, p.Mode)
	}
	for _, m := range modes {
		if !slices.Contains(gotModes, m) {
			t.Errorf("mode %s missing after the rerun", m)
		}
	}
	if len(after) != len(modes) {
		t.Errorf("store holds %d profiles, want exactly %d", len(after), len(modes))
	}
	for _, p := range before {
		// DeepEqual, not ==: Throttled is a pointer, set when the board ran under the
		// clocks asked for (a loaded host's simulator lags), and two reads are two pointers.
		if got, err := s.Get(p.Key()); err != nil || !reflect.DeepEqual(got, p) {
			t.Errorf("profile %s stored before the kill changed: %+v, %v", p.Key(), got, err)
		}
	}
	if n, _ := s.Count(); n != len(modes) {
		t.Errorf("Count = %d, want %d", n, len(modes))
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
	if got := boardState(t, root, spec); got != original {
		t.Errorf("board after the rerun is not the state before the first run:\n got %s\nwant %s", got, original)
	}
}

// waitForActivity waits until process pid has a minibatch registered in the simulator's
// activity directory.
func waitForActivity(t *testing.T, root string, pid int) {
	t.Helper()
	dir := filepath.Join(root, sim.ActivityDir)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil || !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			var a sim.Activity
			if json.Unmarshal(raw, &a) == nil && a.PID == pid {
				return
			}
		}
	}
	t.Fatalf("process %d never ran a minibatch on the simulated board", pid)
}

// An empty or foreign file given as --db is named as such, and left as it was: check
// no longer turns an empty file into a store, ls no longer fails with "bad file
// descriptor".
func TestProfileCommandsOnNonStoreFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	junk := []byte("workload,role\nnot a bolt file\n")
	if err := os.WriteFile(garbage, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		file string
		want string
	}{
		{[]string{"ls"}, empty, "is an empty file, not a profile store"},
		{[]string{"check"}, empty, "is an empty file, not a profile store"},
		{[]string{"export"}, empty, "is an empty file, not a profile store"},
		{[]string{"ls"}, garbage, "not a profile store"},
		{[]string{"check"}, garbage, "not a profile store"},
		{[]string{"check"}, filepath.Join(dir, "missing.db"), "does not exist"},
	} {
		before, _ := os.ReadFile(tc.file)
		_, _, err := runProfile(t, append(tc.args, "--db", tc.file)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profile %s --db %s: %v, want %q", tc.args[0], filepath.Base(tc.file), err, tc.want)
		}
		after, statErr := os.ReadFile(tc.file)
		if string(after) != string(before) && !errors.Is(statErr, os.ErrNotExist) {
			t.Errorf("profile %s changed %s (%d bytes before, %d after)", tc.args[0], filepath.Base(tc.file), len(before), len(after))
		}
	}
}
