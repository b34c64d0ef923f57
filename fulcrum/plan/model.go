package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// StreamBudget is one inference stream's budgets: its arrival rate and its latency budget
// (on MultiBudgets.Quantile).
type StreamBudget struct {
	Name      string  `json:"name"`
	RateRPS   float64 `json:"rate_rps"`   // λ_i
	LatencyMS float64 `json:"latency_ms"` // L_i
}

// MultiBudgets are the budgets of model v1 for several workloads (docs/design.md §2, "Model
// v1 for several workloads"): per-stream rates and latency budgets, one power budget, one
// quantile, one cap on the inference share of GPU time, and the training jobs' weights.
type MultiBudgets struct {
	Streams  []StreamBudget `json:"streams"`
	PowerMW  float64        `json:"power_mw"`
	Quantile float64        `json:"quantile"` // q, default 0.99
	RhoMax   float64        `json:"rho_max"`  // cap on Σ ρ_i, default 0.95
	// TrainWeights are the training jobs' shares of training GPU time, one per job in
	// the order of MultiProfile.Train (normalised to sum 1). Nil means equal shares.
	TrainWeights []float64 `json:"train_weights,omitempty"`
}

// WithDefaults fills a zero Quantile and RhoMax.
func (b MultiBudgets) WithDefaults() MultiBudgets {
	if b.Quantile == 0 {
		b.Quantile = DefaultQuantile
	}
	if b.RhoMax == 0 {
		b.RhoMax = DefaultRhoMax
	}
	return b
}

// Validate rejects budgets the model cannot plan for. Every message names the field
// (streams[i].rate_rps, train_weights[j], …) and says what is wanted.
func (b MultiBudgets) Validate() error {
	var errs []error
	if len(b.Streams) == 0 {
		errs = append(errs, errors.New("streams: no inference stream: add at least one with its name, rate_rps and latency_ms"))
	}
	seen := make(map[string]int, len(b.Streams))
	for i, s := range b.Streams {
		at := fmt.Sprintf("streams[%d]", i)
		switch prev, dup := seen[s.Name]; {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("%s.name is empty: name every stream, so that errors and plans can say which one", at))
		case dup:
			errs = append(errs, fmt.Errorf("%s.name %q is also streams[%d].name: give every stream its own name", at, s.Name, prev))
		default:
			seen[s.Name] = i
		}
		for _, f := range []struct {
			field string
			v     float64
		}{{FieldRate, s.RateRPS}, {FieldLatency, s.LatencyMS}} {
			if err := CheckField(f.field, f.v); err != nil {
				errs = append(errs, fmt.Errorf("%s (%q): %w", at, s.Name, err))
			}
		}
	}
	for _, f := range []struct {
		field string
		v     float64
	}{{FieldPower, b.PowerMW}, {FieldQuantile, b.Quantile}, {FieldRhoMax, b.RhoMax}} {
		if err := CheckField(f.field, f.v); err != nil {
			errs = append(errs, err)
		}
	}
	for j, w := range b.TrainWeights {
		if math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 {
			errs = append(errs, fmt.Errorf("train_weights[%d] = %v: want a positive share of training time (leave train_weights empty for equal shares; drop a job that should get none)", j, w))
		}
	}
	return errors.Join(errs...)
}

// MultiProfile is a mode profiled for several workloads: every training job and every
// inference stream measured there.
type MultiProfile struct {
	Mode  powermode.Mode `json:"mode"`
	Train []TrainPoint   `json:"train"` // one per training job
	Infer [][]InferPoint `json:"infer"` // per stream (the order of MultiBudgets.Streams), per batch size
	// Micro is, per training job (the order of Train), the job at micro-batch sizes
	// (ModeProfile.Micro); missing or empty: that job runs whole minibatches only.
	Micro [][]TrainPoint `json:"micro,omitempty"`
	// Repeats is how many measurements each value is the mean of (0 means 1).
	Repeats int `json:"repeats,omitempty"`
}

// TrainChoices returns job j's training turns at this mode: its whole minibatch first,
// then each usable micro-batch (ModeProfile.TrainChoices).
func (p MultiProfile) TrainChoices(j int) []TrainPoint {
	mp := ModeProfile{Train: p.Train[j]}
	if j < len(p.Micro) {
		mp.Micro = p.Micro[j]
	}
	return mp.TrainChoices()
}

