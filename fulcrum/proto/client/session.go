package client

// Session: a worker registration that outlives fulcrumd restarts (issue 27).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// ErrAway is returned by Session calls that do not wait while fulcrumd is away (the
// connection was lost and is not re-registered yet).
var ErrAway = errors.New("fulcrumd is away (the connection was lost; reconnecting)")

// SessionOptions tune a Session. Zero fields take the defaults in brackets.
type SessionOptions struct {
	// Reconnection attempts wait MinBackoff after the loss [50 ms], then twice as long
	// each time up to MaxBackoff [500 ms]; each wait is jittered by ±Jitter of itself
	// [0.3], so that workers restarted together do not reconnect in lockstep.
	MinBackoff, MaxBackoff time.Duration
	Jitter                 float64
	// RegisterTimeout bounds one reconnection's connect and register [5 s].
	RegisterTimeout time.Duration
	Logger          *slog.Logger
	// Seed seeds the jitter (0: from the process id and the time).
	Seed uint64
}

func (o SessionOptions) withDefaults() SessionOptions {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 500 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Jitter <= 0 || o.Jitter >= 1 {
		o.Jitter = 0.3
	}
	if o.RegisterTimeout <= 0 {
		o.RegisterTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Seed == 0 {
		o.Seed = uint64(os.Getpid())<<32 ^ uint64(time.Now().UnixNano())
	}
	return o
}

// Session is a worker registration that survives fulcrumd restarts. When the connection
// is lost — fulcrumd sends shutting_down, or the connection ends with no reason given —
// it reconnects with a bounded, jittered exponential back-off and registers again with
// the same Registration. Errors that end a connection because of the worker itself
// (turn_expired, idle_timeout) and refused registrations are returned, not retried.
//
// For inference, the Session keeps the requests reported with Arrivals and not yet
// granted: it reports them again (with their age) after re-registering, so no accepted
// request is lost with the connection; while fulcrumd is away the worker takes them
// with TakeQueued and serves them itself.
//
// Acquire and Release are for one goroutine; Arrivals, TakeQueued and the accessors may
// be called from others.
type Session struct {
	path string
	reg  Registration
	opt  SessionOptions

	rmu      sync.Mutex // one reconnection at a time
	mu       sync.Mutex
	c        *Client // nil while away
	gen      uint64  // registrations made: a grant is valid only on its own
	grantGen uint64  // the registration the held grant came from (0: none held)
	lostAt   time.Time
	nextTry  time.Time
	backoff  time.Duration
	rng      *rand.Rand
	queued   map[string]time.Time // reported, not yet granted: id → arrival
	order    []string             // queued ids, oldest first (may hold granted ones)
	closed   bool
	refused  []Refusal // taken from a lost connection, not yet from the session

	reconnects int
	away       time.Duration // summed over every loss
	lastGap    time.Duration
}

// Open connects to fulcrumd's worker socket and registers. The first connection is not
// retried: a worker started with no fulcrumd is told so at once.
func Open(ctx context.Context, path string, reg Registration, opt SessionOptions) (*Session, error) {
	opt = opt.withDefaults()
	c, err := Dial(ctx, path, reg)
	if err != nil {
		return nil, err
	}
	return &Session{path: path, reg: reg, opt: opt, c: c, gen: 1, rng: rand.New(rand.NewPCG(opt.Seed, 0x7e57)),
		queued: map[string]time.Time{}}, nil
}

// Lost reports whether err means the connection to fulcrumd is gone for a reason a
// reconnection cures: fulcrumd is stopping (shutting_down), or the connection ended
// with no reason given (reset, broken pipe, end of file, refused, the socket missing).
func Lost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrAway) {
		return true
	}
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe.Code == proto.CodeShutdown || pe.Code == proto.CodeBusy
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, net.ErrClosed)
}

// Connected says whether the session is registered with a live fulcrumd.
func (s *Session) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c != nil
}

// ID is the worker id of the present registration ("" while away).
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return ""
	}
	return s.c.ID
}

// Stats are what the session went through: reconnections, the time spent away in all,
// and the last gap (loss → registered again).
func (s *Session) Stats() (reconnects int, away, lastGap time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects, s.away, s.lastGap
}

