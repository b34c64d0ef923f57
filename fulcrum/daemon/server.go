// Package daemon is fulcrumd's runtime: the worker socket (newline-delimited JSON, see
// docs/protocol.md), the GPU turn scheduler behind it, the single-instance lock in the
// runtime directory, and the wiring of the profile store and board backend.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
)

// Config is the worker server's configuration.
type Config struct {
	// RuntimeDir holds worker.sock and the fulcrumd.pid lock file.
	RuntimeDir string `mapstructure:"runtime_dir"`
	// SocketMode is the worker socket's permission bits (0660: owner and group).
	SocketMode os.FileMode `mapstructure:"socket_mode"`
	// MaxLineBytes caps one protocol line (proto.MaxLineBytes when 0).
	MaxLineBytes int `mapstructure:"max_line_bytes"`
	// MaxWorkers caps concurrent worker connections (64 when 0).
	MaxWorkers int `mapstructure:"max_workers"`
	// MaxPerProcess caps the connections one peer process (its pid from SO_PEERCRED at
	// accept) may hold (MaxWorkers/4 when 0), and ReservedSlots of the MaxWorkers slots
	// (MaxWorkers/8 when 0; -1 for none; at most MaxWorkers/4) go only to a process
	// holding no connection, so a process — however many silent connections it opens —
	// cannot lock the others out (issue 26 item 4).
	// When every slot is taken, a connection from a process holding none evicts the
	// longest-silent connection of the process holding the most (not one holding the
	// turn). Per process, not per uid: containers' workers all run as root.
	MaxPerProcess int `mapstructure:"max_per_process"`
	ReservedSlots int `mapstructure:"reserved_slots"`
	// WriteTimeout is how long a worker may leave its socket unread before fulcrumd
	// drops the connection (5 s when 0), so one stuck worker never stalls the others.
	WriteTimeout time.Duration `mapstructure:"write_timeout_ms"`
	// RegisterTimeout is how long a new connection may take to register before fulcrumd
	// closes it (5 s when 0), so connections that never register cannot hold the
	// MaxWorkers slots and lock real workers out.
	RegisterTimeout time.Duration `mapstructure:"register_timeout_ms"`
	// Group owns worker.sock when it exists ("" or "-": the socket keeps fulcrumd's
	// group); fulcrumd sets it from worker.group, else control.group.
	Group string       `mapstructure:"group"`
	Sched sched.Config `mapstructure:"scheduler"`
	Clock sched.Clock  // sched.RealClock when nil
	Log   *slog.Logger
}

// SocketName and PIDFileName are the files fulcrumd keeps in the runtime directory.
const (
	SocketName  = paths.WorkerSocketName
	PIDFileName = "fulcrumd.pid"
)

// Server owns the worker socket and the scheduler.
type Server struct {
	cfg   Config
	log   *slog.Logger
	sched *sched.Scheduler

	lock *os.File
	ln   *net.UnixListener

	mu    sync.Mutex
	conns map[*conn]struct{}
	byID  map[string]*conn // registered connections by worker id
	// perPeer counts the connections each peer process holds (key: pid; -1 unknown).
	perPeer map[int32]int
	closed  bool
	wg      sync.WaitGroup

	lingering chan struct{} // refused connections being drained (lingerClose)

	// Warnings a local process can trigger at will are rate-limited.
	refusedLog, idleLog, badInputLog, evictLog logLimit
}

