package profiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Campaign profiles one workload at a list of modes and batch sizes. It is resumable:
// entries already in the store are skipped, and each profile is stored in its own
// transaction, so an interruption loses at most the profile in flight and a rerun
// never duplicates one.
type Campaign struct {
	Profiler *Profiler
	Workload string
	Role     truth.Role
	Modes    []powermode.Mode
	Batches  []int
	// Progress, if set, is called after every entry (skipped, measured or failed).
	Progress func(Progress)
	// RestoreTimeout bounds putting the board back at the end [30 s]; it runs even when
	// ctx is cancelled (Ctrl-C, SIGTERM).
	RestoreTimeout time.Duration
}

// Progress is a campaign's state after an entry.
type Progress struct {
	Total   int // entries in the campaign (modes × batches)
	Done    int // entries finished: measured now or found stored
	Skipped int // of Done, found already stored
	Key     store.Key
	Profile *store.Profile // the profile just measured; nil when skipped
	Elapsed time.Duration  // since the campaign started (monotonic)
	ETA     time.Duration  // remaining, from the mean time of the entries measured so far; 0 when unknown
}

// CampaignResult says what a campaign did.
type CampaignResult struct {
	Total    int `json:"total"`
	Measured int `json:"measured"`
	Skipped  int `json:"skipped"`
}

// CampaignRecord is the progress record kept in the store's campaigns bucket under ID.
// Snapshot is the board state taken before the first mode change: if the process dies
// (SIGKILL, power loss), the next campaign on the board restores this one rather than
// the modified state it finds.
type CampaignRecord struct {
	ID         string              `json:"id"`
	Board      string              `json:"board"`
	Workload   string              `json:"workload"`
	Role       truth.Role          `json:"role"`
	State      string              `json:"state"` // running, finished, interrupted, failed
	Total      int                 `json:"total"`
	Measured   int                 `json:"measured"`
	Skipped    int                 `json:"skipped"`
	StartedAt  time.Time           `json:"started_at"`
	UpdatedAt  time.Time           `json:"updated_at"`
	FinishedAt *time.Time          `json:"finished_at,omitempty"`
	Error      string              `json:"error,omitempty"`
	Snapshot   *powermode.Snapshot `json:"snapshot,omitempty"`
}

// Campaign record states.
const (
	StateRunning     = "running"
	StateFinished    = "finished"
	StateInterrupted = "interrupted"
	StateFailed      = "failed"
)

// CampaignID is the store key of a campaign's record.
func CampaignID(board, workload string, role truth.Role) string {
	return board + "/" + workload + "/" + string(role)
}