// lose drops connection c (if it is still the session's) after err.
func (s *Session) lose(c *Client, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != c || c == nil {
		return
	}
	_ = c.Close()
	for _, r := range c.TakeRefused() { // read before the loss: still refusals
		s.refused = append(s.refused, r)
		delete(s.queued, r.ID) // not to be reported again
	}
	s.c = nil
	s.grantGen = 0
	s.lostAt = time.Now()
	s.backoff = s.opt.MinBackoff
	s.nextTry = s.lostAt.Add(s.jitter(s.backoff))
	s.opt.Logger.Warn("lost the connection to fulcrumd; reconnecting", "socket", s.path, "err", err)
}

func (s *Session) jitter(d time.Duration) time.Duration {
	f := 1 + s.opt.Jitter*(2*s.rng.Float64()-1)
	return time.Duration(float64(d) * f)
}

// current is the live connection and its registration, or nil.
func (s *Session) current() (*Client, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c, s.gen
}

// TryReconnect makes one reconnection attempt if one is due (the back-off has passed)
// and returns whether the session is connected afterwards. A registration fulcrumd
// refuses (other than shutting_down or busy) is returned as an error.
func (s *Session) TryReconnect(ctx context.Context) (bool, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.mu.Lock()
	if s.c != nil {
		s.mu.Unlock()
		return true, nil
	}
	if s.closed {
		s.mu.Unlock()
		return false, errors.New("session closed")
	}
	if time.Now().Before(s.nextTry) {
		s.mu.Unlock()
		return false, nil
	}
	s.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, s.opt.RegisterTimeout)
	c, err := Dial(dctx, s.path, s.reg)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if !Lost(err) && !errors.Is(err, context.DeadlineExceeded) {
			return false, fmt.Errorf("register again with fulcrumd: %w", err)
		}
		s.backoff = min(2*s.backoff, s.opt.MaxBackoff)
		s.nextTry = time.Now().Add(s.jitter(s.backoff))
		return false, nil
	}
	if s.closed {
		_ = c.Close()
		return false, errors.New("session closed")
	}
	// Report again what the lost registration had not served: it is fulcrumd's queue
	// again, at its real age.
	now := time.Now()
	s.order = slices.DeleteFunc(s.order, func(id string) bool { _, ok := s.queued[id]; return !ok })
	var reqs []proto.Request
	for _, id := range s.order {
		reqs = append(reqs, proto.Request{ID: id, AgeMS: float64(now.Sub(s.queued[id])) / float64(time.Millisecond)})
	}
	for len(reqs) > 0 {
		n := arrivalsChunk(reqs)
		if err := c.Arrivals(reqs[:n]); err != nil {
			_ = c.Close()
			s.nextTry = time.Now().Add(s.jitter(s.backoff))
			return false, nil
		}
		reqs = reqs[n:]
	}
	s.c = c
	s.gen++
	s.reconnects++
	s.lastGap = now.Sub(s.lostAt)
	s.away += s.lastGap
	s.opt.Logger.Info("registered again with fulcrumd", "worker", c.ID, "away", s.lastGap, "requeued", len(s.order))
	return true, nil
}

