package control

import (
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
)

// NewAPI returns the control API's adapter (controlapi.API) of c, started at started.
// The adapter imports this package, so these internal tests cannot name it: hook_test.go
// (package control_test) sets NewAPI before any test runs.
var NewAPI func(c *Controller, started time.Time) server.Controller

// profiles are the pair's profiles as plannedProfiles has them (the live evidence pooled
// in), in the pair's view. Called with c.mu held.
func (c *Controller) profiles() ([]plan.ModeProfile, error) {
	ps, err := c.plannedProfiles()
	return pairsOf(ps), err
}

// unrefinedProfiles is profiles without the live evidence. Called with c.mu held.
func (c *Controller) unrefinedProfiles() ([]plan.ModeProfile, error) {
	ps, err := c.storedPlanned()
	return pairsOf(ps), err
}

// pairWindow is a live window of the pair (one job, one stream) in the words the pair's
// tests use.
type pairWindow struct {
	TrainMS    float64
	TrainMicro int
	InferMS    float64
	InferBatch int
	PowerMW    float64
	RateRPS    float64
}

func (w pairWindow) window() liveWindow {
	return liveWindow{Train: []trainObs{{MS: w.TrainMS, Micro: w.TrainMicro}},
		Infer: []inferObs{{MS: w.InferMS, Batch: w.InferBatch, RateRPS: w.RateRPS}}, PowerMW: w.PowerMW}
}

func pairWindows(ws ...pairWindow) []liveWindow {
	out := make([]liveWindow, len(ws))
	for i, w := range ws {
		out[i] = w.window()
	}
	return out
}

// poolPair is poolEvidence of the pair's profile p (one job of share 1).
func poolPair(p plan.ModeProfile, ws []pairWindow, noise float64, maxRepeats int, powerFloor float64) (plan.ModeProfile, Pooled) {
	out, pooled := poolEvidence(plan.MultiOf(p), pairWindows(ws...), []float64{1}, noise, maxRepeats, powerFloor)
	return plan.PairOf(out), pooled
}

func pairsOf(ps []plan.MultiProfile) []plan.ModeProfile {
	if ps == nil {
		return nil
	}
	out := make([]plan.ModeProfile, len(ps))
	for i, p := range ps {
		out[i] = plan.PairOf(p)
	}
	return out
}
