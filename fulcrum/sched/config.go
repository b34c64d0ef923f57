package sched

import (
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
)

// Config holds the scheduler's knobs. Zero fields take the defaults of DefaultConfig.
// The mapstructure tags are fulcrumd's configuration keys (see daemon.Options).
//
// The latency budget L (each request's deadline is its arrival plus L) is not
// configuration: it is the operator's target, which the controller gives the scheduler
// (SetLatencyBudget, SetStreamLatencyBudgets) — one copy, held by the controller.
type Config struct {
	// DefaultTrain and DefaultInfer are the expected minibatch times used before a
	// workload has been measured (DefaultInfer for one inference batch of any size).
	DefaultTrain time.Duration `mapstructure:"default_train_ms"`
	DefaultInfer time.Duration `mapstructure:"default_infer_ms"`
	// EWMAAlpha weighs the newest inter-arrival gap in the arrival rate used before the
	// rate window fills. (Expected turn times are windowed medians: estimate.go.)
	EWMAAlpha float64 `mapstructure:"ewma_alpha"`
	// A turn overruns when it is held longer than max(OverrunFactor × expected, OverrunMin).
	OverrunFactor float64       `mapstructure:"overrun_factor"`
	OverrunMin    time.Duration `mapstructure:"overrun_min_ms"`
	// A worker holding a turn longer than max(HoldFactor × expected, HoldMin) loses it:
	// the turn is taken back and granted to others, and OnHoldExpired is called so the
	// daemon can tell the worker and drop its connection. A worker that acquires and
	// never releases would otherwise stall every other worker for as long as it lives.
	HoldFactor float64       `mapstructure:"hold_factor"`
	HoldMin    time.Duration `mapstructure:"hold_min_ms"`
	// HoldMax caps the hold limit whatever the expected time: expected times follow the
	// latest releases, so honest-looking turns of growing length (4.8 s, 45 s, 70 s)
	// would otherwise raise the limit without bound (issue 26 item 3), and one worker
	// could then keep every other waiting that long.
	HoldMax time.Duration `mapstructure:"hold_max_ms"`
	// OnHoldExpired, when set, is called (without the scheduler's lock) for every turn
	// taken back by the hold limit. began is when the turn was granted, on the
	// scheduler's clock: the daemon compares it with when connections last spoke, and
	// "now minus held" taken later (the call is deferred past the lock) drifts by the
	// delay under load.
	OnHoldExpired func(worker string, grant uint64, began time.Time, held, limit time.Duration)
	// TrustReportedDurations takes released durations as reported even when they exceed
	// the time the turn was held. Only for in-process drivers whose durations are modeled
	// rather than spent (the controller's tests); fulcrumd never sets it, since a worker
	// could otherwise inflate its workload's expected time and starve the others.
	TrustReportedDurations bool
	// OnForget, when set, is called with the scheduler's lock held when an idle workload
	// is forgotten (fulcrumd drops its metric series); it must be quick.
	OnForget func(role, workload string)
	// IdleAdmitArrivals: with an empty inference queue whose next request could not wait
	// out a training minibatch, training still runs when the expected number of arrivals
	// during it (rate × expected time) is below this. 0 means never.
	IdleAdmitArrivals float64 `mapstructure:"idle_admit_arrivals"`
	// DevK: expected times used for deadline decisions are the EWMA mean plus DevK times
	// the EWMA absolute deviation of the measured times, so a workload whose minibatch
	// time spreads is given room. 0 uses the mean alone.
	DevK float64 `mapstructure:"dev_k"`
	// Starve: a training worker kept waiting this long by the admission test is granted
	// a minibatch anyway as soon as no inference request is queued or in flight, so a
	// stale expected time (an outlier measurement) cannot block training forever. 0
	// disables it.
	Starve time.Duration `mapstructure:"starve_ms"`
	// ProfileWait: a profile batch the admission test keeps out runs at the first moment
	// no inference request is queued or in flight (waiting ones are served first; with
	// none queued the test would refuse it at every later moment too). Without it a mode
	// whose minibatch is longer than the latency budget could never be profiled while
	// requests keep arriving; requests that arrive during such a batch may miss their
	// deadlines and are counted. If no such moment comes within profileCrowdFactor ×
	// ProfileWait, the batch is refused with ErrProfileCrowdedOut. 0 disables both (the
	// batch then waits for the test to pass).
	ProfileWait time.Duration `mapstructure:"profile_wait_ms"`
	// Margin is kept free before every deadline for what the expected times do not
	// cover: waking up, the grant's trip to the worker, the worker starting the batch.
	Margin time.Duration `mapstructure:"margin_ms"`
	// The learned admission room (room.go, docs/design.md §9): each inference stream's
	// deadlines keep Margin plus a room learned from its latency window, grown in one
	// step when its p99 comes within RoomGuard × its budget of the budget (or over it),
	// shrunk on long evidence well below that band while its deadlines keep training
	// out, at most once per RoomInterval, within [RoomMin, RoomMaxFrac × its budget].
	// RoomMaxFrac = 0 turns learning off; DefaultConfig's 0.5 is fulcrumd's default
	// (docs/runtime.md "Shipping it"), a Config built field by field leaves it off.
	RoomGuard    float64       `mapstructure:"room_guard"`
	RoomMin      time.Duration `mapstructure:"room_min_ms"`
	RoomMaxFrac  float64       `mapstructure:"room_max_frac"`
	RoomInterval time.Duration `mapstructure:"room_interval_ms"`
	// OnRoom, when set, is called (without the scheduler's lock) for every change of a
	// stream's learned room.
	OnRoom func(RoomChange)
	// Window and WindowSamples bound the measurement windows (whichever is smaller).
	Window        time.Duration `mapstructure:"window_s"`
	WindowSamples int           `mapstructure:"window_samples"`
	// RecentWindow is the shorter latency window the controller watches (reported as
	// WorkloadStats.LatencyRecent), so that a violation stops counting soon after the
	// controller has acted on it.
	RecentWindow time.Duration `mapstructure:"recent_window_s"`
	// OnServed, when set, is called for every request served (workload, latency), with
	// the scheduler's lock held: it must be quick and must not call the scheduler
	// (fulcrumd feeds its Prometheus latency histogram from it).
	OnServed func(workload string, latency time.Duration)
}