// NewServer prepares a server; Listen takes the socket.
func NewServer(cfg Config) *Server {
	d := DefaultConfig()
	if cfg.SocketMode == 0 {
		cfg.SocketMode = d.SocketMode
	}
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = d.MaxLineBytes
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = d.MaxWorkers
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = d.WriteTimeout
	}
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = d.RegisterTimeout
	}
	// The defaults scale with MaxWorkers: 64 → 16 per process, 8 reserved.
	if cfg.MaxPerProcess <= 0 {
		cfg.MaxPerProcess = max(1, cfg.MaxWorkers*d.MaxPerProcess/d.MaxWorkers)
	}
	switch {
	case cfg.ReservedSlots == 0:
		cfg.ReservedSlots = cfg.MaxWorkers * d.ReservedSlots / d.MaxWorkers
	case cfg.ReservedSlots < 0:
		cfg.ReservedSlots = 0
	}
	// At most a quarter of the slots are reserved, so a small max_workers left with the
	// default reserve still lets a process hold several.
	cfg.ReservedSlots = min(cfg.ReservedSlots, cfg.MaxWorkers/4)
	if cfg.Clock == nil {
		cfg.Clock = sched.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Log,
		conns:     map[*conn]struct{}{},
		byID:      map[string]*conn{},
		perPeer:   map[int32]int{},
		lingering: make(chan struct{}, 16),
	}
	sc := cfg.Sched
	next := sc.OnHoldExpired
	sc.OnHoldExpired = func(worker string, grant uint64, began time.Time, held, limit time.Duration) {
		s.holdExpired(worker, grant, began, held, limit)
		if next != nil {
			next(worker, grant, began, held, limit)
		}
	}
	s.sched = sched.New(sc, cfg.Clock, cfg.Log.With("component", "sched"))
	return s
}

// holdExpired tells a worker whose turn the hold limit took back, and drops it: its
// connection is closed once the error is written.
func (s *Server) holdExpired(worker string, grant uint64, began time.Time, held, limit time.Duration) {
	s.mu.Lock()
	c := s.byID[worker]
	// The process that let a turn expire is taken for dead or stuck: its other
	// connections that stayed silent through that turn are dropped too, so a process
	// with many connections whose reader is gone (a socket closed in one thread while
	// another blocks in recv leaves it half-open, with no EOF) costs one hold limit, not
	// one per connection (issue 26 item 3). Those that spoke since are kept, on the
	// scheduler's probation (a short hold limit): a live worker in another thread of the
	// process carries on, and a dead one costs a second and takes the rest with it.
	var same []*conn
	// began is on the scheduler's clock, which in fulcrumd is the real one, as conn.last.
	// (Taking "now minus held" here was late by however long this call waited after the
	// turn expired, and under load dropped a connection that had spoken just after the
	// grant: the CI failure of test_turn_held_past_the_hold_limit.)
	if c != nil && c.pid > 0 {
		for o := range s.conns {
			if o != c && o.pid == c.pid && o.last().Before(began) {
				same = append(same, o)
			}
		}
	}
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.sendErr(proto.Errorf(proto.CodeTurnExpired, proto.TypeGrant,
		"grant %d was held %v, past the hold limit %v (worker.hold_factor × the expected time, at least worker.hold_min_ms, at most worker.hold_max_ms; 1 s for a minute after a turn of the same process expired); the turn was given to others and this connection is closed: release every grant, and reconnect",
		grant, held.Round(time.Millisecond), limit.Round(time.Millisecond)), 0)
	c.closeSoon()
	if len(same) > 0 {
		c.logger().Warn("dropping the worker connections of the process that let its turn expire and stayed silent through it", "connections", len(same))
	}
	for _, o := range same {
		o.sendErr(proto.Errorf(proto.CodeTurnExpired, "",
			"another worker connection of this process (pid %d, %s) held its turn past the hold limit and this one stayed silent through it: taken for dead and closed; reconnect", c.pid, worker), 0)
		o.closeSoon()
	}
}

// Scheduler is the scheduler behind the socket (for the controller and profiler).
func (s *Server) Scheduler() *sched.Scheduler { return s.sched }

// Snapshot is the scheduler's measurements now.
func (s *Server) Snapshot() sched.Snapshot { return s.sched.Snapshot() }

// SocketPath is where workers connect.
func (s *Server) SocketPath() string { return filepath.Join(s.cfg.RuntimeDir, SocketName) }

// ErrAlreadyRunning is wrapped by Listen's error when another fulcrumd holds the runtime
// directory.
var ErrAlreadyRunning = errors.New("another fulcrumd is running")

