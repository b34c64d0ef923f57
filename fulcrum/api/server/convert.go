package server

import (
	"maps"
	"slices"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// The conversions copy fulcrumd's internal types into the API's wire types field by
// field (convert_test.go checks that none is forgotten).

// WorkersFrom converts the scheduler's workers (nil stays nil).
func WorkersFrom(ws []sched.WorkerInfo) []api.Worker {
	if ws == nil {
		return nil
	}
	out := make([]api.Worker, len(ws))
	for i, w := range ws {
		out[i] = api.Worker{ID: w.ID, Role: w.Role, Workload: w.Workload, Batch: w.Batch, BatchSizes: slices.Clone(w.BatchSizes),
			PID: w.PID, UID: w.UID, Waiting: w.Waiting, Queued: w.Queued, NoProfiles: w.NoProfiles,
			MicroBatches: slices.Clone(w.MicroBatches), MicroBatch: w.MicroBatch, MicroBatchChanges: w.MicroBatchChanges,
			MicroBatchFits: w.MicroBatchFits}
	}
	return out
}

func quantilesFrom(q sched.Quantiles) api.Quantiles {
	return api.Quantiles{Count: q.Count, P50MS: q.P50MS, P95MS: q.P95MS, P99MS: q.P99MS, MaxMS: q.MaxMS}
}

// WorkloadsFrom converts the scheduler's per-workload measurements (nil stays nil).
func WorkloadsFrom(ws []sched.WorkloadStats) []api.WorkloadStats {
	if ws == nil {
		return nil
	}
	out := make([]api.WorkloadStats, len(ws))
	for i, w := range ws {
		out[i] = api.WorkloadStats{Workload: w.Workload, Role: w.Role, LiveWorkers: w.LiveWorkers,
			Requests: w.Requests, Served: w.Served, Failed: w.Failed, DeadlineMisses: w.DeadlineMisses,
			Latency: quantilesFrom(w.Latency), LatencyRecent: quantilesFrom(w.LatencyRecent), ArrivalRateHz: w.ArrivalRateHz,
			LatencyBudgetMS: w.LatencyBudgetMS,
			ExpectedBatchMS: maps.Clone(w.ExpectedBatchMS),
			Minibatches:     w.Minibatches, Samples: w.Samples, ThroughputPerS: w.ThroughputPerS, ExpectedTrainMS: w.ExpectedTrainMS,
			ExpectedMicroMS: maps.Clone(w.ExpectedMicroMS),
			TurnWait:        quantilesFrom(w.TurnWait), Overruns: w.Overruns, StarvedAdmits: w.StarvedAdmits,
			DurationsClamped: w.DurationsClamped, HoldExpired: w.HoldExpired,
			DurationsUnderReported: w.DurationsUnderReported, Refused: w.Refused,
			AdmissionRoomMS: w.AdmissionRoomMS, AdmissionRoomLearnedMS: w.RoomLearnedMS, AdmissionRoomChanges: w.RoomChanges,
			AdmissionRoomWhy: w.RoomWhy}
	}
	return out
}

// ImportResponseFrom converts the store's import result.
func ImportResponseFrom(r store.ImportResult) api.ImportResponse {
	return api.ImportResponse{Added: r.Added, Unchanged: r.Unchanged, Replaced: r.Replaced}
}

// ProfileFrom converts a stored profile; its JSON is the store's own.
func ProfileFrom(p store.Profile) api.Profile {
	out := api.Profile{Board: p.Board, Workload: p.Workload, Role: string(p.Role), Mode: p.Mode, Batch: p.Batch, MicroBatch: p.MicroBatch,
		TimeMS:  api.TimeStats{Mean: p.TimeMS.Mean, P50: p.TimeMS.P50, P95: p.TimeMS.P95, Stddev: p.TimeMS.Stddev},
		PowerMW: api.PowerStats{Mean: p.PowerMW.Mean, Stddev: p.PowerMW.Stddev},
		Samples: p.Samples, PowerSamples: p.PowerSamples, Warmup: p.Warmup, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
		RSE: p.RSE, Source: p.Source, Repeats: p.Repeats, Bound: p.Bound}
	if t := p.Throttled; t != nil {
		out.Throttled = &api.Throttled{Readings: t.Readings, GPUHzMin: t.GPUHzMin, CPUKHzMin: t.CPUKHzMin}
	}
	return out
}