// MultiBinding names a constraint and, for a latency budget, its stream.
type MultiBinding struct {
	Constraint Constraint `json:"constraint"`
	Stream     string     `json:"stream,omitempty"`
}

// StreamEval is one stream's figures in a MultiEval.
type StreamEval struct {
	Name   string  `json:"name"`
	Batch  int     `json:"batch"`
	Rho    float64 `json:"rho"`     // ρ_i
	FillMS float64 `json:"fill_ms"` // q-quantile of the batch fill time
	WaitMS float64 `json:"wait_ms"` // the longest non-preemptible turn ahead
	// QueueMS is the q-quantile of the wait behind earlier inference batches beyond
	// WaitMS (QueueExcessMS): 0 where the streams' GPU share is small.
	QueueMS   float64 `json:"queue_ms,omitempty"`
	LatencyMS float64 `json:"latency_ms"` // fill + wait + queue + own service
}

// MultiEval is one configuration (mode, a batch size per stream) scored by model v1 for
// several workloads.
type MultiEval struct {
	Mode    powermode.Mode `json:"mode"`
	Streams []StreamEval   `json:"streams"`
	Rho     float64        `json:"rho"` // Σ ρ_i
	PowerMW float64        `json:"power_mw"`
	// TrainShares are the jobs' shares of training time s_j; TrainSPS their throughputs θ_j.
	TrainShares []float64 `json:"train_shares"`
	TrainSPS    []float64 `json:"train_sps"`
	// MicroBatches is each job's training micro-batch size (0: whole minibatches), set
	// only when some job runs micro-batches (issue 32).
	MicroBatches []int `json:"micro_batches,omitempty"`
	// ObjectiveSPS is Θ = Π θ_j^{s_j}, the s-weighted geometric mean of TrainSPS (θ with
	// one job).
	ObjectiveSPS float64 `json:"objective_sps"`
	Feasible     bool    `json:"feasible"`
	// Violation is the sum of relative excesses over every budget (0 when feasible).
	Violation float64 `json:"violation"`
	// Binding is the constraint with the largest relative excess (infeasible), or the
	// least relative slack (feasible).
	Binding MultiBinding `json:"binding"`
}

// Batches returns the batch size of every stream, in stream order.
func (e MultiEval) Batches() []int {
	out := make([]int, len(e.Streams))
	for i, s := range e.Streams {
		out[i] = s.Batch
	}
	return out
}

// Better reports whether e beats o: feasible first, then the higher objective, ties to
// lower power; among infeasible ones, smaller violation, then lower power (the
// decision's order, ranksAbove, with feasibility for the claim).
func (e MultiEval) Better(o MultiEval) bool {
	return ranksAbove(e.Feasible, o.Feasible, rankKey{objective: e.ObjectiveSPS, powerMW: e.PowerMW, violation: e.Violation},
		rankKey{objective: o.ObjectiveSPS, powerMW: o.PowerMW, violation: o.Violation})
}

// MultiModel is model v1 (docs/design.md §2) for k inference streams and m training jobs,
// for fixed budgets: the one implementation of the model (evalInto). The pair's Model is
// its view for k = m = 1. It caches the fill quantiles of every stream and batch size. It
// is immutable and safe for concurrent use.
type MultiModel struct {
	b     MultiBudgets
	fills []map[int]float64 // per stream: batch -> fill quantile in ms
}

// NewMultiModel validates the budgets (after defaults) and precomputes fill quantiles.
func NewMultiModel(b MultiBudgets, batches []int) (*MultiModel, error) {
	b = b.WithDefaults()
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("multi-workload budgets: %w", err)
	}
	return newMultiModel(b, batches)
}

// newMultiModel is NewMultiModel of budgets already validated (the pair's, which
// Budgets.Validate checks in its own words).
func newMultiModel(b MultiBudgets, batches []int) (*MultiModel, error) {
	// Copy what the caller could change under a model that claims to be immutable.
	b.Streams = slices.Clone(b.Streams)
	b.TrainWeights = slices.Clone(b.TrainWeights)
	m := &MultiModel{b: b, fills: make([]map[int]float64, len(b.Streams))}
	for i, s := range b.Streams {
		m.fills[i] = make(map[int]float64, len(batches))
		for _, n := range batches {
			if n < 1 {
				return nil, fmt.Errorf("inference batch size %d: must be at least 1", n)
			}
			m.fills[i][n] = FillQuantileMS(n, s.RateRPS, b.Quantile)
		}
	}
	return m, nil
}

