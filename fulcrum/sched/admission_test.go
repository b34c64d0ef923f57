package sched

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// streamSim drives a scheduler on a fake clock with workers that serve every grant in
// a modeled time: an inference batch of n takes 2 ms + 0.6 ms × n, a training
// minibatch 30 ms. Workers re-acquire at once after each release.
type streamSim struct {
	t       *testing.T
	h       *harness
	pending map[string]Grant     // worker → the grant it is serving
	until   map[string]time.Time // worker → when it releases
	refused map[string]int       // worker → requests refused (rate_limited)
	trained int
	seq     uint64
}

func newStreamSim(t *testing.T, h *harness) *streamSim {
	return &streamSim{t: t, h: h, pending: map[string]Grant{}, until: map[string]time.Time{}, refused: map[string]int{}}
}

func (s *streamSim) service(g Grant) time.Duration {
	if g.Kind == proto.KindTrain {
		return 30 * msec
	}
	return 2*msec + time.Duration(g.Batch)*600*time.Microsecond
}

// arrive reports n requests on w; refusals are counted, any other error fails.
func (s *streamSim) arrive(w string, n int) {
	reqs := make([]proto.Request, n)
	for i := range reqs {
		s.seq++
		reqs[i] = proto.Request{ID: "r" + strconv.FormatUint(s.seq, 10)}
	}
	err := s.h.s.Arrivals(w, reqs)
	var pe *proto.Error
	switch {
	case err == nil:
	case errors.As(err, &pe) && pe.Code == proto.CodeRateLimited:
		s.refused[w] += len(pe.IDs)
	default:
		s.t.Fatalf("arrivals on %s: %v", w, err)
	}
}

// step advances 1 ms: releases due grants, re-acquires, takes new grants.
func (s *streamSim) step() {
	s.h.clock.Advance(msec)
	now := s.h.clock.Now()
	for w, g := range s.pending {
		if now.Before(s.until[w]) {
			continue
		}
		delete(s.pending, w)
		if g.Kind == proto.KindTrain {
			s.trained++
		}
		s.h.must(s.h.s.Release(w, Release{Grant: g.ID}))
		s.seq++
		s.h.must(s.h.s.Acquire(w, s.seq))
	}
	for _, g := range s.h.grants() {
		s.pending[g.Worker] = g
		s.until[g.Worker] = now.Add(s.service(g))
	}
}

// Issue 26 item 6: a second inference stream at 2,048 req/s with batch 4,096 made a
// steady 20 req/s stream miss 90 of 200 deadlines and training fell from 429 to 4
// minibatches in 10 s. With per-stream admission the flood's excess is refused
// (rate_limited, to its own client), the steady stream keeps its deadlines and training
// keeps running.
func TestFloodingStreamCannotTakeAnotherStreamsDeadlines(t *testing.T) {
	// Misses are counted after the first two seconds: until then the expected times are
	// the defaults and the flood's rate is being measured (a few requests may miss).
	run := func(flood bool) (steadyMiss, steadyServed uint64, trained int, refused map[string]int) {
		c := cfg(100*msec, 30*msec, 5*msec)
		var h *harness
		var start time.Time
		c.OnServed = func(w string, lat time.Duration) {
			if w == "steady" && h.clock.Now().Sub(start) >= 2*time.Second && lat > 100*msec {
				steadyMiss++
			}
		}
		h = newHarness(t, c)
		start = h.clock.Now()
		sim := newStreamSim(t, h)
		steady := h.register(proto.RoleInfer, "steady", 8)
		tr := h.register(proto.RoleTrain, "train", 8)
		h.must(h.s.Acquire(steady, 1))
		h.must(h.s.Acquire(tr, 1))
		var fl string
		if flood {
			fl = h.register(proto.RoleInfer, "flood", proto.MaxBatch)
			h.must(h.s.Acquire(fl, 1))
		}
		for ms := 0; ms < 10000; ms++ {
			if ms%50 == 0 {
				sim.arrive(steady, 1) // 20 req/s
			}
			if flood {
				sim.arrive(fl, 2) // 2,000 req/s
			}
			sim.step()
		}
		wl, _ := h.s.Snapshot().Workload(proto.RoleInfer, "steady")
		t.Logf("flood %v: steady stream %d deadline misses in all, %d after the first two seconds; p99 %.1f ms over the last 5 s", flood, wl.DeadlineMisses, steadyMiss, wl.LatencyRecent.P99MS)
		return steadyMiss, wl.Served, sim.trained, sim.refused
	}
	baseMiss, baseServed, baseTrained, _ := run(false)
	miss, served, trained, refused := run(true)
	t.Logf("10 s simulated: steady alone %d/%d missed (after 2 s), training %d; with the flood %d/%d missed, training %d, flood refused %d, steady refused %d",
		baseMiss, baseServed, baseTrained, miss, served, trained, refused["infer-3"], refused["infer-1"])
	if refused["infer-1"] != 0 {
		t.Fatalf("the steady stream had %d requests refused", refused["infer-1"])
	}
	if served < 190 || miss > baseMiss+served/100 {
		t.Fatalf("with the flood the steady stream missed %d of %d served (alone %d of %d); want its deadlines kept", miss, served, baseMiss, baseServed)
	}
	if refused["infer-3"] == 0 {
		t.Fatal("no request of the flooding stream was refused")
	}
	if trained < baseTrained/4 {
		t.Fatalf("training ran %d minibatches with the flood, %d without; want it kept running", trained, baseTrained)
	}
}

