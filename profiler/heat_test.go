package profiler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// heatFake is the fake board with heat sensors that say the board throttles.
type heatFake struct {
	*fakeBoard
	throttled bool
}

func (b *heatFake) Heat(context.Context) (powermode.HeatReading, error) {
	h := powermode.HeatReading{GPUHz: m30w.GPUHz, GPUFloorHz: m30w.GPUHz, CPUKHz: m30w.CPUKHz, CPUFloorKHz: m30w.CPUKHz}
	if b.throttled {
		h.Throttled, h.GPUHz = true, 510000000
	}
	return h, nil
}

// A profile measured while the board throttles is stored marked, with the slowest
// clock seen; one measured cool is not; the mark survives the store.
func TestProfileWhileThrottledIsMarked(t *testing.T) {
	for _, throttled := range []bool{false, true} {
		board := &heatFake{fakeBoard: newFakeBoard(t), throttled: throttled}
		st := newStore(t)
		p := &Profiler{Backend: board, Runner: &fakeRunner{board: board.fakeBoard, warmup: 2, times: steady}, Store: st,
			Options: Options{PowerSampleInterval: time.Millisecond, WarmupTime: -1}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		prof, err := p.Profile(ctx, "resnet18", truth.Train, m30w, 32)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Get(prof.Key())
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !throttled && got.Throttled != nil:
			t.Errorf("cool board: stored %+v, want no throttled mark", got.Throttled)
		case throttled && (got.Throttled == nil || got.Throttled.GPUHzMin != 510000000 || got.Throttled.Readings < 1):
			t.Errorf("throttled board: stored %+v, want the mark with GPU 510 MHz", got.Throttled)
		}
	}
}

// Stores written before the field existed read as not throttled; a profile that says
// throttled with no reading is refused.
func TestThrottledFieldOldAndBad(t *testing.T) {
	old := `{"board":"b","workload":"w","role":"train","mode":{"cores":4,"cpu_khz":1000,"gpu_hz":1000,"emc_hz":1000},"batch":1,
		"time_ms":{"mean":1,"p50":1,"p95":1,"stddev":0},"power_mw":{"mean":1,"stddev":0},"samples":1,"power_samples":1,"warmup":0,
		"started_at":"2026-11-22T03:00:00Z","finished_at":"2026-11-22T03:00:01Z","rse":0,"source":"sim"}`
	var p store.Profile
	if err := json.Unmarshal([]byte(old), &p); err != nil {
		t.Fatal(err)
	}
	if p.Throttled != nil || p.Validate() != nil {
		t.Fatalf("old profile: throttled %+v, validate %v", p.Throttled, p.Validate())
	}
	p.Throttled = &store.Throttled{}
	if p.Validate() == nil {
		t.Error("a throttled mark with no reading was accepted")
	}
}
