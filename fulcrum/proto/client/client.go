// Package client is a Go worker client for fulcrumd's worker socket: register, report
// inference arrivals, acquire a turn, release it. The synthetic workers, the round-trip
// benchmark and the daemon's tests use it; the Python client in clients/python is its
// twin.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
)

// Registration is what a worker tells fulcrumd about itself.
type Registration struct {
	Role       string // proto.RoleTrain or proto.RoleInfer
	Workload   string
	Batch      int
	BatchSizes []int
	// NoProfiles declines profile batches (register says "profiles": false): set it when
	// the worker cannot run a real batch of the workload for a profile grant, so that
	// fulcrumd leaves the workload out of live profiling rather than store the time of a
	// batch that ran nothing.
	NoProfiles bool
	// MicroBatches (training) are the micro-batch sizes the worker accepts, divisors of
	// Batch: a train grant's MicroBatch then says how many samples to run in that turn,
	// and the worker steps its optimizer once per Batch samples (gradient accumulation).
	// Empty: whole minibatches only.
	MicroBatches []int
}

// Client is one registered worker connection. Acquire/Release are meant for one
// goroutine; Arrivals and Heartbeat may be called from others at the same time.
//
// There is no reader goroutine: the call waiting for a reply reads the socket itself,
// one call at a time, and hands what it reads for other calls to them. Handing each
// grant from a reader goroutine to Acquire cost a thread wake-up, about 18 µs of a
// 66 µs round trip between processes (docs/runtime.md).
type Client struct {
	conn *net.UnixConn

	ID              string
	Token           string
	LatencyBudgetMS float64

	wmu sync.Mutex // serialises writes
	seq uint64

	lines lineReader // used only by the call that set reading

	mu      sync.Mutex
	reading bool           // a call is reading the socket
	changed chan struct{}  // closed (and replaced) when the reader leaves or hands something over
	grants  []proto.Msg    // grants read by another call, oldest first
	hbs     int            // heartbeat echoes read by another call
	errs    []*proto.Error // errors not tied to a waiting call, oldest first
	refused []Refusal      // requests refused with rate_limited, not yet taken
	readErr error          // why the connection ended; nil while it is up
}

// Error is a protocol error reply from fulcrumd.
type Error = proto.Error

// Refusal is one inference request fulcrumd refused (rate_limited: the stream asked for
// more than its share of the GPU). Err is the error that named it, shared by the requests
// it named. The request will not be granted; the connection and the other requests carry on.
type Refusal struct {
	ID  string
	Err *proto.Error
}

// Dial connects to the worker socket at path and registers.
func Dial(ctx context.Context, path string, reg Registration) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to fulcrumd at %s: %w (is fulcrumd running? check runtime_dir)", path, err)
	}
	uc := nc.(*net.UnixConn)
	c := &Client{conn: uc, lines: lineReader{r: uc, max: proto.MaxLineBytes}, changed: make(chan struct{})}
	msg := proto.Msg{Type: proto.TypeRegister, V: proto.Version, Role: reg.Role, Workload: reg.Workload,
		Batch: reg.Batch, BatchSizes: reg.BatchSizes, MicroBatches: reg.MicroBatches, PID: os.Getpid(), Seq: 1}
	if reg.NoProfiles {
		no := false
		msg.Profiles = &no
	}
	err = c.write(msg)
	if err != nil {
		c.Close()
		return nil, err
	}
	m, err := c.await(ctx, awaitRegistered)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("register with fulcrumd: %w", err)
	}
	if m.V != proto.Version {
		c.Close()
		return nil, fmt.Errorf("register with fulcrumd: it speaks protocol v%d, this client v%d; upgrade one of them", m.V, proto.Version)
	}
	c.ID, c.Token, c.LatencyBudgetMS = m.WorkerID, m.Token, m.LatencyBudgetMS
	return c, nil
}

// awaitKind is the reply a call waits for.
type awaitKind int

const (
	awaitRegistered awaitKind = iota
	awaitGrant
	awaitHeartbeat
	awaitNothing // read what is there (closeReason)
)

