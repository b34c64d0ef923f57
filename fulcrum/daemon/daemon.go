package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server/controlapi"
	"github.com/fulcrum-edge/fulcrum/fulcrum/control"
	"github.com/fulcrum-edge/fulcrum/fulcrum/metrics"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/powermode/nvml"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Options configure a whole fulcrumd. The mapstructure tags here and on the nested
// option structs (Config, sched.Config, control.Config, server.Config, nvml.Options) are
// fulcrumd's configuration keys (cmd/fulcrumd decodes configs/fulcrum.yaml straight into
// DefaultOptions); "-" marks what only code sets.
type Options struct {
	Server Config `mapstructure:"worker"`
	// StateDir holds the profile database (created if missing).
	StateDir string `mapstructure:"state_dir"`
	// DBPath is the bbolt profile store; empty means <StateDir>/profiles.db.
	DBPath string `mapstructure:"db"`
	// StoreTimeout bounds the wait for another process's lock on the store.
	StoreTimeout time.Duration `mapstructure:"db_timeout_ms"`
	// Board is "auto" (detect the Jetson), "sim:NAME" (a simulated board whose tree is at
	// BoardRoot), "nvml" (a discrete NVIDIA GPU) or "none" (no board: schedule only).
	Board     string `mapstructure:"board"`
	BoardRoot string `mapstructure:"board_root"`
	// NVML configures board "nvml" (a discrete GPU): device index, and whether clocks
	// may be locked (read-only otherwise).
	NVML nvml.Options `mapstructure:"nvml"`
	Log  *slog.Logger `mapstructure:"-"`

	// Control configures the controller; Targets are the operator's targets it starts
	// with (fulcrumd reads them from its budgets keys, written with units). The
	// scheduler's deadlines come from them, through the controller only.
	Control control.Config `mapstructure:"controller"`
	Targets plan.Targets   `mapstructure:"-"`
	// API configures the control API; an empty SocketPath means
	// <RuntimeDir>/control.sock. NoAPI leaves it out (tests of the worker side only).
	API   server.Config `mapstructure:"control"`
	NoAPI bool          `mapstructure:"-"`
	// Version is reported by the control API's status.
	Version string `mapstructure:"-"`
	// Clock drives the controller (sched.RealClock when nil).
	Clock sched.Clock `mapstructure:"-"`
	// MetricsListen is the Prometheus metrics address (e.g. 127.0.0.1:9464); empty: off.
	MetricsListen string `mapstructure:"metrics_listen"`
}

// Daemon is a running fulcrumd: the worker server, the profile store, the board, the
// controller and the control API.
type Daemon struct {
	Server     *Server
	Store      *store.Store
	Board      *Board
	Controller *control.Controller
	API        *server.Server
	// ControlAPI is the controller as the control API sees it (health, faults).
	ControlAPI *controlapi.API
	Metrics    *metrics.Metrics
	metricsLn  net.Listener
	log        *slog.Logger
}