// Listen takes the single-instance lock (a flock on fulcrumd.pid) and the worker socket.
// A socket file left by a crashed fulcrumd is removed; one a live process answers on is
// an error naming it.
func (s *Server) Listen() error {
	if err := s.Lock(); err != nil {
		return err
	}
	f, sock := s.lock, s.SocketPath()
	s.lock = nil // set again below with the listener; f is closed on failure
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		f.Close()
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, s.cfg.SocketMode); err != nil {
		ln.Close()
		f.Close()
		return fmt.Errorf("chmod %s: %w", sock, err)
	}
	gid, err := s.chownGroup(sock)
	if err != nil {
		ln.Close()
		f.Close()
		return err
	}
	s.lock, s.ln = f, ln
	s.log.Info("worker socket listening", "path", sock, "mode", fmt.Sprintf("%#o", s.cfg.SocketMode), "group_gid", gid)
	return nil
}

// Lock takes the runtime directory's lock (one fulcrumd per runtime directory, and so
// per board) and removes a stale worker socket, without listening yet: fulcrumd checks
// its board under the lock before workers can connect (Listen). Listen takes the lock
// itself when Lock was not called.
func (s *Server) Lock() error {
	if s.lock != nil {
		return nil
	}
	dir := s.cfg.RuntimeDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create runtime directory %s: %w (set runtime_dir or run as a user who may create it)", dir, err)
	}
	sock := s.SocketPath()
	pidPath := filepath.Join(dir, PIDFileName)
	f, err := os.OpenFile(pidPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open lock file %s: %w", pidPath, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid := readPID(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("%w (pid %s) on %s; stop it first (e.g. systemctl stop fulcrumd) or use another runtime_dir", ErrAlreadyRunning, pid, sock)
		}
		return fmt.Errorf("lock %s: %w", pidPath, err)
	}
	// The lock is ours. A socket file that still answers belongs to a process that does
	// not take the lock (an older fulcrumd?); one that does not answer is stale.
	if _, err := os.Lstat(sock); err == nil {
		c, derr := net.DialTimeout("unix", sock, 200*time.Millisecond)
		if derr == nil {
			c.Close()
			f.Close()
			return fmt.Errorf("%w (pid ?) on %s: the socket answers but %s is not locked; stop that process or use another runtime_dir", ErrAlreadyRunning, sock, pidPath)
		}
		if err := os.Remove(sock); err != nil {
			f.Close()
			return fmt.Errorf("remove stale socket %s: %w", sock, err)
		}
		s.log.Info("removed a stale worker socket left by an earlier fulcrumd", "path", sock)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	s.lock = f
	return nil
}

// chownGroup gives the socket the configured group (issue 26 item 11: it used to keep
// fulcrumd's group whatever control.group said). A group that does not exist leaves the
// socket's group as it is, logged, as for control.sock; the gid set is returned (-1:
// none).
func (s *Server) chownGroup(path string) (int, error) {
	name := s.cfg.Group
	if name == "" || name == "-" {
		return -1, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		var unknown user.UnknownGroupError
		if errors.As(err, &unknown) {
			s.log.Info("group does not exist; the worker socket keeps fulcrumd's group", "group", name, "gid", os.Getgid())
			return -1, nil
		}
		return -1, fmt.Errorf("look up group %q for %s: %w", name, path, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1, fmt.Errorf("group %q has a non-numeric gid %q", name, g.Gid)
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return -1, fmt.Errorf("chown %s to group %s: %w (run fulcrumd as root or as a member of %s, or set worker.group)", path, name, err, name)
	}
	return gid, nil
}

func readPID(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	p := strings.TrimSpace(string(b[:n]))
	if p == "" {
		return "?"
	}
	return p
}

// Serve accepts workers until ctx ends, then closes every connection, stops the
// scheduler and removes the socket and pid file. Listen must have succeeded.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		return errors.New("daemon: Serve before Listen")
	}
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	var err error
	for {
		c, aerr := s.ln.AcceptUnix()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("accept on %s: %w", s.SocketPath(), aerr)
			}
			break
		}
		s.accept(ctx, c)
	}
	s.shutdown()
	return err
}