// await returns the reply of the kind asked for: one another call has read already, or
// the next one read from the socket by this call, when no other call is reading (else it
// waits for that call to hand the reply over or to stop reading). An error reply ends an
// awaitGrant wait (the caller returns it) and an awaitRegistered wait when it refers to
// the register; otherwise it is queued for TakeError and the next Acquire.
func (c *Client) await(ctx context.Context, kind awaitKind) (proto.Msg, error) {
	for {
		c.mu.Lock()
		if m, ok := c.takeLocked(kind); ok {
			c.mu.Unlock()
			return m, nil
		}
		if kind == awaitGrant && len(c.errs) > 0 {
			e := c.errs[0]
			c.errs = c.errs[1:]
			c.mu.Unlock()
			return proto.Msg{}, e
		}
		if c.readErr != nil {
			err := c.closedErrLocked(c.readErr)
			c.mu.Unlock()
			return proto.Msg{}, err
		}
		if !c.reading {
			c.reading = true
			c.mu.Unlock()
			return c.read(ctx, kind)
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return proto.Msg{}, ctx.Err()
		}
	}
}

// takeLocked takes a reply of kind that another call has read (c.mu held).
func (c *Client) takeLocked(kind awaitKind) (proto.Msg, bool) {
	switch {
	case kind == awaitGrant && len(c.grants) > 0:
		g := c.grants[0]
		c.grants = c.grants[1:]
		return g, true
	case kind == awaitHeartbeat && c.hbs > 0:
		c.hbs--
		return proto.Msg{Type: proto.TypeHeartbeat}, true
	}
	return proto.Msg{}, false
}

// notifyLocked wakes the calls waiting for the reader (c.mu held).
func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// read is await's reading side, run by the one call that set c.reading.
func (c *Client) read(ctx context.Context, kind awaitKind) (proto.Msg, error) {
	defer func() {
		c.mu.Lock()
		c.reading = false
		c.notifyLocked() // another waiter may take over the reading
		c.mu.Unlock()
	}()
	// A cancelled context interrupts a blocked read through the read deadline. The
	// deadline may land after this call has returned; a read then times out with the
	// context still live, which the loop below takes as "read again".
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		line, err := c.lines.next()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = c.conn.SetReadDeadline(time.Time{})
				if ctx.Err() != nil {
					return proto.Msg{}, ctx.Err()
				}
				continue
			}
			if errors.Is(err, errLineTooLong) {
				continue // an oversized reply: not something fulcrumd sends
			}
			c.mu.Lock()
			c.readErr = err
			err = c.closedErrLocked(err)
			c.mu.Unlock()
			return proto.Msg{}, err
		}
		m, perr := proto.Parse(line)
		if perr != nil {
			continue
		}
		switch m.Type {
		case proto.TypeRegistered:
			if kind == awaitRegistered {
				return m, nil
			}
		case proto.TypeGrant:
			if kind == awaitGrant {
				return m, nil
			}
			c.mu.Lock()
			c.grants = append(c.grants, m)
			c.notifyLocked()
			c.mu.Unlock()
		case proto.TypeHeartbeat:
			if kind == awaitHeartbeat {
				return m, nil
			}
			c.mu.Lock()
			c.hbs++
			c.notifyLocked()
			c.mu.Unlock()
		case proto.TypeError:
			e := &proto.Error{Code: m.Code, Message: m.Message, Ref: m.Ref, IDs: m.RequestIDs}
			if m.Code == proto.CodeRateLimited {
				// A refusal of some requests, not of the call waiting: an Acquire stays
				// pending at fulcrumd and keeps waiting for its grant.
				c.mu.Lock()
				for _, id := range m.RequestIDs {
					c.refused = append(c.refused, Refusal{ID: id, Err: e})
				}
				c.notifyLocked()
				c.mu.Unlock()
				continue
			}
			if kind == awaitGrant || (kind == awaitRegistered && m.Ref == proto.TypeRegister) {
				return proto.Msg{}, e
			}
			c.mu.Lock()
			c.errs = append(c.errs, e)
			c.notifyLocked()
			c.mu.Unlock()
		}
	}
}