// A refusal of many long ids names as many as fit the error line, from the first
// refused, and says how many were refused in all (they are the message's last ones).
func TestRateLimitedErrorFitsTheLine(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 30*msec, 5*msec))
	h.register(proto.RoleInfer, "steady", 8)
	fl := h.register(proto.RoleInfer, "flood", proto.MaxBatch)
	reqs := make([]proto.Request, proto.MaxRequestsMsg)
	for i := range reqs {
		reqs[i] = proto.Request{ID: fmt.Sprintf("%0128d", i)}
	}
	var pe *proto.Error
	if err := h.s.Arrivals(fl, reqs); !errors.As(err, &pe) || pe.Code != proto.CodeRateLimited {
		t.Fatalf("arrivals: %v; want rate_limited", err)
	}
	line, err := proto.Encode(proto.ErrorMsg(pe, 0))
	if err != nil || len(line) > proto.MaxLineBytes {
		t.Fatalf("the error line is %d bytes (%v); want at most %d", len(line), err, proto.MaxLineBytes)
	}
	wl, _ := h.s.Snapshot().Workload(proto.RoleInfer, "flood")
	first := int(proto.MaxRequestsMsg - wl.Refused)
	if len(pe.IDs) == 0 || pe.IDs[0] != reqs[first].ID || !strings.Contains(pe.Message, fmt.Sprintf("the last %d of", wl.Refused)) {
		t.Fatalf("named %d ids from %q, message %q; want the refused (%d) from %q", len(pe.IDs), pe.IDs[0], pe.Message, wl.Refused, reqs[first].ID)
	}
}

// Admission is work-conserving: a stream may use what the other streams leave (less one
// fair share), so a busy stream beside an idle one is not refused — here 800 req/s at
// 0.6 ms each (about half the GPU) with a second stream registered and silent.
func TestBusyStreamBesideAnIdleOneIsNotRefused(t *testing.T) {
	h := newHarness(t, cfg(100*msec, 30*msec, 5*msec))
	sim := newStreamSim(t, h)
	busy := h.register(proto.RoleInfer, "busy", 256)
	h.register(proto.RoleInfer, "idle", 8)
	h.must(h.s.Acquire(busy, 1))
	warm := 0
	for ms := 0; ms < 5000; ms++ {
		if ms == 1000 {
			// Until the stream's rate and batch times are measured, a request is costed
			// at the default batch time: a few may be refused.
			warm, sim.refused[busy] = sim.refused[busy], 0
		}
		if ms%5 == 0 {
			sim.arrive(busy, 4) // 800 req/s
		}
		sim.step()
	}
	wl, _ := h.s.Snapshot().Workload(proto.RoleInfer, "busy")
	t.Logf("busy stream: %d served, %d refused in the first second, %d after", wl.Served, warm, sim.refused[busy])
	if sim.refused[busy] != 0 {
		t.Fatalf("%d of the busy stream's requests refused beside an idle stream after the first second", sim.refused[busy])
	}
}