// Open takes the runtime directory's lock and worker socket, opens the board
// (restoring a crashed run's snapshot) and then the profile store. Close (or Run)
// releases them.
func Open(ctx context.Context, o Options) (*Daemon, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Server.Log = o.Log
	// The latency histogram is fed per served request; the metrics exist once the
	// controller does, before any worker can connect (Serve has not started).
	var met atomic.Pointer[metrics.Metrics]
	if o.MetricsListen != "" {
		o.Server.Sched.OnServed = func(workload string, lat time.Duration) {
			if m := met.Load(); m != nil {
				m.ObserveLatency(workload, lat)
			}
		}
		o.Server.Sched.OnForget = func(role, workload string) {
			if m := met.Load(); m != nil && role == proto.RoleInfer {
				m.ForgetWorkload(workload)
			}
		}
	}
	d := &Daemon{Server: NewServer(o.Server), log: o.Log}
	// The runtime lock first: it keeps a second fulcrumd off the board and its sockets.
	if err := d.Server.Lock(); err != nil {
		return nil, err
	}
	apiSocket := cmp.Or(o.API.SocketPath, filepath.Join(o.Server.RuntimeDir, api.SocketName))
	fail := func(err error) (*Daemon, error) {
		// Under the lock no other fulcrumd serves this runtime directory: a control
		// socket left by a killed run would tell fulcrumctl a daemon is there.
		removeStaleSocket(apiSocket, d.log)
		d.Server.abandon()
		if d.metricsLn != nil {
			d.metricsLn.Close()
		}
		if d.Board != nil {
			d.Board.Close(ctx)
		}
		if d.Store != nil {
			d.Store.Close()
		}
		return nil, err
	}
	// The board first, right after the runtime lock (which keeps a second fulcrumd off
	// it): a snapshot left by a crashed run is restored even when what opens later (the
	// store, the control socket) fails.
	var b *Board
	var err error
	if o.Board == "nvml" {
		b, err = OpenNVMLBoard(ctx, o.NVML, o.StateDir, o.Log)
	} else {
		b, err = OpenBoard(ctx, o.Board, o.BoardRoot, o.StateDir, o.Log)
	}
	if err != nil {
		return fail(err)
	}
	d.Board = b
	// Workers may connect once the board is known good (they would otherwise register
	// with a fulcrumd about to exit).
	if err := d.Server.Listen(); err != nil {
		return fail(err)
	}
	db := o.DBPath
	if db == "" {
		if o.StateDir == "" {
			return fail(errors.New("neither db nor state_dir is set; set state_dir (default /var/lib/fulcrum)"))
		}
		db = filepath.Join(o.StateDir, paths.StoreName)
	}
	if err := os.MkdirAll(filepath.Dir(db), 0o755); err != nil {
		return fail(fmt.Errorf("create the profile store's directory: %w (set state_dir or db)", err))
	}
	st, notice, err := openStore(db, o.StoreTimeout, time.Now(), d.log)
	if err != nil {
		return fail(err)
	}
	d.Store = st
	d.log.Info("profile store open", "path", db)
	// An import killed mid-way (SIGKILL, a power cut) leaves its spool and undo log.
	if removed, err := st.RemoveImportLeftovers(); len(removed) > 0 || err != nil {
		d.log.Warn("removed an unfinished import's temporary files; part of that import may be stored (import the file again to complete it)", "files", removed, "err", err)
	}
	ctl, err := NewController(ctx, o, d.Server.Scheduler(), b, st, db)
	if err != nil {
		return fail(err)
	}
	d.Controller = ctl
	if notice != "" {
		ctl.Notice(control.KindStore, notice)
	}
	if !o.NoAPI {
		ac := o.API
		ac.SocketPath = apiSocket
		ac.Log = o.Log
		boardName := o.Board
		if boardName == "" {
			boardName = "none"
		}
		adapter := &controlapi.API{C: ctl, Version: o.Version, BoardSpec: boardName, Started: time.Now()}
		d.ControlAPI = adapter
		d.API = server.New(ac, adapter)
		if err := d.API.Listen(); err != nil {
			return fail(err)
		}
		if o.MetricsListen != "" {
			// Metrics are optional: a listener that cannot bind (port taken, no TCP in
			// the unit's sandbox) is an event and a degraded status, not an exit that
			// would put fulcrumd in a restart loop.
			adapter.Expect("metrics", "serving GET /metrics on "+o.MetricsListen)
			ln, err := metrics.Listen(o.MetricsListen)
			if err != nil {
				adapter.SetFault("metrics", fmt.Sprintf("%v; under systemd a TCP listener also needs the drop-in /usr/share/doc/fulcrum/fulcrumd-metrics.conf (docs/operations.md \"Metrics\")", err))
			} else {
				d.metricsLn = ln
				d.Metrics = metrics.New(metrics.FromController(adapter, ctl.Counters), metrics.Options{})
				met.Store(d.Metrics)
			}
		}
	}
	return d, nil
}