func (s *Server) shutdown() {
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.sendErr(proto.Errorf(proto.CodeShutdown, "", "fulcrumd is shutting down; reconnect after it restarts"), 0)
		c.closeSoon()
	}
	s.wg.Wait()
	s.sched.Close()
	os.Remove(filepath.Join(s.cfg.RuntimeDir, PIDFileName))
	s.lock.Close()
	s.log.Info("worker socket closed")
}

func (s *Server) accept(ctx context.Context, uc *net.UnixConn) {
	c := &conn{s: s, c: uc, out: make(chan []byte, 256), log: s.log, pid: -1}
	c.cred, c.credErr = peerCred(uc)
	if c.credErr != nil {
		s.log.Warn("cannot read worker peer credentials", "err", c.credErr)
	} else {
		c.pid = c.cred.Pid
		c.log = s.log.With("peer_pid", c.cred.Pid, "peer_uid", c.cred.Uid)
	}
	c.touch()
	s.mu.Lock()
	refuse, victim := s.admitLocked(c)
	if refuse != nil {
		s.mu.Unlock()
		if refuse.Code == proto.CodeBusy {
			if ok, dropped := s.refusedLog.allow(time.Now()); ok {
				c.log.Warn("worker connection refused: too many connections; raise worker.max_workers or stop idle workers (fulcrumctl workers lists the registered ones)",
					"reason", refuse.Message, "max_workers", s.cfg.MaxWorkers, "max_per_process", s.cfg.MaxPerProcess, "not_logged_since_last", dropped)
			}
		}
		b, _ := proto.Encode(proto.ErrorMsg(refuse, 0))
		_ = uc.SetDeadline(time.Now().Add(time.Second))
		_, _ = uc.Write(b)
		s.lingerClose(uc)
		return
	}
	s.conns[c] = struct{}{}
	s.perPeer[c.pid]++
	c.counted = true
	s.wg.Add(2)
	s.mu.Unlock()
	if victim != nil {
		if ok, dropped := s.evictLog.allow(time.Now()); ok {
			victim.logger().Warn("worker connection evicted: every slot was taken and a process holding none connected; this process held the most",
				"new_peer_pid", c.pid, "silent_s", time.Since(victim.last()).Seconds(), "not_logged_since_last", dropped)
		}
		victim.sendErr(proto.Errorf(proto.CodeBusy, "",
			"evicted: every worker slot (worker.max_workers %d) was taken and a process holding none connected; this process (pid %d) held the most connections and this one was silent longest: reconnect with fewer connections",
			s.cfg.MaxWorkers, victim.pid), 0)
		victim.closeSoon()
	}
	// Until it registers, a connection must not sit on a slot (cleared at register).
	_ = uc.SetReadDeadline(time.Now().Add(s.cfg.RegisterTimeout))
	go c.writeLoop()
	go c.readLoop(ctx)
}

