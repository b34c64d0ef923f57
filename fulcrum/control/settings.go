package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/powermode"
)

// SettingsFileName is the run-time settings file in the state directory: apart from the
// profile store, so a damaged or moved-aside store loses no setting.
const SettingsFileName = "settings.json"

// SettingsVersion is the settings file's format version; a file of another version is
// set aside, not guessed at.
const SettingsVersion = 1

// maxSettingsBytes bounds what is read of a settings file (a valid one is a few KiB:
// MaxStreamTargets streams of a few fields).
const maxSettingsBytes = 1 << 20

// Settings are the operator's run-time changes fulcrumd keeps across restarts
// (docs/operations.md, "budget reset, and budgets across restarts"): global budgets,
// per-stream budgets and training weights, and a held mode.
type Settings struct {
	Version int       `json:"version"`
	SavedAt time.Time `json:"saved_at"`
	// ConfigBudgets are the shared targets the configuration (file, environment, flags)
	// gave when these were saved: a configuration changed since is detected at start.
	ConfigBudgets plan.Targets `json:"config_budgets"`
	// Budgets are the shared targets set at run time (nil: the configuration's). The
	// file keeps version 1's layout: the per-workload targets are under Streams, never here.
	Budgets *plan.Targets `json:"budgets,omitempty"`
	// Streams are the per-workload budgets and training weights, by workload.
	Streams map[string]plan.StreamTarget `json:"streams,omitempty"`
	// HeldMode is the mode an operator applied and fulcrumd holds (nil: none).
	HeldMode *powermode.Mode `json:"held_mode,omitempty"`
}

// empty reports whether s holds no run-time change.
func (s Settings) empty() bool { return s.Budgets == nil && len(s.Streams) == 0 && s.HeldMode == nil }

// same reports whether s and o hold the same settings (SavedAt aside).
func (s Settings) same(o Settings) bool {
	s.SavedAt, o.SavedAt = time.Time{}, time.Time{}
	a, err1 := json.Marshal(s)
	b, err2 := json.Marshal(o)
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

// check validates what a settings file holds, as the API validates the same changes.
func (s Settings) check() error {
	if s.Version != SettingsVersion {
		return fmt.Errorf("version %d: this fulcrumd reads version %d (written by another fulcrumd version?)", s.Version, SettingsVersion)
	}
	if len(s.ConfigBudgets.Streams) > 0 {
		return errors.New("config_budgets.streams: per-workload budgets belong under streams")
	}
	if s.Budgets != nil {
		if len(s.Budgets.Streams) > 0 {
			return errors.New("budgets.streams: per-workload budgets belong under streams")
		}
		if err := s.Budgets.WithDefaults().Validate(); err != nil {
			return fmt.Errorf("budgets: %w", err)
		}
	}
	if len(s.Streams) > MaxStreamTargets {
		return fmt.Errorf("%d stream budgets: at most %d", len(s.Streams), MaxStreamTargets)
	}
	for w, t := range s.Streams {
		if err := t.Validate(w); err != nil {
			return fmt.Errorf("stream %q: %w", w, err)
		}
	}
	if s.HeldMode != nil {
		if err := s.HeldMode.Validate(); err != nil {
			return fmt.Errorf("held mode: %w", err)
		}
	}
	return nil
}

// SettingsFile reads and writes a settings file.
type SettingsFile struct {
	Path string
}

// errNoSettings is Load's answer when no settings were saved.
var errNoSettings = errors.New("no settings saved")

// Load reads the settings; a missing file is errNoSettings, anything unreadable,
// malformed or invalid an error saying so.
func (f SettingsFile) Load() (Settings, error) {
	fh, err := os.Open(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return Settings{}, errNoSettings
	}
	if err != nil {
		return Settings{}, err
	}
	defer fh.Close()
	raw, err := io.ReadAll(io.LimitReader(fh, maxSettingsBytes+1))
	if err != nil {
		return Settings{}, err
	}
	if len(raw) > maxSettingsBytes {
		return Settings{}, fmt.Errorf("over %d bytes", maxSettingsBytes)
	}
	var s Settings
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Settings{}, fmt.Errorf("malformed: %w", err)
	}
	if dec.More() {
		return Settings{}, errors.New("malformed: trailing data after the JSON object")
	}
	if err := s.check(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// Save writes s atomically: a temporary file in the same directory, fsynced, renamed
// over the old one, then the directory fsynced, so a crash leaves the old file or the
// new one, never a torn one.
func (f SettingsFile) Save(s Settings) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing there
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o640); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return err
	}
	return syncDir(dir)
}

