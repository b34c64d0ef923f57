package search

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/fulcrum-edge/fulcrum/fulcrum/gp"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// alsSnapshot is the stored form of an ALSModel (schema version 1).
type alsSnapshot struct {
	Version      int              `json:"version"`
	Train        string           `json:"train"`
	Infer        string           `json:"infer"`
	TrainBatch   int              `json:"train_batch"`
	InferBatches []int            `json:"infer_batches"`
	Levels       powermode.Levels `json:"levels"`
	// Members is a bitmap over the grid ordinals of Levels (bit o of byte o/8); absent
	// when the space is the full grid.
	Members  []byte              `json:"members,omitempty"`
	Options  ALSOptions          `json:"options"`
	Profiles []plan.ModeProfile  `json:"profiles"`
	Campaign []powermode.Mode    `json:"campaign"`
	Hyper    map[string]gp.Hyper `json:"hyper"`
	Pareto   []powermode.Mode    `json:"pareto"`
	Stop     string              `json:"stop"`
	// Rules decide the answers; NoiseRel is the measurement noise answers predict
	// repeats with; MaxProfiles caps campaign plus one answer's confirmations. Absent
	// in models stored before they were kept: then the zero Rules (exact model v1), no
	// repeats planned, and Confirm profiles per answer.
	Rules       plan.Rules `json:"rules"`
	NoiseRel    float64    `json:"noise_rel,omitempty"`
	MaxProfiles int        `json:"max_profiles,omitempty"`
}

// MarshalJSON stores the model: profiles, hyper-parameters, space and options.
func (m *ALSModel) MarshalJSON() ([]byte, error) {
	s := alsSnapshot{
		Version: alsSnapshotVersion, Train: m.train, Infer: m.infer, TrainBatch: m.trainBatch,
		InferBatches: m.batches, Levels: m.space.Levels(), Options: m.opts, Profiles: m.profiles,
		Campaign: m.campaign, Hyper: map[string]gp.Hyper{}, Pareto: m.front, Stop: m.stop,
		Rules: m.rules, NoiseRel: m.noiseRel, MaxProfiles: m.maxProfiles,
	}
	if !m.space.IsGrid() {
		s.Members = make([]byte, (m.space.GridSize()+7)/8)
		for idx := range m.space.All() {
			o := m.space.Ordinal(idx)
			s.Members[o/8] |= 1 << (o % 8)
		}
	}
	for g := range numGroups {
		s.Hyper[groupName(g)] = m.hyper[g]
	}
	return json.Marshal(s)
}

// UnmarshalALSModel restores a model stored by MarshalJSON. It refits nothing: the GPs
// are rebuilt from the stored profiles and hyper-parameters, so answers are identical.
// logger may be nil.
func UnmarshalALSModel(data []byte, logger *slog.Logger) (*ALSModel, error) {
	var s alsSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("als model: %w: the stored model is corrupt; run the campaign again", err)
	}
	if s.Version != alsSnapshotVersion {
		return nil, fmt.Errorf("als model: schema version %d, this build reads %d: run the campaign again", s.Version, alsSnapshotVersion)
	}
	grid, err := powermode.NewSpace(s.Levels)
	if err != nil {
		return nil, fmt.Errorf("als model: %w", err)
	}
	sp := grid
	if s.Members != nil {
		if len(s.Members) != (grid.GridSize()+7)/8 {
			return nil, fmt.Errorf("als model: member bitmap of %d bytes for a grid of %d modes: the stored model is corrupt", len(s.Members), grid.GridSize())
		}
		var modes []powermode.Mode
		for o := range grid.GridSize() {
			if s.Members[o/8]&(1<<(o%8)) != 0 {
				modes = append(modes, grid.Mode(grid.FromOrdinal(o)))
			}
		}
		if sp, err = powermode.NewSubspace(modes); err != nil {
			return nil, fmt.Errorf("als model: %w", err)
		}
	}
	p := Problem{Space: sp, Train: s.Train, Infer: s.Infer, TrainBatch: s.TrainBatch, InferBatches: s.InferBatches}
	batches, err := checkProblem(p)
	if err != nil {
		return nil, fmt.Errorf("als model: %w", err)
	}
	if len(s.Profiles) < 2 {
		return nil, fmt.Errorf("als model: %d profiles: the stored model is incomplete; run the campaign again", len(s.Profiles))
	}
	s.Options.Logger = logger
	m := &ALSModel{opts: s.Options.withDefaults(), space: sp, train: s.Train, infer: s.Infer, trainBatch: s.TrainBatch,
		batches: batches, profiles: s.Profiles, campaign: s.Campaign, front: s.Pareto, stop: s.Stop,
		rules: s.Rules, noiseRel: s.NoiseRel, maxProfiles: s.MaxProfiles}
	if m.maxProfiles <= 0 {
		m.maxProfiles = len(m.campaign) + m.opts.Confirm
	}
	m.index()
	var ys [][]float64
	for _, mp := range s.Profiles {
		if !sp.Contains(mp.Mode) {
			return nil, fmt.Errorf("als model: profile of mode %s outside the stored space: the stored model is corrupt", mp.Mode)
		}
		y, ok := outputsOf(mp, batches)
		if !ok {
			return nil, fmt.Errorf("als model: profile of mode %s is incomplete: the stored model is corrupt", mp.Mode)
		}
		ys = append(ys, y)
	}
	gps := make([]*gp.GP, numGroups)
	for g := range numGroups {
		h, ok := s.Hyper[groupName(g)]
		if !ok {
			return nil, fmt.Errorf("als model: no hyper-parameters for %s: the stored model is corrupt", groupName(g))
		}
		m.hyper[g] = h
		gp, err := gp.New(m.dataInputs(), groupOutputs(ys, g, len(batches)), h)
		if err != nil {
			return nil, fmt.Errorf("als model: %s surrogate: %w", groupName(g), err)
		}
		gps[g] = gp
	}
	m.xData, m.yData = m.dataInputs(), ys
	m.predict(gps, m.allInputs())
	m.finish(gps)
	return m, nil
}

const alsSnapshotVersion = 1