// Run profiles every (mode, batch) not yet stored. It snapshots the board first and
// restores it at the end, also when ctx is cancelled or a profile fails.
func (c *Campaign) Run(ctx context.Context) (res CampaignResult, err error) {
	p := c.Profiler
	if len(c.Modes) == 0 || len(c.Batches) == 0 {
		return res, errors.New("campaign: no modes or no batch sizes to profile")
	}
	if _, err := truth.ParseRole(string(c.Role)); err != nil {
		return res, fmt.Errorf("campaign: %w", err)
	}
	board := p.Backend.Info().Name
	clk := p.clock()
	log := p.logger()
	rec := CampaignRecord{
		ID: CampaignID(board, c.Workload, c.Role), Board: board, Workload: c.Workload, Role: c.Role,
		State: StateRunning, Total: len(c.Modes) * len(c.Batches), StartedAt: clk.Now().UTC(),
	}
	res.Total = rec.Total

	snap, err := c.pristineSnapshot(ctx, board)
	if err != nil {
		return res, err
	}
	rec.Snapshot = snap
	rec.UpdatedAt = clk.Now().UTC()
	if err := c.save(rec); err != nil {
		return res, err
	}
	defer func() {
		timeout := c.RestoreTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		rerr := p.Backend.Restore(rctx, snap)
		if rerr != nil {
			rerr = fmt.Errorf("campaign: restore the board state taken at %s: %w (the campaign record keeps the snapshot; the next campaign on this board retries)", snap.TakenAt.Format(time.RFC3339), rerr)
		}
		rec.Measured, rec.Skipped = res.Measured, res.Skipped
		now := clk.Now().UTC()
		rec.UpdatedAt = now
		switch {
		case err == nil && rerr == nil:
			rec.State, rec.FinishedAt = StateFinished, &now
		case ctx.Err() != nil:
			rec.State = StateInterrupted
		default:
			rec.State = StateFailed
		}
		if e := errors.Join(err, rerr); e != nil {
			rec.Error = e.Error()
		}
		if rerr == nil {
			rec.Snapshot = nil // restored: nothing left to recover
		}
		err = errors.Join(err, rerr, c.save(rec))
	}()

	start := clk.Now()
	var measuredTime time.Duration
	done := 0
	for _, m := range c.Modes {
		for _, b := range c.Batches {
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("campaign interrupted after %d of %d entries: %w (rerun the same command to resume)", done, res.Total, err)
			}
			key := p.Key(c.Workload, c.Role, m, b)
			has, err := p.Store.Has(key)
			if err != nil {
				return res, err
			}
			var prof *store.Profile
			if has {
				res.Skipped++
			} else {
				t0 := clk.Now()
				got, err := p.Profile(ctx, c.Workload, c.Role, m, b)
				if err != nil {
					if ctx.Err() != nil {
						return res, fmt.Errorf("campaign interrupted after %d of %d entries (the profile in flight was discarded): %w (rerun the same command to resume)", done, res.Total, ctx.Err())
					}
					return res, fmt.Errorf("campaign: %w", err)
				}
				measuredTime += clk.Now().Sub(t0)
				res.Measured++
				prof = &got
			}
			done++
			pr := Progress{Total: res.Total, Done: done, Skipped: res.Skipped, Key: key, Profile: prof, Elapsed: clk.Now().Sub(start)}
			if res.Measured > 0 {
				pr.ETA = measuredTime / time.Duration(res.Measured) * time.Duration(res.Total-done)
			}
			if done%10 == 0 || prof != nil {
				rec.Measured, rec.Skipped, rec.UpdatedAt = res.Measured, res.Skipped, clk.Now().UTC()
				if err := c.save(rec); err != nil {
					return res, err
				}
			}
			if c.Progress != nil {
				c.Progress(pr)
			}
		}
	}
	log.Info("campaign finished", "campaign", rec.ID, "total", res.Total, "measured", res.Measured, "skipped", res.Skipped, "elapsed", clk.Now().Sub(start).Round(time.Millisecond))
	return res, nil
}

// pristineSnapshot returns the board state to restore at the end: the snapshot a dead
// campaign on this board left behind (it holds the state before that campaign changed
// anything), or a fresh one.
func (c *Campaign) pristineSnapshot(ctx context.Context, board string) (*powermode.Snapshot, error) {
	p := c.Profiler
	recs, err := p.Store.Campaigns()
	if err != nil {
		return nil, err
	}
	for id, raw := range recs {
		var r CampaignRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			p.logger().Warn("ignoring an unreadable campaign record", "id", id, "err", err)
			continue
		}
		if r.Board != board || r.Snapshot == nil {
			continue
		}
		// The store is locked by this process, so a record still holding a snapshot
		// belongs to a campaign that died before restoring the board.
		p.logger().Warn("a previous campaign on this board did not restore it; its saved board state will be restored at the end of this one",
			"campaign", id, "state", r.State, "snapshot_taken_at", r.Snapshot.TakenAt.UTC().Format(time.RFC3339))
		snap := r.Snapshot
		if r.State == StateRunning {
			r.State = StateInterrupted
		}
		r.Snapshot = nil
		r.UpdatedAt = p.clock().Now().UTC()
		if id != CampaignID(board, c.Workload, c.Role) {
			if err := c.save(r); err != nil {
				return nil, err
			}
		}
		return snap, nil
	}
	snap, err := p.Backend.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("campaign: snapshot the board before changing it: %w", err)
	}
	return snap, nil
}

func (c *Campaign) save(r CampaignRecord) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := c.Profiler.Store.PutCampaign(r.ID, raw); err != nil {
		return fmt.Errorf("campaign: save progress: %w", err)
	}
	return nil
}
