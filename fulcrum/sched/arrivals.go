package sched

// Inference arrivals and turn requests (acquire).

import (
	"slices"
	"sort"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// MaxPending bounds one worker's queued plus in-flight requests, so a worker that
// reports arrivals and never serves them cannot grow fulcrumd without bound.
const MaxPending = 65536

// Arrivals queues inference requests for worker id. Each request's arrival is now minus
// its age. Duplicate ids (queued or in flight) are rejected; the others are queued.
func (s *Scheduler) Arrivals(id string, reqs []proto.Request) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, perr := s.get(id, proto.TypeArrivals)
	if perr != nil {
		return perr
	}
	if w.spec.Role != proto.RoleInfer {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "arrivals are for inference workers; %s registered as %s", id, w.spec.Role)
	}
	if len(w.ids)+len(reqs) > MaxPending {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "%d requests are already queued or in flight (limit %d); acquire and serve them before reporting more", len(w.ids), MaxPending)
	}
	now := s.clock.Now()
	var dups []string
	for _, r := range reqs {
		if _, dup := w.ids[r.ID]; dup {
			dups = append(dups, r.ID)
			continue
		}
		at := now.Add(-time.Duration(r.AgeMS * float64(time.Millisecond)))
		q := &request{id: r.ID, arrived: at, deadline: at.Add(s.budgetOf(w))}
		w.ids[r.ID] = q
		i := sort.Search(len(w.queue), func(i int) bool { return w.queue[i].deadline.After(q.deadline) })
		w.queue = slices.Insert(w.queue, i, q)
		w.st.arrive(at)
	}
	s.schedule()
	if len(dups) > 0 {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "request ids already queued or in flight were ignored: %v; use unique ids", clipList(dups))
	}
	return nil
}

func clipList(v []string) []string {
	if len(v) > 8 {
		return append(v[:8:8], "…")
	}
	return v
}

// Acquire asks for the next turn. seq is echoed in the grant.
func (s *Scheduler) Acquire(id string, seq uint64) error {
	s.mu.Lock()
	defer s.unlockAndDeliver()
	w, perr := s.get(id, proto.TypeAcquire)
	if perr != nil {
		return perr
	}
	if s.turn != nil && s.turn.w == w {
		return proto.Errorf(proto.CodeOutOfOrder, proto.TypeAcquire, "grant %d is still held; release it before acquiring again", s.turn.grant.ID)
	}
	if w.wantTurn {
		return proto.Errorf(proto.CodeOutOfOrder, proto.TypeAcquire, "an acquire is already pending; wait for its grant")
	}
	if w.expired {
		return expiredErr(proto.TypeAcquire)
	}
	w.wantTurn = true
	w.acquiredAt = s.clock.Now()
	w.acquireSeq = seq
	s.schedule()
	return nil
}