func (c *Client) write(m proto.Msg) error {
	b, err := proto.Encode(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.conn.Write(b); err != nil {
		if e := c.closeReason(); e != nil {
			return fmt.Errorf("send %s to fulcrumd: it closed the connection: %w", m.Type, e)
		}
		return fmt.Errorf("send %s to fulcrumd: %w", m.Type, err)
	}
	return nil
}

// closeReason, after a write failed, reads what fulcrumd sent before it closed the
// connection (turn_expired, idle_timeout, shutting_down: docs/protocol.md) and returns
// that error, so the caller sees why rather than a broken pipe. nil when another call is
// reading (it will return the error) or none came.
func (c *Client) closeReason() *proto.Error {
	c.mu.Lock()
	if c.reading {
		c.mu.Unlock()
		return nil
	}
	c.reading = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.read(ctx, awaitNothing)
	var pe *proto.Error
	if errors.As(err, &pe) { // the read saw the connection end and took the reason
		return pe
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.takeClosingLocked()
}

// takeClosingLocked takes the last queued error that fulcrumd sends before closing a
// connection (c.mu held).
func (c *Client) takeClosingLocked() *proto.Error {
	for i := len(c.errs) - 1; i >= 0; i-- {
		switch e := c.errs[i]; e.Code {
		case proto.CodeTurnExpired, proto.CodeIdleTimeout, proto.CodeShutdown, proto.CodeBusy:
			c.errs = append(c.errs[:i], c.errs[i+1:]...)
			return e
		}
	}
	return nil
}

// closedErrLocked is the error for a connection that ended with readErr: fulcrumd's
// reason when it sent one (c.mu held).
func (c *Client) closedErrLocked(readErr error) error {
	if e := c.takeClosingLocked(); e != nil {
		return fmt.Errorf("fulcrumd closed the connection: %w", e)
	}
	return fmt.Errorf("fulcrumd closed the connection: %w", readErr)
}

// TakeError returns (and forgets) the oldest error reply not yet returned by a call.
// Replies are read only while a call waits on the socket (Acquire, Heartbeat).
func (c *Client) TakeError() *proto.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) == 0 {
		return nil
	}
	e := c.errs[0]
	c.errs = c.errs[1:]
	return e
}

// TakeRefused returns (and forgets) the requests fulcrumd refused with rate_limited since
// the last call, oldest first, each with the error that named it. They will not be granted:
// fail them to their submitters. Replies are read only while a call waits on the socket
// (Acquire, Heartbeat); a refusal never ends such a wait.
func (c *Client) TakeRefused() []Refusal {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.refused
	c.refused = nil
	return out
}

// Acquire asks for a turn and waits for the grant. An error reply received before the
// grant (to this acquire or to an earlier release or arrivals) is returned instead,
// except rate_limited, which refuses requests, not the acquire: see TakeRefused.
func (c *Client) Acquire(ctx context.Context) (proto.Msg, error) {
	if e := c.TakeError(); e != nil {
		return proto.Msg{}, e
	}
	c.wmu.Lock()
	c.seq++
	seq := c.seq
	c.wmu.Unlock()
	if err := c.write(proto.Msg{Type: proto.TypeAcquire, Seq: seq}); err != nil {
		return proto.Msg{}, err
	}
	return c.await(ctx, awaitGrant)
}

// Release ends the turn of grant g with the measured duration. samples is the training
// samples processed (0: the registered batch); results are inference outcomes (nil: all
// ok). fulcrumd replies only on error, which the next Acquire returns.
func (c *Client) Release(g uint64, d time.Duration, samples int, results []proto.Result) error {
	return c.write(proto.Msg{Type: proto.TypeRelease, Grant: g, DurationMS: float64(d) / float64(time.Millisecond), Samples: samples, Results: results})
}

// Arrivals reports inference requests that arrived (age: how long ago each did).
func (c *Client) Arrivals(reqs []proto.Request) error {
	return c.write(proto.Msg{Type: proto.TypeArrivals, Requests: reqs})
}

// Heartbeat checks the connection and waits for fulcrumd's echo.
func (c *Client) Heartbeat(ctx context.Context) error {
	if err := c.write(proto.Msg{Type: proto.TypeHeartbeat}); err != nil {
		return err
	}
	_, err := c.await(ctx, awaitHeartbeat)
	return err
}

// Close ends the connection; fulcrumd releases a held turn at once.
func (c *Client) Close() error { return c.conn.Close() }
