package plan

import (
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

func TestRepeatMean(t *testing.T) {
	m := powermode.Mode{Cores: 4, CPUKHz: 1, GPUHz: 2, EMCHz: 3}
	rep := func(train, infer float64) ModeProfile {
		return ModeProfile{Mode: m, Train: TrainPoint{Batch: 16, TimeMS: train, PowerMW: 10 * train},
			Infer: []InferPoint{{Batch: 1, TimeMS: infer, PowerMW: 10 * infer}, {Batch: 4, TimeMS: 2 * infer, PowerMW: 20 * infer}}}
	}
	first := rep(100, 10)
	var sum ModeProfile
	AddRepeat(&sum, first)
	AddRepeat(&sum, rep(110, 12))
	AddRepeat(&sum, rep(120, 14))
	got := RepeatMean(sum)
	if got.Repeats != 3 || got.Mode != m || got.Train.Batch != 16 || got.Train.TimeMS != 110 || got.Train.PowerMW != 1100 {
		t.Errorf("mean of 3 repeats: %+v", got)
	}
	if got.Infer[0] != (InferPoint{Batch: 1, TimeMS: 12, PowerMW: 120}) || got.Infer[1] != (InferPoint{Batch: 4, TimeMS: 24, PowerMW: 240}) {
		t.Errorf("mean inference points %+v", got.Infer)
	}
	if first.Infer[0].TimeMS != 10 {
		t.Errorf("AddRepeat wrote into the first measurement: %+v", first.Infer)
	}

	multi := func(k float64) MultiProfile {
		return MultiProfile{Mode: m, Train: []TrainPoint{{Batch: 8, TimeMS: k, PowerMW: k}, {Batch: 4, TimeMS: 2 * k, PowerMW: k}},
			Infer: [][]InferPoint{{{Batch: 1, TimeMS: k, PowerMW: k}}, {{Batch: 2, TimeMS: 3 * k, PowerMW: k}}}}
	}
	var ms MultiProfile
	for _, k := range []float64{1, 2, 6} {
		AddMultiRepeat(&ms, multi(k))
	}
	mm := MultiRepeatMean(ms)
	if mm.Repeats != 3 || mm.Train[1].TimeMS != 6 || mm.Infer[1][0].TimeMS != 9 || mm.Infer[0][0].Batch != 1 {
		t.Errorf("multi mean of 3 repeats: %+v", mm)
	}
	if ms.Train[0].TimeMS != 9 {
		t.Errorf("MultiRepeatMean changed the sum: %+v", ms)
	}
}
