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
}

// Client is one registered worker connection. Acquire/Release are meant for one
// goroutine; Arrivals may be called from others at the same time.
type Client struct {
	conn *net.UnixConn

	ID              string
	Token           string
	LatencyBudgetMS float64

	wmu sync.Mutex // serialises writes
	seq uint64

	grants  chan proto.Msg
	mu      sync.Mutex
	errs    []*proto.Error // errors not tied to a waiting call, oldest first
	readErr error
	done    chan struct{}
	hb      chan proto.Msg
	errNote chan struct{} // signalled when an error reply is queued
}

// Error is a protocol error reply from fulcrumd.
type Error = proto.Error

// Dial connects to the worker socket at path and registers.
func Dial(ctx context.Context, path string, reg Registration) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to fulcrumd at %s: %w (is fulcrumd running? check runtime_dir)", path, err)
	}
	c := &Client{conn: nc.(*net.UnixConn), grants: make(chan proto.Msg, 4), done: make(chan struct{}), hb: make(chan proto.Msg, 4), errNote: make(chan struct{}, 1)}
	registered := make(chan proto.Msg, 1)
	go c.readLoop(registered)
	err = c.write(proto.Msg{Type: proto.TypeRegister, V: proto.Version, Role: reg.Role, Workload: reg.Workload,
		Batch: reg.Batch, BatchSizes: reg.BatchSizes, PID: os.Getpid(), Seq: 1})
	if err != nil {
		c.Close()
		return nil, err
	}
	select {
	case m := <-registered:
		if m.Type == proto.TypeError {
			c.Close()
			return nil, fmt.Errorf("register with fulcrumd: %w", &proto.Error{Code: m.Code, Message: m.Message, Ref: m.Ref})
		}
		if m.V != proto.Version {
			c.Close()
			return nil, fmt.Errorf("register with fulcrumd: it speaks protocol v%d, this client v%d; upgrade one of them", m.V, proto.Version)
		}
		c.ID, c.Token, c.LatencyBudgetMS = m.WorkerID, m.Token, m.LatencyBudgetMS
		return c, nil
	case <-c.done:
		c.Close()
		return nil, fmt.Errorf("register with fulcrumd: connection closed: %w", c.readError())
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

func (c *Client) readError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readErr
}

func (c *Client) readLoop(registered chan proto.Msg) {
	defer close(c.done)
	dec := proto.NewDecoder(c.conn, 0)
	for {
		line, err := dec.ReadLine()
		if err != nil {
			var pe *proto.Error
			if errors.As(err, &pe) {
				continue // an oversized reply: not something fulcrumd sends
			}
			c.mu.Lock()
			c.readErr = err
			c.mu.Unlock()
			return
		}
		m, perr := proto.Parse(line)
		if perr != nil {
			continue
		}
		switch m.Type {
		case proto.TypeRegistered:
			select {
			case registered <- m:
			default:
			}
		case proto.TypeGrant:
			c.grants <- m
		case proto.TypeHeartbeat:
			select {
			case c.hb <- m:
			default:
			}
		case proto.TypeError:
			if m.Ref == proto.TypeRegister {
				select {
				case registered <- m:
					continue
				default:
				}
			}
			c.mu.Lock()
			c.errs = append(c.errs, &proto.Error{Code: m.Code, Message: m.Message, Ref: m.Ref})
			c.mu.Unlock()
			select {
			case c.errNote <- struct{}{}:
			default:
			}
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
		return fmt.Errorf("send %s to fulcrumd: %w", m.Type, err)
	}
	return nil
}

// TakeError returns (and forgets) the oldest error reply not yet returned by a call.
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

// Acquire asks for a turn and waits for the grant. An error reply received before the
// grant (to this acquire or to an earlier release or arrivals) is returned instead.
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
	for {
		select {
		case g := <-c.grants:
			return g, nil
		case <-c.done:
			return proto.Msg{}, fmt.Errorf("fulcrumd closed the connection while waiting for a grant: %w", c.readError())
		case <-ctx.Done():
			return proto.Msg{}, ctx.Err()
		case <-c.errNote:
			if e := c.TakeError(); e != nil {
				return proto.Msg{}, e
			}
		}
	}
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
	select {
	case <-c.hb:
		return nil
	case <-c.done:
		return fmt.Errorf("fulcrumd closed the connection: %w", c.readError())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close ends the connection; fulcrumd releases a held turn at once.
func (c *Client) Close() error { return c.conn.Close() }