// admitLocked decides whether connection c may take a slot (s.mu held): refuse is the
// error it gets otherwise. A process may hold MaxPerProcess connections; the last
// ReservedSlots slots go only to a process holding none; with every slot taken, a
// process holding none evicts (victim) the longest-silent connection, not holding the
// turn, of the process holding the most connections — at least two, so a process's only
// worker is never evicted for another. The victim's slot is freed here.
func (s *Server) admitLocked(c *conn) (refuse *proto.Error, victim *conn) {
	if s.closed {
		return proto.Errorf(proto.CodeShutdown, "", "fulcrumd is shutting down"), nil
	}
	held := s.perPeer[c.pid]
	if held >= s.cfg.MaxPerProcess {
		return proto.Errorf(proto.CodeBusy, "", "this process (pid %d) holds %d worker connections, the most one process may (worker.max_per_process); close idle ones or raise the limit", c.pid, held), nil
	}
	n := len(s.conns)
	if held > 0 {
		if n >= s.cfg.MaxWorkers-s.cfg.ReservedSlots {
			return proto.Errorf(proto.CodeBusy, "", "too many worker connections: %d of worker.max_workers %d, the last %d (worker.reserved_slots) kept for processes holding none, and this process holds %d; raise worker.max_workers or stop idle workers",
				n, s.cfg.MaxWorkers, s.cfg.ReservedSlots, held), nil
		}
		return nil, nil
	}
	if n < s.cfg.MaxWorkers {
		return nil, nil
	}
	holder := s.byID[s.sched.TurnHolder()]
	var most int
	for o := range s.conns {
		if !o.counted || o == holder {
			continue
		}
		k := s.perPeer[o.pid]
		if k < 2 {
			continue
		}
		if victim == nil || k > most || (k == most && o.last().Before(victim.last())) {
			victim, most = o, k
		}
	}
	if victim == nil {
		return proto.Errorf(proto.CodeBusy, "", "too many worker connections (worker.max_workers %d), each process holding one; raise worker.max_workers or stop idle workers", s.cfg.MaxWorkers), nil
	}
	s.uncountLocked(victim)
	return nil, victim
}

// uncountLocked frees c's slot (s.mu held); once per connection.
func (s *Server) uncountLocked(c *conn) {
	if !c.counted {
		return
	}
	c.counted = false
	delete(s.conns, c)
	if s.perPeer[c.pid]--; s.perPeer[c.pid] <= 0 {
		delete(s.perPeer, c.pid)
	}
}

// lingerClose closes a refused connection after reading what the worker sent (up to a
// second): closing a unix socket with unread data resets it, and the worker would see
// "connection reset" instead of the error just written. At most 16 linger at once;
// beyond that the connection is closed at once.
func (s *Server) lingerClose(uc *net.UnixConn) {
	select {
	case s.lingering <- struct{}{}:
	default:
		uc.Close()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.lingering }()
		_ = uc.CloseWrite()
		_, _ = io.Copy(io.Discard, io.LimitReader(uc, 64<<10))
		uc.Close()
	}()
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}

// conn is one worker connection. The reader goroutine handles messages in order. A reply
// or grant is written at once, without blocking, by the goroutine that makes it when
// nothing is queued before it; otherwise (or for what the socket buffer did not take) it
// goes to the writer goroutine through a bounded queue, so a worker that stops reading is
// dropped instead of blocking the scheduler. Writing directly saves a goroutine hand-off,
// which across processes is a thread wake-up: 15–20% of a round trip (docs/runtime.md).
type conn struct {
	s       *Server
	c       *net.UnixConn
	log     *slog.Logger
	cred    *unix.Ucred
	credErr error
	// pid is the peer process (SO_PEERCRED at accept; -1 unknown); counted: the
	// connection holds a slot (s.mu); lastNS: when it last sent a message (unix ns).
	pid     int32
	counted bool
	lastNS  atomic.Int64

	mu      sync.Mutex
	out     chan []byte
	outDone bool
	// queued counts messages handed to the writer and not yet fully written; a direct
	// write is allowed only at 0, which keeps the messages in order.
	queued   int
	workerID string
	token    string
}