// DefaultConfig is what fulcrumd uses when configs/fulcrum.yaml says nothing.
func DefaultConfig() Config {
	return Config{
		DefaultTrain:      100 * time.Millisecond,
		DefaultInfer:      20 * time.Millisecond,
		EWMAAlpha:         0.2,
		OverrunFactor:     3,
		OverrunMin:        50 * time.Millisecond,
		HoldFactor:        10,
		HoldMin:           5 * time.Second,
		HoldMax:           60 * time.Second,
		IdleAdmitArrivals: 0.1,
		DevK:              2,
		Margin:            5 * time.Millisecond,
		RoomGuard:         0.05,
		RoomMaxFrac:       0.5,
		RoomInterval:      5 * time.Second,
		Starve:            5 * time.Second,
		ProfileWait:       time.Second,
		Window:            30 * time.Second,
		WindowSamples:     10000,
		RecentWindow:      5 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.DefaultTrain <= 0 {
		c.DefaultTrain = d.DefaultTrain
	}
	if c.DefaultInfer <= 0 {
		c.DefaultInfer = d.DefaultInfer
	}
	if c.EWMAAlpha <= 0 || c.EWMAAlpha > 1 {
		c.EWMAAlpha = d.EWMAAlpha
	}
	if c.OverrunFactor <= 0 {
		c.OverrunFactor = d.OverrunFactor
	}
	if c.OverrunMin <= 0 {
		c.OverrunMin = d.OverrunMin
	}
	if c.HoldFactor <= 0 {
		c.HoldFactor = d.HoldFactor
	}
	if c.HoldMin <= 0 {
		c.HoldMin = d.HoldMin
	}
	if c.HoldMax <= 0 {
		c.HoldMax = max(d.HoldMax, c.HoldMin)
	}
	if c.IdleAdmitArrivals < 0 {
		c.IdleAdmitArrivals = 0
	}
	if c.DevK < 0 {
		c.DevK = 0
	}
	if c.Margin < 0 {
		c.Margin = 0
	}
	if c.RoomGuard <= 0 || c.RoomGuard >= 0.5 {
		c.RoomGuard = d.RoomGuard
	}
	if c.RoomMin < 0 {
		c.RoomMin = 0
	}
	if c.RoomMaxFrac < 0 {
		c.RoomMaxFrac = 0
	}
	if c.RoomInterval <= 0 {
		c.RoomInterval = d.RoomInterval
	}
	if c.Window <= 0 {
		c.Window = d.Window
	}
	if c.WindowSamples <= 0 {
		c.WindowSamples = d.WindowSamples
	}
	if c.RecentWindow <= 0 {
		c.RecentWindow = d.RecentWindow
	}
	return c
}

// Validate checks a complete Config, as fulcrumd builds it from its configuration (every
// knob set; zero only where 0 means "off"). Failures are *optcheck.FieldError naming the
// field. New does not call it: programmatic callers leave fields zero for the defaults.
func (c Config) Validate() error {
	var ck optcheck.Checks
	optcheck.Positive(&ck, "DefaultTrain", c.DefaultTrain)
	optcheck.Positive(&ck, "DefaultInfer", c.DefaultInfer)
	if !(c.EWMAAlpha > 0 && c.EWMAAlpha <= 1) {
		ck.Fail("EWMAAlpha", c.EWMAAlpha, "must be in (0,1]")
	}
	optcheck.Positive(&ck, "OverrunFactor", c.OverrunFactor)
	optcheck.Positive(&ck, "OverrunMin", c.OverrunMin)
	if !(c.HoldFactor >= 1) {
		ck.Fail("HoldFactor", c.HoldFactor, "must be at least 1 (a multiple of the expected turn time)")
	}
	optcheck.Positive(&ck, "HoldMin", c.HoldMin)
	if c.HoldMax < c.HoldMin {
		ck.Fail("HoldMax", c.HoldMax, "must be at least the hold limit's floor (HoldMin; fulcrumd: worker.hold_min_ms)")
	}
	optcheck.NonNegative(&ck, "IdleAdmitArrivals", c.IdleAdmitArrivals)
	optcheck.NonNegative(&ck, "DevK", c.DevK)
	optcheck.NonNegative(&ck, "Margin", c.Margin)
	optcheck.NonNegative(&ck, "Starve", c.Starve)
	optcheck.NonNegative(&ck, "ProfileWait", c.ProfileWait)
	if !(c.RoomGuard > 0 && c.RoomGuard < 0.5) {
		ck.Fail("RoomGuard", c.RoomGuard, "must be in (0,0.5): the guard band is this fraction of the latency budget")
	}
	optcheck.NonNegative(&ck, "RoomMin", c.RoomMin)
	if !(c.RoomMaxFrac >= 0 && c.RoomMaxFrac < 1) {
		ck.Fail("RoomMaxFrac", c.RoomMaxFrac, "must be in [0,1): a fraction of the latency budget (0 turns the learned room off)")
	}
	optcheck.Positive(&ck, "RoomInterval", c.RoomInterval)
	optcheck.Positive(&ck, "Window", c.Window)
	optcheck.Positive(&ck, "WindowSamples", c.WindowSamples)
	optcheck.Positive(&ck, "RecentWindow", c.RecentWindow)
	return ck.Err()
}