// Budgets returns the budgets the model checks against (a copy).
func (m *MultiModel) Budgets() MultiBudgets {
	b := m.b
	b.Streams = slices.Clone(b.Streams)
	b.TrainWeights = slices.Clone(b.TrainWeights)
	return b
}

func (m *MultiModel) fill(stream, b int) float64 {
	if f, ok := m.fills[stream][b]; ok {
		return f
	}
	return FillQuantileMS(b, m.b.Streams[stream].RateRPS, m.b.Quantile)
}

// queue is stream i's QueueMS: the batches that queue ahead of its batch are those of
// the streams whose budgets are no laxer than its own (itself included) — the scheduler
// serves due batches earliest deadline first, so a laxer stream's batch is at most the
// one turn running (WaitMS) — each stream's batches a customer arriving at λ_k/b_k.
// streams holds every stream's Rho and WaitMS already. With one stream every sum is its
// first term, so the figure is the pair's to the bit.
func (m *MultiModel) queue(i int, pts []InferPoint, streams []StreamEval) float64 {
	rho, res := m.queueLoad(i, pts, streams)
	return QueueExcessMS(rho, res, streams[i].WaitMS, m.b.Quantile)
}

// queueLoad is what stream i's queue is made of: the GPU share ρ of the batches that
// queue ahead of its own and the residual E[S²]/E[S] of their service times (ms); 0, 0
// when there are none.
func (m *MultiModel) queueLoad(i int, pts []InferPoint, streams []StreamEval) (rho, residualMS float64) {
	b := &m.b
	var sq, s1 float64
	first := true
	for k, ip := range pts {
		if b.Streams[k].LatencyMS > b.Streams[i].LatencyMS {
			continue
		}
		r := b.Streams[k].RateRPS / float64(ip.Batch)
		if first {
			rho, sq, s1, first = streams[k].Rho, r*ip.TimeMS*ip.TimeMS, r*ip.TimeMS, false
		} else {
			rho += streams[k].Rho
			sq += r * ip.TimeMS * ip.TimeMS
			s1 += r * ip.TimeMS
		}
	}
	if s1 <= 0 {
		return 0, 0
	}
	return rho, sq / s1
}

// queueSensitivity is how far stream i's QueueMS moves (ms) per unit relative change of
// the turn ahead (WaitMS) and of the queued batches' service times (all together: the
// larger, correlated case), by finite differences; 0, 0 without a queue. The decision
// adds them to the measured terms' spread (scoreInto): a queue computed from a low draw
// of the times is itself low, and counted as exact it let optimistic draws through.
func (m *MultiModel) queueSensitivity(i int, pts []InferPoint, streams []StreamEval) (perWait, perServe float64) {
	q := streams[i].QueueMS
	if q <= 0 {
		return 0, 0
	}
	const h = 1e-3
	rho, res := m.queueLoad(i, pts, streams)
	w := streams[i].WaitMS
	perWait = (QueueExcessMS(rho, res, w*(1+h), m.b.Quantile) - q) / h
	perServe = (QueueExcessMS(rho*(1+h), res*(1+h), w, m.b.Quantile) - q) / h
	return perWait, perServe
}

// shares returns s_j = w_j / Σ w for jobs training jobs. With one job it is exactly 1, so
// the model reduces to v1 to the bit.
func (m *MultiModel) shares(jobs int) []float64 {
	s := make([]float64, jobs)
	if len(m.b.TrainWeights) == 0 {
		for j := range s {
			s[j] = 1 / float64(jobs)
		}
		return s
	}
	var sum float64
	for _, w := range m.b.TrainWeights {
		sum += w
	}
	for j, w := range m.b.TrainWeights {
		s[j] = w / sum
	}
	return s
}