func (c *conn) send(m proto.Msg) {
	b, err := proto.Encode(m)
	if err != nil {
		c.logger().Error("encode reply", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outDone {
		return
	}
	if c.queued == 0 {
		n, err := c.writeNow(b)
		if err != nil {
			c.log.Warn("write to worker failed; closing the connection", "err", err)
			c.dropLocked()
			return
		}
		if n == len(b) {
			return
		}
		b = b[n:] // the socket buffer is full: the writer sends the rest, in order
	}
	select {
	case c.out <- b:
		c.queued++
	default:
		// The worker is not reading its socket: drop it rather than stall everyone.
		c.log.Warn("worker is not reading its socket; dropping the connection")
		c.dropLocked()
	}
}

// dropLocked ends the connection from the sending side (c.mu held): no more output, the
// writer stops, the reader sees the socket closed.
func (c *conn) dropLocked() {
	c.outDone = true
	close(c.out)
	c.c.Close()
}

func (c *conn) touch()          { c.lastNS.Store(time.Now().UnixNano()) }
func (c *conn) last() time.Time { return time.Unix(0, c.lastNS.Load()) }

// logger is the connection's logger (it gains the worker id at register).
func (c *conn) logger() *slog.Logger {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log
}

func (c *conn) sendErr(e *proto.Error, seq uint64) {
	c.send(proto.ErrorMsg(e, seq))
}

// closeSoon ends the reader (and so the connection) after queued replies are written.
func (c *conn) closeSoon() {
	_ = c.c.CloseRead()
}

// writeNow writes what the socket takes of b without waiting (called under c.mu, so it
// must not block) and returns how much was written.
func (c *conn) writeNow(b []byte) (int, error) {
	raw, err := c.c.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var werr error
	if err := raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, err := unix.Write(int(fd), b[n:])
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				werr = err
				break
			}
			n += k
		}
		return true // never wait for the socket here
	}); err != nil {
		return n, err
	}
	return n, werr
}

func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	for b := range c.out {
		_ = c.c.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := c.c.Write(b); err != nil {
			c.logger().Warn("write to worker failed; closing the connection", "err", err)
			c.c.Close()
			for range c.out { // drain so senders never block
			}
			return
		}
		c.mu.Lock()
		c.queued--
		c.mu.Unlock()
	}
	c.c.Close()
}

func (c *conn) readLoop(ctx context.Context) {
	defer c.s.wg.Done()
	defer func() {
		if c.workerID != "" {
			c.s.sched.Unregister(c.workerID)
			c.s.mu.Lock()
			if c.s.byID[c.workerID] == c {
				delete(c.s.byID, c.workerID)
			}
			c.s.mu.Unlock()
		}
		c.mu.Lock()
		if !c.outDone {
			c.outDone = true
			close(c.out)
		}
		c.mu.Unlock()
		c.s.mu.Lock()
		c.s.uncountLocked(c)
		c.s.mu.Unlock()
	}()
	dec := proto.NewDecoder(c.c, c.s.cfg.MaxLineBytes)
	for {
		m, err := dec.Next()
		c.touch()
		if err != nil {
			var pe *proto.Error
			if errors.As(err, &pe) {
				c.badInput(pe)
				c.sendErr(pe, m.Seq)
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && c.workerID == "" {
				if ok, dropped := c.s.idleLog.allow(time.Now()); ok {
					c.logger().Warn("worker connection closed: it did not register in time", "register_timeout", c.s.cfg.RegisterTimeout,
						"not_logged_since_last", dropped)
				}
				c.sendErr(proto.Errorf(proto.CodeIdleTimeout, "", "no register within %v of connecting; send register first (worker.register_timeout_ms)", c.s.cfg.RegisterTimeout), 0)
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) {
				c.logger().Debug("worker connection ended", "err", err)
			}
			return
		}
		if perr := c.handle(ctx, m); perr != nil {
			if perr.Code != proto.CodeTurnExpired {
				c.badInput(perr)
			}
			c.sendErr(perr, m.Seq)
		}
	}
}

// badInput logs a message fulcrumd refused, at warn but at most once a second per
// daemon, so a broken or hostile worker is visible without flooding the log.
func (c *conn) badInput(pe *proto.Error) {
	if ok, dropped := c.s.badInputLog.allow(time.Now()); ok {
		c.logger().Warn("bad worker message refused", "code", pe.Code, "ref", pe.Ref, "msg", pe.Message, "not_logged_since_last", dropped)
	}
}

func asProto(err error, ref string) *proto.Error {
	if err == nil {
		return nil
	}
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe
	}
	return proto.Errorf(proto.CodeInternal, ref, "%v", err)
}