// NewController builds fulcrumd's controller from o over the scheduler, board and open
// store (at db) given, and restores the saved run-time settings. Open wires the daemon
// with it, and so does the daemon on virtual time (fulcrum/lifetime): one constructor, so
// what runs there is what fulcrumd runs.
func NewController(ctx context.Context, o Options, sch control.Scheduler, b *Board, st *store.Store, db string) (*control.Controller, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	copts := control.Options{Config: o.Control, Sched: sch, Store: st, Clock: o.Clock,
		Log: o.Log.With("component", "control"), Targets: o.Targets,
		// Run-time budgets and a held mode, apart from the store (docs/operations.md).
		SettingsPath: filepath.Join(cmp.Or(o.StateDir, filepath.Dir(db)), control.SettingsFileName)}
	if b != nil && b.Backend != nil {
		copts.Board = b
		copts.Presets, copts.PresetNames = b.Presets()
	}
	ctl, err := control.New(copts)
	if err != nil {
		return nil, err
	}
	ctl.RestoreSettings(ctx)
	return ctl, nil
}

// openStore opens the profile store at path, verifying every page first. A damaged
// file (store.ErrDamaged: cut short, overwritten, zeroed) is moved aside to
// path.damaged-<UTC time>, kept for the operator, and fulcrumd starts on a fresh store:
// profiles are measurements it can take again, and nothing else lives in the store
// (docs/profiler.md "A damaged store"). notice says what happened and what to do; ""
// when the file was sound.
func openStore(path string, timeout time.Duration, now time.Time, log *slog.Logger) (st *store.Store, notice string, err error) {
	opts := store.Options{Timeout: timeout, Verify: true}
	st, err = store.Open(path, opts)
	if err == nil {
		return st, "", nil
	}
	if !errors.Is(err, store.ErrDamaged) {
		return nil, "", fmt.Errorf("open profile store %s: %w (is another process, e.g. fulcrumctl profile, using it?)", path, err)
	}
	aside := path + ".damaged-" + now.UTC().Format("20060102T150405Z")
	if rerr := os.Rename(path, aside); rerr != nil {
		return nil, "", fmt.Errorf("%w; moving it aside to %s failed too: %v (move or remove it by hand, then start fulcrumd again)", err, aside, rerr)
	}
	log.Error("the profile store is damaged: moved it aside and starting on a fresh store", "damaged", aside, "err", err)
	st, ferr := store.Open(path, opts)
	if ferr != nil {
		return nil, "", fmt.Errorf("the profile store was damaged and moved aside to %s, but a fresh store cannot be created: %w", aside, ferr)
	}
	notice = fmt.Sprintf("%v; it was moved aside to %s and fulcrumd runs on a fresh, empty store and measures again what it needs (fulcrumctl optimize). "+
		"To try to recover its profiles: fulcrumctl profile export --db %s --out profiles.csv (it fails if the damage reaches them), then fulcrumctl daemon profiles import profiles.csv; remove the damaged file when done. "+
		"Check the storage: flash that corrupts one file may corrupt others", err, aside, aside)
	return st, notice, nil
}

// Run serves workers, the controller and the control API until ctx ends, then shuts
// down: connections closed, a running search stopped, board restored, store closed.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var apiErr error
	if d.API != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if apiErr = d.API.Serve(ctx); apiErr != nil {
				d.log.Error("control API stopped", "err", apiErr)
				cancel()
			}
		}()
	}
	if d.Metrics != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Metrics.Serve(ctx, d.metricsLn, d.log); err != nil {
				d.ControlAPI.SetFault("metrics", fmt.Sprintf("the metrics listener stopped: %v; fulcrumd goes on without metrics (restart it to serve them again)", err))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = d.Controller.Run(ctx)
	}()
	err := d.Server.Serve(ctx)
	cancel()
	wg.Wait()
	d.close()
	return errors.Join(err, apiErr)
}

func (d *Daemon) close() {
	if d.Board != nil {
		d.Board.Close(context.Background())
	}
	if d.Store != nil {
		if err := d.Store.Close(); err != nil {
			d.log.Error("close profile store", "err", err)
		}
	}
}

// removeStaleSocket removes the socket file at path unless something answers on it.
func removeStaleSocket(path string, log *slog.Logger) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return
	}
	if err := os.Remove(path); err == nil {
		log.Info("removed a stale control socket", "path", path)
	}
}

// abandon undoes Lock and Listen when startup fails later.
func (s *Server) abandon() {
	if s.ln != nil {
		s.ln.Close()
	}
	if s.lock != nil {
		os.Remove(filepath.Join(s.cfg.RuntimeDir, PIDFileName))
		s.lock.Close()
	}
}
