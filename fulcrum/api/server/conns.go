package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what local clients can hold on the control socket, so one careless or
// hostile client (thousands of event streams, bodies announced and never sent) cannot
// exhaust fulcrumd's memory or lock the operator out. Zero fields take the defaults of
// DefaultLimits.
type Limits struct {
	// MaxConns caps open connections; the last ReservedConns of them are kept for callers
	// the policy lets change things (root, the group), so an operator still gets in when
	// other users have filled the rest (negative ReservedConns: none).
	MaxConns      int
	ReservedConns int
	// MaxConnsPerUID and MaxConnsPerPID cap one user's and one process's connections.
	MaxConnsPerUID int
	MaxConnsPerPID int
	// MaxFollowStreams caps open GET /v1/events?follow=1 streams, MaxFollowPerUID one
	// user's.
	MaxFollowStreams int
	MaxFollowPerUID  int
	// ReadHeaderTimeout bounds sending a request's headers; BodyTimeout the whole request
	// (headers and body) of any call but an import, ImportTimeout an import's.
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	ImportTimeout     time.Duration
	// WriteTimeout bounds writing an answer (one event of a stream); a client that stops
	// reading is dropped. IdleTimeout closes a kept-alive connection with no request.
	WriteTimeout time.Duration
	IdleTimeout  time.Duration
	// MaxHeaderBytes caps a request's headers.
	MaxHeaderBytes int
}

// DefaultLimits are generous for an operator's fulcrumctl, scripts and a few dashboards
// following events, and small next to fulcrumd's memory: a connection costs a few tens
// of KB, so 64 of them stay under ~5 MB.
func DefaultLimits() Limits {
	return Limits{
		MaxConns: 64, ReservedConns: 8, MaxConnsPerUID: 32, MaxConnsPerPID: 16,
		MaxFollowStreams: 32, MaxFollowPerUID: 8,
		ReadHeaderTimeout: 5 * time.Second, BodyTimeout: 30 * time.Second, ImportTimeout: 5 * time.Minute,
		WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, dv int) {
		if *v <= 0 {
			*v = dv
		}
	}
	setD := func(v *time.Duration, dv time.Duration) {
		if *v <= 0 {
			*v = dv
		}
	}
	set(&l.MaxConns, d.MaxConns)
	set(&l.MaxConnsPerUID, d.MaxConnsPerUID)
	set(&l.MaxConnsPerPID, d.MaxConnsPerPID)
	set(&l.MaxFollowStreams, d.MaxFollowStreams)
	set(&l.MaxFollowPerUID, d.MaxFollowPerUID)
	set(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	if l.ReservedConns < 0 || l.ReservedConns >= l.MaxConns {
		l.ReservedConns = 0
	} else if l.ReservedConns == 0 {
		l.ReservedConns = min(d.ReservedConns, l.MaxConns/2)
	}
	setD(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	setD(&l.BodyTimeout, d.BodyTimeout)
	setD(&l.ImportTimeout, d.ImportTimeout)
	setD(&l.WriteTimeout, d.WriteTimeout)
	setD(&l.IdleTimeout, d.IdleTimeout)
	return l
}

// connCounts counts open connections and follow streams, total and per peer.
type connCounts struct {
	lim Limits

	mu         sync.Mutex
	conns      int
	byUID      map[int]int
	byPID      map[int]int
	follow     int
	followByID map[int]int
}

func newConnCounts(lim Limits) *connCounts {
	return &connCounts{lim: lim, byUID: map[int]int{}, byPID: map[int]int{}, followByID: map[int]int{}}
}

// admit counts a new connection from c, or says why it is refused. privileged callers
// may use the reserved connections.
func (n *connCounts) admit(c api.Caller, known, privileged bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	limit := n.lim.MaxConns
	if !privileged {
		limit -= n.lim.ReservedConns
	}
	switch {
	case n.conns >= limit:
		return fmt.Errorf("fulcrumd has %d control connections open, its limit: close some (an events --follow or a script that keeps connections)", n.conns)
	case known && n.byUID[c.UID] >= n.lim.MaxConnsPerUID:
		return fmt.Errorf("uid %d has %d control connections open, the limit per user: close some", c.UID, n.byUID[c.UID])
	case known && c.PID > 0 && n.byPID[c.PID] >= n.lim.MaxConnsPerPID:
		return fmt.Errorf("pid %d has %d control connections open, the limit per process: close some", c.PID, n.byPID[c.PID])
	}
	n.conns++
	if known {
		n.byUID[c.UID]++
		if c.PID > 0 {
			n.byPID[c.PID]++
		}
	}
	return nil
}

func (n *connCounts) release(c api.Caller, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.conns--
	if !known {
		return
	}
	dec(n.byUID, c.UID)
	if c.PID > 0 {
		dec(n.byPID, c.PID)
	}
}

// startFollow counts a new event stream of c, or says why not; done releases it.
func (n *connCounts) startFollow(c api.Caller) (done func(), err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.follow >= n.lim.MaxFollowStreams:
		return nil, fmt.Errorf("fulcrumd has %d event streams open, its limit: close one (fulcrumctl events --follow) or poll GET /v1/events?since=N instead", n.follow)
	case n.followByID[c.UID] >= n.lim.MaxFollowPerUID:
		return nil, fmt.Errorf("uid %d has %d event streams open, the limit per user: close one or poll GET /v1/events?since=N instead", c.UID, n.followByID[c.UID])
	}
	n.follow++
	n.followByID[c.UID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.follow--
			dec(n.followByID, c.UID)
		})
	}, nil
}