// Remove deletes the settings file (no file is not an error).
func (f SettingsFile) Remove() error {
	if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(f.Path))
}

// setAside renames a damaged settings file out of the way, keeping it for a look.
func (f SettingsFile) setAside(now time.Time) (string, error) {
	aside := f.Path + ".damaged-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(f.Path, aside); err != nil {
		return "", err
	}
	return aside, syncDir(filepath.Dir(f.Path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// settingsState is the controller's side of the settings file.
type settingsState struct {
	file SettingsFile
	// config are the shared targets the configuration gave (what budget reset returns to).
	config plan.Targets
	mu     sync.Mutex // serialises saves, so the last one written is the newest state
	saved  Settings   // what the file holds now
}

// settingsNow are the run-time settings in force. Called with c.mu held.
func (c *Controller) settingsNow() Settings {
	s := Settings{Version: SettingsVersion, ConfigBudgets: c.settings.config.Shared()}
	if shared := c.targets.Shared(); !shared.Equal(c.settings.config.Shared()) {
		s.Budgets = &shared
	}
	if len(c.targets.Streams) > 0 {
		s.Streams = maps.Clone(c.targets.Streams)
	}
	if c.held && c.cur != nil {
		m := c.cur.Mode
		s.HeldMode = &m
	}
	return s
}

// persistSettings saves the run-time settings when they changed since the last save;
// a failure is an event and a log line (the settings hold until fulcrumd stops).
func (c *Controller) persistSettings() {
	if c.settings == nil || c.settings.file.Path == "" {
		return
	}
	c.settings.mu.Lock()
	defer c.settings.mu.Unlock()
	c.mu.Lock()
	s := c.settingsNow()
	c.mu.Unlock()
	if s.same(c.settings.saved) {
		return
	}
	s.SavedAt = c.clock.Now().UTC()
	var err error
	if s.empty() {
		err = c.settings.file.Remove()
	} else {
		err = c.settings.file.Save(s)
	}
	if err != nil {
		msg := fmt.Sprintf("run-time settings not saved to %s: %v; they hold until fulcrumd stops (check that the state directory is writable)", c.settings.file.Path, err)
		c.events.Add(Event{Kind: KindSettings, Reason: msg, Err: err.Error()})
		c.log.Error("save run-time settings", "path", c.settings.file.Path, "err", err)
	}
	// After a failure too: the next change tries again (one event per change, not one
	// per control period).
	c.settings.saved = s
}

// RestoreSettings installs the run-time settings saved by an earlier run (global
// budgets, per-stream budgets and training weights, a held mode) over the
// configuration's, with an event saying where each came from. It never fails: a
// damaged or unknown-version file is set aside (an event and a log line say where) and
// the configuration's values are kept. fulcrumd calls it once, before Run.
func (c *Controller) RestoreSettings(ctx context.Context) {
	if c.settings == nil || c.settings.file.Path == "" {
		return
	}
	path := c.settings.file.Path
	cfg := c.settings.config
	s, err := c.settings.file.Load()
	switch {
	case errors.Is(err, errNoSettings):
		c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("budgets %s from the configuration (file, environment, flags); no run-time settings saved in %s", cfg, path)})
		return
	case err != nil:
		where := "it could not be moved aside: " // a read-only state directory
		aside, aerr := c.settings.file.setAside(c.clock.Now())
		if aerr == nil {
			where = "it is kept as " + aside
		} else {
			where += aerr.Error()
		}
		msg := fmt.Sprintf("run-time settings in %s not used: %v; %s. Budgets %s from the configuration (set them again with fulcrumctl budget set)", path, err, where, cfg)
		c.events.Add(Event{Kind: KindSettings, Reason: msg, Err: err.Error()})
		c.log.Error("run-time settings damaged; starting from the configuration", "path", path, "err", err, "kept_as", aside)
		return
	}
	saved := fmt.Sprintf("saved at %s in %s", s.SavedAt.Format(time.RFC3339), path)
	c.settings.mu.Lock()
	c.settings.saved = s
	c.settings.mu.Unlock()
	changed := !s.ConfigBudgets.WithDefaults().Equal(cfg)
	c.mu.Lock()
	switch {
	case changed && (s.Budgets != nil || s.HeldMode != nil):
		what := "held mode"
		if s.Budgets != nil {
			what = fmt.Sprintf("run-time budgets %s", *s.Budgets)
			if s.HeldMode != nil {
				what += " and held mode"
			}
		}
		c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("budgets %s from the configuration, which changed since the %s were %s (the configuration gave %s then): an edited configuration wins; the run-time budgets and any held mode are dropped",
			cfg, what, saved, s.ConfigBudgets)})
		s.HeldMode = nil
	case s.Budgets == nil:
		c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("budgets %s from the configuration (file, environment, flags)", cfg)})
	default:
		streams := c.targets.Streams
		c.targets = s.Budgets.WithDefaults()
		c.targets.Streams = streams
		c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("budgets %s restored from the run-time settings %s, over the configuration's %s (fulcrumctl budget reset returns to the configuration's)",
			c.targets.Shared(), saved, cfg)})
	}
	if len(s.Streams) > 0 {
		c.targets.Streams = maps.Clone(s.Streams)
		for _, w := range slices.Sorted(maps.Keys(s.Streams)) {
			c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("budgets of workload %s %s restored from the run-time settings %s", w, s.Streams[w], saved)})
		}
	}
	b := c.targets.Clone()
	c.mu.Unlock()
	c.sharedDeadline(b)
	if err := c.streamDeadlines(b); err != nil {
		c.log.Error("restore stream budgets", "err", err) // cannot happen: bounded and checked by Load
	}
	if s.HeldMode != nil {
		m := *s.HeldMode
		if _, err := c.ApplyMode(ctx, m); err != nil {
			c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("held mode %s from the run-time settings %s not applied: %v; fulcrumd plans the mode itself", m.Human(), saved, err), Mode: &m, Err: err.Error()})
		} else {
			c.events.Add(Event{Kind: KindSettings, Reason: fmt.Sprintf("held mode %s restored from the run-time settings %s", m.Human(), saved), Mode: &m})
		}
	}
	c.persistSettings() // what was dropped above is dropped from the file too
}

// ResetBudgets returns to the configuration's budgets: the run-time global budgets,
// per-stream budgets and training weights and a held mode are dropped, and the saved
// settings deleted.
func (c *Controller) ResetBudgets(by *Caller) error {
	c.mu.Lock()
	old := c.targets
	cfg := old.Shared()
	if c.settings != nil {
		cfg = c.settings.config.Clone()
	}
	c.targets = cfg
	c.badPoint = nil
	c.held = false
	if c.cur != nil || c.pair != nil {
		c.needPlan = reasonBudgets
	}
	c.takeBack(c.base, "budgets reset", by) // a budget change ends a stand-down (external.go)
	c.mu.Unlock()
	c.sharedDeadline(cfg)
	if err := c.streamDeadlines(cfg); err != nil {
		return fmt.Errorf("reset the stream budgets: %w", err)
	}
	c.events.Add(Event{Kind: KindBudget, Reason: fmt.Sprintf("budgets reset from %s to the configuration's %s; per-workload budgets, training weights and any held mode dropped", old.Shared(), cfg), Caller: by})
	c.persistSettings()
	return nil
}
