package sched

// Inference arrivals and turn requests (acquire).

import (
	"encoding/json"
	"fmt"
	"math"
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
	w.offer(now, len(reqs))
	adm := s.admission(w, now)
	var dups, refused []string
	for _, r := range reqs {
		if _, dup := w.ids[r.ID]; dup {
			dups = append(dups, r.ID)
			continue
		}
		if !adm.take(len(w.queue) <= 1) {
			refused = append(refused, r.ID)
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
	if len(refused) > 0 {
		w.st.refused += uint64(len(refused))
		if ok, dropped := s.refuseLog.allow(now, time.Second); ok {
			s.log.Warn("inference requests beyond the stream's share of the GPU refused (rate_limited)", "worker", w.id,
				"workload", w.name, "refused", len(refused), "share", adm.share, "cost_ms", adm.cost*1000, "bucket_ms", w.bucket*1000, "queued", len(w.queue), "rate_hz", w.st.rate(now, w.since), "not_logged_since_last", dropped)
		}
		// Refusals are always the message's last requests (duplicates aside): once the
		// bucket is empty it stays so for the rest of the message.
		named := refused
		if n := idsFitting(refused, MaxRefusedIDBytes); n < len(refused) {
			named = refused[:n]
		}
		msg := fmt.Sprintf("the last %d of %d requests refused (request_ids names %d): this stream asks for more than its share of the GPU (%.0f%% with %d inference streams); send fewer requests or lower the rate (docs/protocol.md)",
			len(refused), len(reqs), len(named), 100*adm.share, adm.streams)
		if len(dups) > 0 {
			msg += fmt.Sprintf("; request ids already queued or in flight were ignored: %v", clipList(dups))
		}
		return &proto.Error{Code: proto.CodeRateLimited, Ref: proto.TypeArrivals, Message: msg, IDs: named}
	}
	if len(dups) > 0 {
		return proto.Errorf(proto.CodeInvalid, proto.TypeArrivals, "request ids already queued or in flight were ignored: %v; use unique ids", clipList(dups))
	}
	return nil
}

// MaxRefusedIDBytes bounds the request ids a rate_limited error names, so the error
// line stays well inside the clients' line cap (proto.MaxLineBytes).
const MaxRefusedIDBytes = 32 << 10

// idsFitting is how many of ids, from the first, fit in max bytes as a JSON list.
func idsFitting(ids []string, max int) int {
	n := 0
	for i, id := range ids {
		b, _ := json.Marshal(id) // as the error line will carry it, escapes included
		n += len(b) + 1
		if n > max {
			return i
		}
	}
	return len(ids)
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

// Per-stream admission (issue 26 item 6). Deadline-ordered dispatch serves whichever
// stream's requests are oldest, so a stream asking for more GPU time than there is
// keeps a backlog whose deadlines always come first: a 2,048 req/s stream with batch
// 4,096 made a steady 20 req/s stream miss 90 of 200 deadlines and starved training.
// With two or more inference streams registered, each may use at most a share of the
// GPU time: what the other streams use (their admitted rate × cost) is left to them, and
// a stream gets the rest less one fair share f = 1/(streams+1) — room for the others'
// bursts and for training — and at least f. It is a token bucket of GPU time: it refills
// at the share, holds at most f × the tightest latency budget (the backlog a stream may
// build ahead of the others' requests), and each request costs its expected service time
// (the stream's expected batch time over the batch it is expected to be served in). Requests beyond it are
// refused at once with rate_limited, to the stream's own worker, unless the stream has
// at most one request queued; a lone stream is never limited (nothing else is there to protect but
// training, which yields by design).
type admission struct {
	w       *worker
	on      bool
	share   float64
	streams int
	cost    float64 // s of GPU time per request
}

// admission prepares the admission of w's arrivals at now. Called with s.mu held.
func (s *Scheduler) admission(w *worker, now time.Time) *admission {
	a := &admission{w: w}
	var tightest time.Duration
	for _, o := range s.order {
		if o.spec.Role != proto.RoleInfer {
			continue
		}
		a.streams++
		if b := s.budgetOf(o); tightest == 0 || b < tightest {
			tightest = b
		}
	}
	if a.streams < 2 {
		w.bucketAt = time.Time{} // full again when a second stream comes
		return a
	}
	fair := 1 / float64(a.streams+1)
	// What the other streams use is left to them; the rest, less one fair share (room
	// for their bursts and for training), may be this stream's.
	var others float64
	for _, o := range s.order {
		if o != w && o.spec.Role == proto.RoleInfer {
			_, u := s.requestCost(o, now)
			others += u
		}
	}
	a.share = max(fair, 1-fair-others)
	a.cost, _ = s.requestCost(w, now)
	// Only a stream asking for well over its share is held to it: near the share (a
	// host busy with something else slows every batch) the queue absorbs the difference
	// and no honest stream is refused for a slow moment. Once held, it stays held while
	// it asks for more than its share, and OverloadHold after.
	demand := w.offered * a.cost
	if demand > OverloadFactor*a.share || (demand > a.share && now.Before(w.heldUntil)) {
		w.heldUntil = now.Add(OverloadHold)
	}
	a.on = now.Before(w.heldUntil)
	// The bucket holds at most a fair share of the tightest budget: the backlog a stream
	// may build ahead of the others' requests, whatever its share.
	capS := max(fair*tightest.Seconds(), a.cost)
	if w.bucketAt.IsZero() {
		w.bucket = capS
	} else if dt := now.Sub(w.bucketAt).Seconds(); dt > 0 {
		w.bucket = min(capS, w.bucket+a.share*dt)
	}
	w.bucketAt = now
	return a
}

// requestCost is the expected GPU time (s) of one of w's requests — its expected batch
// time over the batch a request is expected to be served in: what arrives in one latency
// budget at the stream's admitted rate, at most its batch size — and the share of the
// GPU its admitted rate uses at that cost. Called with s.mu held.
func (s *Scheduler) requestCost(w *worker, now time.Time) (cost, use float64) {
	rate := w.st.rate(now, w.since)
	n := int(math.Ceil(rate * s.budgetOf(w).Seconds()))
	n = min(max(n, 1), w.spec.Batch)
	// The median alone (no deviations), warm-up included (typical): a spread or a slow
	// warm-up measurement must not make an honest stream look costly. (With the latest
	// warm-up measurement, one tail of a heavy-tailed worker made an 8 req/s stream look
	// 13× as costly and had its requests refused: TestAdmissionRoomPerStream, seed 16.)
	cost = s.expInferBy(w, n, (*estimate).typical).Seconds() / float64(n)
	return cost, rate * cost
}

// OverloadFactor: per-stream admission refuses a stream's requests only while the GPU
// time it asks for (its offered rate, refused requests included, × its cost per
// request) exceeds this many times its share.
const OverloadFactor = 1.5

// OverloadHold is how long a stream stays held to its share after it last asked for
// more than OverloadFactor × its share (or, while held, for more than its share).
const OverloadHold = 5 * time.Second

// offerTau is the time constant of the offered-rate estimate.
const offerTau = 250 * time.Millisecond

// offer folds n requests offered at now into w's offered rate (req/s, decaying with
// offerTau): what the stream asks for, admitted or not.
func (w *worker) offer(now time.Time, n int) {
	if !w.offeredAt.IsZero() {
		if dt := now.Sub(w.offeredAt); dt > 0 {
			w.offered *= math.Exp(-dt.Seconds() / offerTau.Seconds())
		}
	}
	w.offeredAt = now
	w.offered += float64(n) / offerTau.Seconds()
}

// take admits one request if the stream's bucket holds its cost, or if the stream has
// at most one request queued (short, it delays the others by a request or two: a stream
// whose requests are served about as they come is never refused, however much of the
// GPU it uses).
func (a *admission) take(short bool) bool {
	switch {
	case a.w.bucket >= a.cost:
		a.w.bucket -= a.cost
		return true
	case short || !a.on:
		a.w.bucket = 0
		return true
	}
	return false
}