// Reconnect waits (retrying with the back-off) until the session is registered again,
// or ctx ends.
func (s *Session) Reconnect(ctx context.Context) error {
	for {
		ok, err := s.TryReconnect(ctx)
		if ok || err != nil {
			return err
		}
		s.mu.Lock()
		wait := time.Until(s.nextTry)
		s.mu.Unlock()
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Acquire asks for a turn and waits for the grant. While fulcrumd is away it waits for
// it to come back (reconnecting) and asks again: it returns a grant, an error that is
// not a lost connection, or ctx's error.
func (s *Session) Acquire(ctx context.Context) (proto.Msg, error) {
	for {
		g, err := s.AcquireOrAway(ctx)
		if !errors.Is(err, ErrAway) {
			return g, err
		}
		if err := s.Reconnect(ctx); err != nil {
			return proto.Msg{}, err
		}
	}
}

// AcquireOrAway is Acquire that returns ErrAway instead of waiting when the connection
// is lost or already down: a worker that runs unmanaged while fulcrumd is away calls it,
// and TryReconnect between its own batches.
func (s *Session) AcquireOrAway(ctx context.Context) (proto.Msg, error) {
	c, gen := s.current()
	if c == nil {
		return proto.Msg{}, ErrAway
	}
	g, err := c.Acquire(ctx)
	if err != nil {
		if Lost(err) && ctx.Err() == nil {
			s.lose(c, err)
			return proto.Msg{}, fmt.Errorf("%w: %w", ErrAway, err)
		}
		return g, err
	}
	s.mu.Lock()
	s.grantGen = gen
	for _, id := range g.RequestIDs {
		delete(s.queued, id)
	}
	if len(s.order) > 2*len(s.queued)+64 { // granted ids linger in order: drop them
		s.order = slices.DeleteFunc(s.order, func(id string) bool { _, ok := s.queued[id]; return !ok })
	}
	s.mu.Unlock()
	return g, nil
}

// Release ends the turn of grant g. A grant of a lost registration ended with it:
// releasing it does nothing, as does a release that finds the connection gone.
func (s *Session) Release(g uint64, d time.Duration, samples int, results []proto.Result) error {
	s.mu.Lock()
	c, ok := s.c, s.grantGen == s.gen && s.grantGen != 0
	s.grantGen = 0
	s.mu.Unlock()
	if c == nil || !ok {
		return nil
	}
	if err := c.Release(g, d, samples, results); err != nil {
		if Lost(err) {
			s.lose(c, err)
			return nil
		}
		return err
	}
	return nil
}

// Arrivals reports inference requests (age: how long ago each arrived). The session
// keeps them until they are granted: while fulcrumd is away they are kept (TakeQueued
// hands them to the worker to serve itself) and reported again after re-registering.
func (s *Session) Arrivals(reqs []proto.Request) error {
	now := time.Now()
	s.mu.Lock()
	for _, r := range reqs {
		if _, dup := s.queued[r.ID]; !dup {
			s.order = append(s.order, r.ID)
		}
		s.queued[r.ID] = now.Add(-time.Duration(r.AgeMS * float64(time.Millisecond)))
	}
	c := s.c
	var err error
	if c != nil {
		// Sent under s.mu: a reconnection's re-report and this send never both carry
		// an id.
		err = c.Arrivals(reqs)
	}
	s.mu.Unlock()
	if err != nil && Lost(err) {
		s.lose(c, err)
		return nil
	}
	return err
}

// TakeRefused returns (and forgets) the requests fulcrumd refused with rate_limited
// (Client.TakeRefused), also those read on a connection since lost. The session forgets
// them too: they are not reported again after re-registering nor handed out by
// TakeQueued.
func (s *Session) TakeRefused() []Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.refused
	s.refused = nil
	if s.c != nil {
		out = append(out, s.c.TakeRefused()...)
	}
	for _, r := range out {
		delete(s.queued, r.ID)
	}
	return out
}

// TakeQueued removes and returns up to n of the oldest requests reported and not
// granted, for the worker to serve itself while fulcrumd is away. It returns nothing
// while connected (fulcrumd has them).
func (s *Session) TakeQueued(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		return nil
	}
	var out []string
	i := 0
	for ; i < len(s.order) && len(out) < n; i++ {
		id := s.order[i]
		if _, ok := s.queued[id]; ok {
			out = append(out, id)
			delete(s.queued, id)
		}
	}
	s.order = s.order[i:]
	return out
}

// Close ends the session; fulcrumd releases a held turn at once.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.c == nil {
		return nil
	}
	err := s.c.Close()
	s.c = nil
	return err
}

// arrivalsChunk is how many of reqs (at least one) fit in one arrivals line fulcrumd
// accepts: at most proto.MaxRequestsMsg requests and half of proto.MaxLineBytes (its
// reader's default cap, leaving room for the envelope), counting each request's JSON.
// A queue re-reported after a long absence can hold thousands.
func arrivalsChunk(reqs []proto.Request) int {
	size := 0
	for i, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return max(i, 1)
		}
		size += len(b) + 1
		if i == proto.MaxRequestsMsg || size > proto.MaxLineBytes/2 {
			return max(i, 1)
		}
	}
	return len(reqs)
}