func dec(m map[int]int, k int) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

// limitListener accepts connections, takes each one's peer credentials once (see
// peerCredentials) and counts it; a connection over a limit gets a 503 JSON answer
// saying which limit, and is closed.
type limitListener struct {
	*net.UnixListener
	counts   *connCounts
	procRoot string
	policy   func() Policy
	log      *slog.Logger
	refusing chan struct{} // a place per connection being refused (maxRefusing)
	lastLog  time.Time     // Accept's own: when a refusal was last logged
	quiet    int           // refusals not logged since
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		caller, credErr := peerCredentials(c, l.procRoot)
		known := credErr == nil
		if credErr != nil {
			l.log.Warn("control connection without peer credentials: it may only read", "err", credErr)
		}
		privileged := known && l.policy().Allow(caller) == nil
		if err := l.counts.admit(caller, known, privileged); err != nil {
			// One line a second at most: a flood of connections must not flood the journal.
			if now := time.Now(); now.Sub(l.lastLog) >= time.Second {
				l.log.Warn("refused a control connection", "reason", err, "uid", caller.UID, "pid", caller.PID, "comm", caller.Comm, "refused_since_last_line", l.quiet)
				l.lastLog, l.quiet = now, 0
			} else {
				l.quiet++
			}
			l.refuse(c, err)
			continue
		}
		return &peerConn{UnixConn: c, caller: caller, known: known, counts: l.counts}, nil
	}
}

// refuse answers a connection over a limit and closes it, without holding up Accept:
// it first reads what the client sent (the request head; up to 4 KiB, for at most a
// second) so the client is not cut off mid-write and reads the 503 saying which limit.
// At most maxRefusing connections are answered at once; beyond that they are closed
// unanswered.
func (l *limitListener) refuse(c *net.UnixConn, why error) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 4<<10)
		for n := 0; n < len(buf); {
			m, err := c.Read(buf[n:])
			n += m
			if err != nil || bytes.Contains(buf[:n], []byte("\r\n\r\n")) {
				break
			}
		}
		b := encodeErrorBody(api.Errorf(http.StatusServiceUnavailable, api.CodeBusy, "", "%v", why))
		_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	}()
}

// maxRefusing bounds the goroutines answering refused connections.
const maxRefusing = 32

// peerConn is an accepted connection with the credentials taken at accept.
type peerConn struct {
	*net.UnixConn
	caller api.Caller
	known  bool
	counts *connCounts
	once   sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() { c.counts.release(c.caller, c.known) })
	return c.UnixConn.Close()
}

type callerKey struct{}

// withPeer binds the credentials taken at accept to the connection's requests
// (http.Server.ConnContext): every request on it is decided on them, never on what
// /proc says about the pid later (a pid can be reused by another process).
func withPeer(ctx context.Context, c net.Conn) context.Context {
	pc, ok := c.(*peerConn)
	if !ok || !pc.known {
		return ctx
	}
	return context.WithValue(ctx, callerKey{}, pc.caller)
}

// callerFrom returns the peer of the request's connection.
func callerFrom(ctx context.Context) (api.Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(api.Caller)
	return c, ok
}

func encodeErrorBody(e *api.Error) []byte {
	b, _ := json.Marshal(api.ErrorBody{Error: e})
	return b
}