// CheckProfile rejects a profile the model cannot score: a training point per job (as
// many as TrainWeights when set), an inference list per stream, positive times and
// batches.
func (m *MultiModel) CheckProfile(p MultiProfile) error {
	var errs []error
	if len(p.Train) == 0 {
		errs = append(errs, errors.New("train: no training job: profile at least one (with no training there is nothing to choose for)"))
	}
	if w := len(m.b.TrainWeights); w > 0 && w != len(p.Train) {
		errs = append(errs, fmt.Errorf("train: %d jobs profiled but train_weights has %d: give one weight per job, in the same order, or none", len(p.Train), w))
	}
	for j, t := range p.Train {
		if t.Batch < 1 || !(t.TimeMS > 0) || math.IsInf(t.TimeMS, 0) || math.IsNaN(t.PowerMW) {
			errs = append(errs, fmt.Errorf("train[%d]: batch %d, time_ms %v, power_mw %v: want batch ≥ 1 and a positive, finite time", j, t.Batch, t.TimeMS, t.PowerMW))
		}
	}
	if len(p.Infer) != len(m.b.Streams) {
		errs = append(errs, fmt.Errorf("infer: %d streams profiled but the budgets have %d: profile every stream, in the order of streams", len(p.Infer), len(m.b.Streams)))
	}
	for i, pts := range p.Infer {
		for _, ip := range pts {
			if ip.Batch < 1 || !(ip.TimeMS > 0) || math.IsInf(ip.TimeMS, 0) || math.IsNaN(ip.PowerMW) {
				errs = append(errs, fmt.Errorf("infer[%d]: batch %d, time_ms %v, power_mw %v: want batch ≥ 1 and a positive, finite time", i, ip.Batch, ip.TimeMS, ip.PowerMW))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("profile at mode %s: %w", p.Mode.Human(), err)
	}
	return nil
}

// Evaluate scores the profile at the given batch size per stream (in stream order).
func (m *MultiModel) Evaluate(p MultiProfile, batches []int) (MultiEval, error) {
	pts, err := m.pointsAt(p, batches)
	if err != nil {
		return MultiEval{}, err
	}
	return m.evaluate(p.Mode, p.Train, m.shares(len(p.Train)), pts), nil
}

// pointsAt checks the profile and returns its inference point at the given batch size
// per stream (in stream order).
func (m *MultiModel) pointsAt(p MultiProfile, batches []int) ([]InferPoint, error) {
	if err := m.CheckProfile(p); err != nil {
		return nil, err
	}
	if len(batches) != len(m.b.Streams) {
		return nil, fmt.Errorf("evaluate at mode %s: %d batch sizes for %d streams: give one per stream", p.Mode.Human(), len(batches), len(m.b.Streams))
	}
	pts := make([]InferPoint, len(batches))
	for i, n := range batches {
		found := false
		for _, ip := range p.Infer[i] {
			if ip.Batch == n {
				pts[i], found = ip, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("evaluate at mode %s: stream %q has no profile at batch %d: profile it there or pick a profiled batch", p.Mode.Human(), m.b.Streams[i].Name, n)
		}
	}
	return pts, nil
}

// EvaluateMicro is Evaluate with each job's training micro-batch size (one per job, in
// job order; 0 the whole minibatch): each job's turn is its profiled micro-batch point.
func (m *MultiModel) EvaluateMicro(p MultiProfile, batches, micro []int) (MultiEval, error) {
	if len(micro) != len(p.Train) {
		return MultiEval{}, fmt.Errorf("evaluate at mode %s: %d micro-batch sizes for %d training jobs: give one per job (0: the whole minibatch)", p.Mode.Human(), len(micro), len(p.Train))
	}
	q := p
	q.Train = slices.Clone(p.Train)
	for j, mb := range micro {
		if mb == 0 {
			continue
		}
		i := slices.IndexFunc(p.TrainChoices(j), func(t TrainPoint) bool { return t.MicroBatch() == mb })
		if i < 0 {
			return MultiEval{}, fmt.Errorf("evaluate at mode %s: training job %d has no profile at micro-batch %d: profile it there or pick a profiled size", p.Mode.Human(), j, mb)
		}
		q.Train[j] = p.TrainChoices(j)[i]
	}
	return m.Evaluate(q, batches)
}

// evaluate is evalInto with slices of its own (the result shares none with another).
func (m *MultiModel) evaluate(mode powermode.Mode, train []TrainPoint, shares []float64, pts []InferPoint) MultiEval {
	e, _ := m.evalInto(mode, train, shares, pts, make([]StreamEval, len(pts)), make([]float64, len(train)))
	e.MicroBatches = microBatches(train)
	return e
}

// microBatches is MultiEval.MicroBatches of the training turns train: each job's
// micro-batch size, nil when every job runs whole minibatches.
func microBatches(train []TrainPoint) []int {
	var out []int
	for j, t := range train {
		if t.MicroBatch() != 0 {
			if out == nil {
				out = make([]int, len(train))
			}
			out[j] = t.MicroBatch()
		}
	}
	return out
}

// evalInto is the model itself (docs/design.md §2), the one place a configuration's
// latency, power, GPU share and training throughput are computed: for k streams and m
// jobs here, for the pair through Model.Evaluate (k = m = 1). It fills streams (one slot
// per stream) and sps (one per job) and returns them in the answer with shares, so that
// the pair's view evaluates with arrays on its stack; MicroBatches is left to the
// caller. binding is the binding constraint's term (termConstraint). Every sum starts
// from its first term, so that with one stream and one job each figure is the pair's
// expression (docs/design.md §2) to the bit.
func (m *MultiModel) evalInto(mode powermode.Mode, train []TrainPoint, shares []float64, pts []InferPoint, streams []StreamEval, sps []float64) (e MultiEval, binding int) {
	b := &m.b
	e = MultiEval{Mode: mode, Streams: streams, TrainShares: shares, TrainSPS: sps}
	for i, ip := range pts {
		rho := b.Streams[i].RateRPS * (ip.TimeMS / 1000) / float64(ip.Batch)
		streams[i] = StreamEval{Name: b.Streams[i].Name, Batch: ip.Batch, Rho: rho, FillMS: m.fill(i, ip.Batch)}
		if i == 0 {
			e.Rho = rho
		} else {
			e.Rho += rho
		}
	}
	// The longest turn that can be running when a stream's batch becomes ready: any
	// training turn (a minibatch, or one micro-batch of it), or another stream's batch
	// (EDF, no preemption). A micro-batch turn's throughput is the minibatch's: k turns
	// of B/k samples, so B/(k·τ(B/k)) = (B/k)/τ(B/k) below.
	longestTrain := train[0].TimeMS
	for _, t := range train[1:] {
		longestTrain = max(longestTrain, t.TimeMS)
	}
	m.latencies(pts, streams, longestTrain)
	// Time-weighted power; past ρ = 1 the streams' shares are scaled to sum to 1.
	share := min(e.Rho, 1)
	var inferMW, trainMW float64
	for i, ip := range pts {
		ri := streams[i].Rho
		if e.Rho > 1 {
			ri /= e.Rho
		}
		if i == 0 {
			inferMW = ri * ip.PowerMW
		} else {
			inferMW += ri * ip.PowerMW
		}
	}
	for j, t := range train {
		if j == 0 {
			trainMW = shares[j] * t.PowerMW
		} else {
			trainMW += shares[j] * t.PowerMW
		}
	}
	e.PowerMW = inferMW + (1-share)*trainMW
	free := max(0, 1-e.Rho)
	e.ObjectiveSPS = 1
	for j, t := range train {
		sps[j] = free * shares[j] * float64(t.Batch) / (t.TimeMS / 1000)
		e.ObjectiveSPS *= math.Pow(sps[j], shares[j])
	}
	return e, m.judge(&e)
}

// judge sets e's Violation, Binding and Feasible from its streams' latencies, its power
// and its share against the budgets, and returns the binding term (termConstraint).
// Excesses in the order latency (stream order), power, share; the first of equal
// excesses binds.
func (m *MultiModel) judge(e *MultiEval) int {
	b := &m.b
	e.Violation = 0
	worst, at := math.Inf(-1), -1
	for i, sb := range b.Streams {
		e.Violation, worst, at = excess(e.Violation, worst, at, i, e.Streams[i].LatencyMS/sb.LatencyMS-1)
	}
	k := len(b.Streams)
	e.Violation, worst, at = excess(e.Violation, worst, at, k, e.PowerMW/b.PowerMW-1)
	e.Violation, _, at = excess(e.Violation, worst, at, k+1, e.Rho/b.RhoMax-1)
	e.Binding = m.binding(at)
	e.Feasible = e.Violation == 0
	return at
}

// latencies sets every stream's WaitMS, QueueMS and LatencyMS: the longest turn that can
// be running when its batch becomes ready — aheadMS (a training turn; 0 without one) or
// another stream's batch (EDF, no preemption) —, the queue of batches, its fill and its
// own batch. streams holds every stream's Rho and FillMS already.
func (m *MultiModel) latencies(pts []InferPoint, streams []StreamEval, aheadMS float64) {
	for i := range pts {
		wait := aheadMS
		for k, ip := range pts {
			if k != i {
				wait = max(wait, ip.TimeMS)
			}
		}
		streams[i].WaitMS = wait
		streams[i].QueueMS = m.queue(i, pts, streams)
		streams[i].LatencyMS = streams[i].FillMS + wait + streams[i].QueueMS + pts[i].TimeMS
	}
}

// excess counts term i's relative excess x into the violation and, when it is the
// largest so far (worst, term at), makes it the binding one.
func excess(violation, worst float64, at, i int, x float64) (float64, float64, int) {
	if x > 0 {
		violation += x
	}
	if x > worst {
		worst, at = x, i
	}
	return violation, worst, at
}

// The terms of a configuration's constraints, in the order evalInto and scoreInto take
// them: term i < k is stream i's latency (k streams), term k the power, term k+1 the GPU
// share; −1 is none. The evaluation and the scoring say which term binds by its index,
// so that the pair's view reads the constraint without reading the stream names of
// its buffers (which would move them to the heap).

// termConstraint is the constraint of term at among k streams.
func termConstraint(at, k int) Constraint {
	switch {
	case at < 0:
		return ConstraintNone
	case at < k:
		return ConstraintLatency
	case at == k:
		return ConstraintPower
	}
	return ConstraintRho
}

// binding is term at as a MultiBinding: the constraint and, for a latency, its stream.
func (m *MultiModel) binding(at int) MultiBinding {
	k := len(m.b.Streams)
	out := MultiBinding{Constraint: termConstraint(at, k)}
	if at >= 0 && at < k {
		out.Stream = m.b.Streams[at].Name
	}
	return out
}

// MaxMultiCombos caps the batch vectors Choose enumerates at one mode: |𝔅|^k grows fast
// with the number of streams (3 streams × 6 sizes = 216).
const MaxMultiCombos = 1 << 16

// MultiPlan is the planner's answer over profiled modes for several workloads.
type MultiPlan struct {
	// Best is the feasible configuration with the highest objective, or, when Feasible
	// is false, the least-violating one.
	Best     MultiEval `json:"best"`
	Feasible bool      `json:"feasible"`
	// Binding names the constraint (and stream) that Best violates most, when infeasible.
	Binding MultiBinding `json:"binding"`
}

// BestAtMode returns the best batch vector at a profiled mode, enumerating every
// combination of the profiled batch sizes of every stream.
func (m *MultiModel) BestAtMode(p MultiProfile) (MultiEval, error) {
	shares := m.shares(len(p.Train))
	var best MultiEval
	n := 0
	err := m.eachTrainCombo(p, func(train []TrainPoint, pts []InferPoint) {
		if e := m.evaluate(p.Mode, train, shares, pts); n == 0 || e.Better(best) {
			best = e
			best.MicroBatches = slices.Clone(e.MicroBatches)
		}
		n++
	})
	if err != nil {
		return MultiEval{}, err
	}
	best.TrainShares = slices.Clone(shares) // every combination shared the one slice
	return best, nil
}

// EachBatchVector calls f with every vector of profiled batch sizes at the profile's mode
// (one per stream, in stream order; at most MaxMultiCombos). f must not keep the slice.
func (m *MultiModel) EachBatchVector(p MultiProfile, f func(batches []int)) error {
	batches := make([]int, len(p.Infer))
	return m.eachCombo(p, func(pts []InferPoint) {
		for i, ip := range pts {
			batches[i] = ip.Batch
		}
		f(batches)
	})
}

// eachCombo checks the profile and calls f with every combination of the profiled batch
// sizes of every stream (at most MaxMultiCombos). f must not keep pts: one buffer serves
// every combination.
func (m *MultiModel) eachCombo(p MultiProfile, f func(pts []InferPoint)) error {
	if err := m.CheckProfile(p); err != nil {
		return err
	}
	combos := 1
	for i, pts := range p.Infer {
		if len(pts) == 0 {
			return fmt.Errorf("profile at mode %s: stream %q has no inference points: profile it at least at one batch size", p.Mode.Human(), m.b.Streams[i].Name)
		}
		combos *= len(pts)
		if combos > MaxMultiCombos {
			return fmt.Errorf("profile at mode %s: more than %d batch combinations: profile fewer batch sizes per stream", p.Mode.Human(), MaxMultiCombos)
		}
	}
	idx := make([]int, len(p.Infer))
	pts := make([]InferPoint, len(p.Infer))
	for range combos {
		for i := range pts {
			pts[i] = p.Infer[i][idx[i]]
		}
		f(pts)
		// Odometer: the first stream's batch turns fastest.
		for i := range idx {
			if idx[i]++; idx[i] < len(p.Infer[i]) {
				break
			}
			idx[i] = 0
		}
	}
	return nil
}

// eachTrainCombo calls f with every combination of the jobs' training turns (each job's
// TrainChoices) and every batch combination (eachCombo): the decision chooses the
// micro-batches and the batches jointly. Whole minibatches come first, so without
// micro-batch points it is eachCombo exactly. f must keep neither slice.
func (m *MultiModel) eachTrainCombo(p MultiProfile, f func(train []TrainPoint, pts []InferPoint)) error {
	if err := m.CheckProfile(p); err != nil {
		return err
	}
	trainCombos := 1
	for j := range p.Train {
		trainCombos *= len(p.TrainChoices(j))
	}
	combos := trainCombos
	for _, pts := range p.Infer {
		if combos *= max(len(pts), 1); combos > MaxMultiCombos {
			return fmt.Errorf("profile at mode %s: more than %d combinations of batch and micro-batch sizes: profile fewer sizes", p.Mode.Human(), MaxMultiCombos)
		}
	}
	if trainCombos == 1 {
		return m.eachCombo(p, func(pts []InferPoint) { f(p.Train, pts) })
	}
	return EachTrainVector(p, func(train []TrainPoint) error {
		return m.eachCombo(p, func(pts []InferPoint) { f(train, pts) })
	})
}

// EachEval calls f with every configuration of p scored against the exact budgets — every
// vector of training turns and of batch sizes, in the decision's order (eachTrainCombo) —
// and the training turns it was scored with. The controller's step rules choose among
// them (docs/controller.md). f may keep e but not train; the evaluations share
// TrainShares, which f must not change.
func (m *MultiModel) EachEval(p MultiProfile, f func(e MultiEval, train []TrainPoint)) error {
	shares := m.shares(len(p.Train))
	return m.eachTrainCombo(p, func(train []TrainPoint, pts []InferPoint) {
		f(m.evaluate(p.Mode, train, shares, pts), train)
	})
}

// EachTrainVector calls f with every vector of training turns at p, one per job from
// its TrainChoices, the first job's choice varying fastest and whole minibatches first.
// It stops at f's first error. f must not keep the slice.
func EachTrainVector(p MultiProfile, f func(train []TrainPoint) error) error {
	choices := make([][]TrainPoint, len(p.Train))
	for j := range p.Train {
		choices[j] = p.TrainChoices(j)
	}
	idx := make([]int, len(choices))
	train := make([]TrainPoint, len(choices))
	for {
		for j := range train {
			train[j] = choices[j][idx[j]]
		}
		if err := f(train); err != nil {
			return err
		}
		j := 0
		for ; j < len(idx); j++ {
			if idx[j]++; idx[j] < len(choices[j]) {
				break
			}
			idx[j] = 0
		}
		if j == len(idx) {
			return nil
		}
	}
}

// Choose returns the best configuration over the profiled modes: every mode, every
// batch vector and every training micro-batch, jointly.
func (m *MultiModel) Choose(profiles []MultiProfile) (MultiPlan, error) {
	if len(profiles) == 0 {
		return MultiPlan{}, errNoProfiles
	}
	var best MultiEval
	for n, p := range profiles {
		e, err := m.BestAtMode(p)
		if err != nil {
			return MultiPlan{}, fmt.Errorf("planner: %w", err)
		}
		if n == 0 || e.Better(best) {
			best = e
		}
	}
	pl := MultiPlan{Best: best, Feasible: best.Feasible}
	if !best.Feasible {
		pl.Binding = best.Binding
	}
	return pl, nil
}