func (c *conn) handle(_ context.Context, m proto.Msg) *proto.Error {
	if m.Type == proto.TypeRegister {
		return c.register(m)
	}
	if c.workerID == "" {
		if m.Type == proto.TypeHeartbeat {
			c.send(proto.Msg{Type: proto.TypeHeartbeat, Seq: m.Seq})
			return nil
		}
		return proto.Errorf(proto.CodeNotRegistered, m.Type, "send register on this connection before %s", m.Type)
	}
	// A connection acts only for the registration made on it.
	if (m.WorkerID != "" && m.WorkerID != c.workerID) || (m.Token != "" && m.Token != c.token) {
		// Logged (rate-limited) by the caller with the other refused messages.
		return proto.Errorf(proto.CodeForbidden, m.Type, "this connection is registered as %s; a connection can only act for its own registration", c.workerID)
	}
	switch m.Type {
	case proto.TypeArrivals:
		return asProto(c.s.sched.Arrivals(c.workerID, m.Requests), m.Type)
	case proto.TypeAcquire:
		return asProto(c.s.sched.Acquire(c.workerID, m.Seq), m.Type)
	case proto.TypeRelease:
		return asProto(c.s.sched.Release(c.workerID, sched.Release{
			Grant:    m.Grant,
			Duration: time.Duration(m.DurationMS * float64(time.Millisecond)),
			Samples:  m.Samples,
			Results:  m.Results,
		}), m.Type)
	case proto.TypeHeartbeat:
		c.send(proto.Msg{Type: proto.TypeHeartbeat, Seq: m.Seq, WorkerID: c.workerID})
		return nil
	}
	return proto.Errorf(proto.CodeUnknownType, m.Type, "unhandled message type %q", m.Type)
}

func (c *conn) register(m proto.Msg) *proto.Error {
	if c.workerID != "" {
		return proto.Errorf(proto.CodeOutOfOrder, m.Type, "this connection is already registered as %s; open a new connection for another worker", c.workerID)
	}
	spec := sched.WorkerSpec{Role: m.Role, Workload: m.Workload, Batch: m.Batch, BatchSizes: m.BatchSizes, PID: m.PID,
		NoProfiles: m.Profiles != nil && !*m.Profiles, MicroBatches: m.MicroBatches}
	if c.cred != nil {
		// The kernel's word beats the worker's: pids differ across pid namespaces.
		if m.PID != 0 && int(c.cred.Pid) != m.PID {
			c.logger().Info("worker's stated pid differs from its socket peer pid (pid namespace?)", "stated_pid", m.PID)
		}
		spec.PID, spec.UID = int(c.cred.Pid), int(c.cred.Uid)
	}
	id, token, err := c.s.sched.Register(spec, func(g sched.Grant) {
		c.send(proto.Msg{
			Type: proto.TypeGrant, Seq: g.Seq, Grant: g.ID, Kind: g.Kind, Batch: g.Batch, MicroBatch: g.MicroBatch,
			RequestIDs: g.RequestIDs, DeadlineMS: float64(g.Deadline) / float64(time.Millisecond),
		})
	})
	if err != nil {
		return asProto(err, m.Type)
	}
	c.mu.Lock()
	c.workerID, c.token = id, token
	c.log = c.log.With("worker", id)
	c.mu.Unlock()
	_ = c.c.SetReadDeadline(time.Time{})
	c.s.mu.Lock()
	c.s.byID[id] = c
	c.s.mu.Unlock()
	c.send(proto.Msg{
		Type: proto.TypeRegistered, V: proto.Version, Seq: m.Seq, WorkerID: id, Token: token,
		LatencyBudgetMS: float64(c.s.sched.LatencyBudget()) / float64(time.Millisecond),
	})
	return nil
}

// logLimit lets one log line through per second and counts the ones held back.
type logLimit struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *logLimit) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		l.dropped++
		return false, 0
	}
	n := l.dropped
	l.last, l.dropped = now, 0
	return true, n
}
