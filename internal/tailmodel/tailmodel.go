// Package tailmodel is the heavy-tailed turn-time model of the simulated workers
// (issue 28): a lognormal body with, at probability TailProb, a Pareto tail that starts
// where the body's bulk ends. Its parameters are fitted to the turn times the
// real-PyTorch end-to-end test measures (scripts/pytorch/fit_tail.py, docs/runtime.md
// "Heavy-tailed turn times"), so the admission room can be tested without real
// frameworks, deterministically from a seeded random source.
package tailmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Model is a turn-time distribution relative to its median: a time is median × r with
// r drawn from it.
type Model struct {
	// Sigma is the lognormal body's σ (of ln r); its median is 1.
	Sigma float64 `json:"sigma"`
	// TailProb is the probability that a time comes from the tail instead.
	TailProb float64 `json:"tail_prob"`
	// TailStart is where the tail starts (× median) and TailAlpha its Pareto index: the
	// tail's times are TailStart × U^(−1/TailAlpha), at most TailMax × median.
	TailStart float64 `json:"tail_start"`
	TailAlpha float64 `json:"tail_alpha"`
	TailMax   float64 `json:"tail_max"`
}

// Validate reports a model that cannot be sampled.
func (m Model) Validate() error {
	switch {
	case !(m.Sigma >= 0 && m.Sigma < 3):
		return fmt.Errorf("tail model: sigma %v: want 0 ≤ σ < 3", m.Sigma)
	case !(m.TailProb >= 0 && m.TailProb < 1):
		return fmt.Errorf("tail model: tail_prob %v: want a probability below 1", m.TailProb)
	case m.TailProb > 0 && !(m.TailStart >= 1 && m.TailAlpha > 0 && m.TailMax >= m.TailStart):
		return fmt.Errorf("tail model: tail_start %v, tail_alpha %v, tail_max %v: want start ≥ 1, α > 0, max ≥ start",
			m.TailStart, m.TailAlpha, m.TailMax)
	}
	return nil
}

// Ratio draws one time relative to the median.
func (m Model) Ratio(rng *rand.Rand) float64 {
	if m.TailProb > 0 && rng.Float64() < m.TailProb {
		u := 1 - rng.Float64() // (0, 1]
		return min(m.TailStart*math.Pow(u, -1/m.TailAlpha), m.TailMax)
	}
	if m.Sigma == 0 {
		return 1
	}
	return math.Exp(m.Sigma * rng.NormFloat64())
}

// Stretch is a turn of modeled time d under the tail alone: with probability TailProb
// d × the tail's ratio, else d. The body's spread is left to the caller's own
// run-to-run noise (the simulator's noise_sigma, the lifetime run's NoiseFrac), so the
// body is not counted twice. It is the one place the simulated workers apply a tail:
// fulcrumctl sim worker --tail (real time) and fulcrum/lifetime's Scenario.Tail
// (virtual time) both call it, one draw (two in the tail) from rng per turn.
func (m Model) Stretch(d time.Duration, rng *rand.Rand) time.Duration {
	if m.TailProb <= 0 {
		return d
	}
	m.Sigma = 0
	r := m.Ratio(rng)
	if r <= 1 {
		return d
	}
	return d + time.Duration(float64(d)*(r-1))
}

// Scaled is m with the body's spread multiplied by k (the test of a spread that doubles).
func (m Model) Scaled(k float64) Model {
	m.Sigma *= k
	if m.TailProb > 0 {
		m.TailStart = 1 + (m.TailStart-1)*k
		m.TailMax = max(m.TailMax*k, m.TailStart)
	}
	return m
}

// PyTorchCPUTrain is the model fitted to the training minibatch times of the
// real-PyTorch end-to-end test (resnet18, batch 8, 32×32, on a CPU core shared with the
// inference server; `scripts/pytorch/seeds.sh` seeds 1–10 then
// `scripts/pytorch/fit_tail.py`): docs/runtime.md "Heavy-tailed turn times".
func PyTorchCPUTrain() Model {
	return Model{Sigma: 0.261, TailProb: 0.0897, TailStart: 1.684, TailAlpha: 2.97, TailMax: 7.88}
}

// PyTorchCPUInfer is the model fitted to the same runs' inference batch times
// (mobilenet_v3_small, each relative to its batch size's median).
func PyTorchCPUInfer() Model {
	return Model{Sigma: 0.456, TailProb: 0.093, TailStart: 2.488, TailAlpha: 1.99, TailMax: 28.2}
}

// Named returns a model by name: "none" (no tail, no spread) or "pytorch-cpu" (the
// fitted models, for role "train" or "infer").
func Named(name, role string) (Model, error) {
	switch name {
	case "", "none":
		return Model{}, nil
	case "pytorch-cpu":
		if role == "train" {
			return PyTorchCPUTrain(), nil
		}
		return PyTorchCPUInfer(), nil
	}
	return Model{}, fmt.Errorf("tail model %q: want none or pytorch-cpu", name)
}
