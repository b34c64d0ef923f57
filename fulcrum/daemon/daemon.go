package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

// Options configure a whole fulcrumd.
type Options struct {
	Server Config
	// StateDir holds the profile database (created if missing).
	StateDir string
	// DBPath is the bbolt profile store; empty means <StateDir>/profiles.db.
	DBPath string
	// StoreTimeout bounds the wait for another process's lock on the store.
	StoreTimeout time.Duration
	// Board is "auto" (detect the Jetson), "sim:NAME" (a simulated board whose tree is at
	// BoardRoot) or "none" (no board: schedule only).
	Board     string
	BoardRoot string
	Log       *slog.Logger
}

// Daemon is a running fulcrumd: the worker server and the profile store.
type Daemon struct {
	Server *Server
	Store  *store.Store
	Board  *Board
	log    *slog.Logger
}

// Open takes the runtime directory's lock and worker socket, opens the profile store
// and the board. Close (or Run) releases them.
func Open(ctx context.Context, o Options) (*Daemon, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Server.Log = o.Log
	d := &Daemon{Server: NewServer(o.Server), log: o.Log}
	if err := d.Server.Listen(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Daemon, error) {
		d.Server.abandon()
		if d.Store != nil {
			d.Store.Close()
		}
		return nil, err
	}
	db := o.DBPath
	if db == "" {
		if o.StateDir == "" {
			return fail(errors.New("neither db nor state_dir is set; set state_dir (default /var/lib/fulcrum)"))
		}
		db = filepath.Join(o.StateDir, "profiles.db")
	}
	if err := os.MkdirAll(filepath.Dir(db), 0o755); err != nil {
		return fail(fmt.Errorf("create the profile store's directory: %w (set state_dir or db)", err))
	}
	st, err := store.Open(db, store.Options{Timeout: o.StoreTimeout})
	if err != nil {
		return fail(fmt.Errorf("open profile store %s: %w (is another process, e.g. fulcrumctl profile, using it?)", db, err))
	}
	d.Store = st
	d.log.Info("profile store open", "path", db)
	b, err := OpenBoard(ctx, o.Board, o.BoardRoot, o.StateDir, o.Log)
	if err != nil {
		return fail(err)
	}
	d.Board = b
	return d, nil
}

// Run serves workers until ctx ends, then shuts down: connections closed, board
// restored, store closed.
func (d *Daemon) Run(ctx context.Context) error {
	err := d.Server.Serve(ctx)
	d.close()
	return err
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

// abandon undoes Listen when startup fails later.
func (s *Server) abandon() {
	if s.ln != nil {
		s.ln.Close()
	}
	if s.lock != nil {
		os.Remove(filepath.Join(s.cfg.RuntimeDir, PIDFileName))
		s.lock.Close()
	}
}
