package profiler

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

func steady(int) time.Duration { return 10 * time.Millisecond }

func campaignRecord(t *testing.T, s *store.Store, id string) CampaignRecord {
	t.Helper()
	raw, err := s.GetCampaign(id)
	if err != nil {
		t.Fatal(err)
	}
	var r CampaignRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCampaignResumes(t *testing.T) {
	board := newFakeBoard(t)
	original := board.cur
	st := newStore(t)
	modes := board.space.Modes()[:4]
	batches := []int{1, 4, 16}
	total := len(modes) * len(batches)

	// First run: interrupted (as by Ctrl-C) while the 6th entry is being measured.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := &fakeRunner{board: board, times: steady}
	var seen []Progress
	c := &Campaign{
		Profiler: &Profiler{Backend: board, Runner: run, Store: st, Options: Options{Warmup: -1, WarmupTime: -1, PowerSampleInterval: time.Millisecond}},
		Workload: "mobilenet", Role: truth.Infer, Modes: modes, Batches: batches,
		Progress: func(p Progress) {
			seen = append(seen, p)
			if p.Done == 5 {
				run.onCall = func(int) { cancel() } // the next minibatch sees a cancelled context
			}
		},
	}
	res, err := c.Run(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rerun the same command to resume") {
		t.Fatalf("interrupted run: err = %v", err)
	}
	if res.Measured != 5 {
		t.Errorf("interrupted run measured %d, want 5", res.Measured)
	}
	if n, _ := st.Count(); n != 5 {
		t.Errorf("stored %d after the interruption, want 5 (the profile in flight is discarded)", n)
	}
	if board.cur != original || len(board.restored) != 1 {
		t.Errorf("board after the interrupted campaign: %s (restores %d), want %s restored once", board.cur, len(board.restored), original)
	}
	if len(seen) != 5 || seen[4].Done != 5 || seen[4].Total != total || seen[4].ETA <= 0 || seen[4].Profile == nil {
		t.Errorf("progress reports: %+v", seen)
	}
	rec := campaignRecord(t, st, CampaignID("fake-orin", "mobilenet", truth.Infer))
	if rec.State != StateInterrupted || rec.Measured != 5 || rec.Snapshot != nil {
		t.Errorf("record after interruption: %+v", rec)
	}

	// Second run: skips the 5 stored entries, measures the other 7.
	run.onCall = nil
	seen = nil
	res, err = c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res != (CampaignResult{Total: total, Measured: total - 5, Skipped: 5}) {
		t.Errorf("resumed run = %+v", res)
	}
	ps, err := st.List(store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []store.Key
	for _, m := range modes {
		for _, b := range batches {
			keys = append(keys, store.Key{Board: "fake-orin", Workload: "mobilenet", Role: truth.Infer, Mode: m, Batch: b})
		}
	}
	if len(ps) != total {
		t.Errorf("store holds %d profiles, want %d", len(ps), total)
	}
	for _, p := range ps {
		if !slices.Contains(keys, p.Key()) {
			t.Errorf("unexpected profile %s", p.Key())
		}
	}
	if err := st.Check(); err != nil {
		t.Error(err)
	}
	rec = campaignRecord(t, st, CampaignID("fake-orin", "mobilenet", truth.Infer))
	if rec.State != StateFinished || rec.FinishedAt == nil || rec.Measured != 7 || rec.Skipped != 5 {
		t.Errorf("record after the resumed run: %+v", rec)
	}
	if board.cur != original {
		t.Errorf("board not restored: %s", board.cur)
	}
	// Skipped entries come first and have no estimate; the first measured one has one,
	// and the last entry's ETA is zero (nothing left).
	if seen[0].Profile != nil || seen[0].ETA != 0 || seen[5].Profile == nil || seen[5].ETA <= 0 || seen[len(seen)-1].ETA != 0 {
		t.Errorf("progress: first %+v, sixth %+v, last %+v", seen[0], seen[5], seen[len(seen)-1])
	}
}

// A campaign killed before restoring leaves its snapshot in the store; the next
// campaign on the board restores that state, not the modified one it finds.
func TestCampaignRestoresAfterCrash(t *testing.T) {
	board := newFakeBoard(t)
	st := newStore(t)
	pristine := powermode.Mode{Cores: 4, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000}
	raw, _ := json.Marshal(pristine)
	dead := CampaignRecord{
		ID: CampaignID("fake-orin", "resnet18", truth.Train), Board: "fake-orin", Workload: "resnet18", Role: truth.Train,
		State: StateRunning, Total: 9, Measured: 3, StartedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC(),
		Snapshot: &powermode.Snapshot{Backend: "fake", Board: "fake-orin", TakenAt: time.Now().UTC(), State: raw},
	}
	rawRec, _ := json.Marshal(dead)
	if err := st.PutCampaign(dead.ID, rawRec); err != nil {
		t.Fatal(err)
	}
	// The board is in whatever mode the dead campaign left: MAXN here.
	c := &Campaign{
		Profiler: &Profiler{Backend: board, Runner: &fakeRunner{board: board, times: steady}, Store: st, Options: Options{Warmup: -1, WarmupTime: -1, PowerSampleInterval: time.Millisecond}},
		Workload: "mobilenet", Role: truth.Infer, Modes: []powermode.Mode{m30w}, Batches: []int{1},
	}
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if board.cur != pristine {
		t.Errorf("board after the campaign = %s, want the dead campaign's snapshot %s", board.cur, pristine)
	}
	if r := campaignRecord(t, st, dead.ID); r.State != StateInterrupted || r.Snapshot != nil {
		t.Errorf("dead campaign's record = %+v, want interrupted without a snapshot", r)
	}
}

func TestCampaignFailureRestores(t *testing.T) {
	board := newFakeBoard(t)
	original := board.cur
	st := newStore(t)
	c := &Campaign{
		Profiler: &Profiler{Backend: board, Runner: &fakeRunner{board: board, times: steady, failAt: 7}, Store: st, Options: Options{Warmup: -1, WarmupTime: -1, PowerSampleInterval: time.Millisecond}},
		Workload: "resnet18", Role: truth.Train, Modes: board.space.Modes()[:3], Batches: []int{32},
	}
	_, err := c.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "worker crashed") {
		t.Fatalf("err = %v", err)
	}
	if board.cur != original {
		t.Errorf("board not restored after a failure: %s", board.cur)
	}
	if n, _ := st.Count(); n != 1 {
		t.Errorf("stored %d, want 1 (the profile before the failure)", n)
	}
	if r := campaignRecord(t, st, CampaignID("fake-orin", "resnet18", truth.Train)); r.State != StateFailed || !strings.Contains(r.Error, "worker crashed") {
		t.Errorf("record = %+v", r)
	}
}

func TestSelectModes(t *testing.T) {
	spec := testboard.Spec(t, testboard.AGXOrin)
	space := testboard.Space(t, spec)
	all, err := SelectModes("all", spec, nil, space, 1)
	if err != nil || len(all) != space.Size() {
		t.Errorf("all: %d modes, %v", len(all), err)
	}
	// From the catalog default MODE_30W (TPC mask 240) every other AGX Orin preset
	// needs a reboot; from MAXN (mask 0), MAXN and MODE_50W are reachable.
	presets, err := SelectModes("presets", spec, nil, space, 1)
	if want := []powermode.Mode{{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}}; err != nil || !slices.Equal(presets, want) {
		t.Errorf("presets = %v, %v", presets, err)
	}
	fromMaxN, err := nvpmodel.Catalog(spec, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	presets, err = SelectModes("presets", spec, fromMaxN, space, 1)
	want := []powermode.Mode{
		{Cores: 12, CPUKHz: 2201600, GPUHz: 1300500000, EMCHz: 3199000000},
		{Cores: 12, CPUKHz: 1497600, GPUHz: 816000000, EMCHz: 3199000000},
	}
	if err != nil || !slices.Equal(presets, want) {
		t.Errorf("presets from MAXN = %v, %v", presets, err)
	}
	// NVIDIA's Xavier caps are not levels (1200000 kHz, 900 MHz): snapped at or below;
	// MODE_10W (TPC mask 5) needs a reboot from the default MODE_15W_DESKTOP (mask 0).
	xavier := testboard.Spec(t, "agx-xavier")
	xspace := testboard.Space(t, xavier)
	xp, err := SelectModes("presets", xavier, nil, xspace, 1)
	if err != nil || len(xp) != 7 || xp[2] != (powermode.Mode{Cores: 8, CPUKHz: 1190400, GPUHz: 828750000, EMCHz: 1600000000}) {
		t.Errorf("xavier presets = %v, %v", xp, err)
	}
	r1, err := SelectModes("random:20", spec, nil, space, 7)
	if err != nil || len(r1) != 20 {
		t.Fatalf("random:20 = %d modes, %v", len(r1), err)
	}
	r2, _ := SelectModes("random:20", spec, nil, space, 7)
	r3, _ := SelectModes("random:20", spec, nil, space, 8)
	if !slices.Equal(r1, r2) || slices.Equal(r1, r3) {
		t.Error("random:N must depend on the seed and only on it")
	}
	uniq := map[powermode.Mode]bool{}
	for _, m := range r1 {
		if uniq[m] || !space.Contains(m) {
			t.Errorf("random mode %s repeated or outside the space", m)
		}
		uniq[m] = true
	}

	dir := t.TempDir()
	files := []struct {
		name, body string
		want       int
		errHas     string
	}{
		{"slash.txt", "# presets\n8/1728000/612000000/3199000000\n\n4/1113600/408000000/2133000000\n8/1728000/612000000/3199000000\n", 2, ""},
		{"modes.csv", "cores,cpu_khz,gpu_hz,emc_hz\n8,1728000,612000000,3199000000\n12, 2201600, 1300500000, 3199000000\n", 2, ""},
		{"offgrid.txt", "8/1700000/612000000/3199000000\n", 0, "not one of board agx-orin-64gb's modes"},
		{"bad.csv", "8,1728000,612000000\n", 0, "line 1"},
		{"empty.txt", "# nothing\n", 0, "no modes"},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := SelectModes(path, spec, nil, space, 1)
		if f.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), f.errHas) {
				t.Errorf("%s: err = %v, want %q", f.name, err, f.errHas)
			}
			continue
		}
		if err != nil || len(got) != f.want {
			t.Errorf("%s: %v, %v; want %d modes", f.name, got, err, f.want)
		}
	}
	for _, bad := range []string{"random:0", "random:x", "random:99999", filepath.Join(dir, "missing")} {
		if _, err := SelectModes(bad, spec, nil, space, 1); err == nil {
			t.Errorf("SelectModes(%q) succeeded", bad)
		}
	}
}
