package main

import (
	"context"
	"log/slog"

	"github.com/fulcrum-edge/fulcrum/fulcrum/bench"
	"github.com/fulcrum-edge/fulcrum/fulcrum/lifetime"
)

// lifetimeHarness is the runner of bench --lifetime: lifetime.Run, the whole daemon on
// virtual time (issue 30 item 1). physics runs the board as the physics simulator of the
// run's board instead of answering from the truth table (the table must then be that
// board's `fulcrumctl sim truth`, which the denominator is read from).
func lifetimeHarness(physics bool, log *slog.Logger) (bench.LifeRunner, error) {
	return func(ctx context.Context, r bench.LifeRun) (bench.LifeResult, error) {
		sc := lifetime.Scenario{Board: r.Board, Truth: r.Truth, Train: r.Train, PowerBudgetMW: r.PowerMW, Searcher: r.Method,
			Duration: r.Duration, Seed: r.Seed, NoiseFrac: r.Noise, Log: log, MicroBatches: r.Micro}
		if physics {
			sc.Truth = nil
		}
		for _, s := range r.Infer {
			sc.Infer = append(sc.Infer, lifetime.Stream{Workload: s.Workload, RateRPS: s.RateRPS, LatencyMS: s.LatencyMS})
		}
		for _, c := range r.Changes {
			sc.Changes = append(sc.Changes, lifetime.Change{At: c.At, RateFactor: c.RateFactor, PowerBudgetMW: c.PowerMW, LatencyMS: c.LatencyMS})
		}
		res, err := lifetime.Run(ctx, sc)
		if err != nil {
			return bench.LifeResult{}, err
		}
		out := bench.LifeResult{Planned: res.FirstPlanS >= 0, FirstPlanS: max(res.FirstPlanS, 0), ProfilesTaken: res.ProfilesTaken,
			SearchS: res.SearchS, LatencyBrokenS: res.LatencyBrokenS, PowerBrokenS: res.PowerBrokenS,
			LatencyBrokenAfterPlanS: res.LatencyBrokenAfterPlanS, PowerBrokenAfterPlanS: res.PowerBrokenAfterPlanS, PhaseSamples: res.PhaseSamples}
		// Summed in the jobs' order, not the map's: the same seed gives the same bits.
		for _, n := range r.Train {
			out.TrainSamples += res.TrainSamples[n]
			out.TrainAfterPlan += res.TrainSamplesAfterPlan[n]
		}
		return out, nil
	}, nil
}
