package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
	"github.com/fulcrum-edge/fulcrum/truth"
)

// Config configures the control API server. The mapstructure tags are fulcrumd's
// configuration keys (see daemon.Options).
type Config struct {
	// SocketPath is the control socket, normally <runtime_dir>/control.sock.
	SocketPath string
	// SocketMode is its permission bits (0660 when 0): owner and group may connect.
	SocketMode os.FileMode `mapstructure:"socket_mode"`
	// Group owns the socket and its members may change things ("fulcrum" when empty;
	// "-" for none). When it does not exist the socket keeps the process's group.
	Group string `mapstructure:"group"`
	// AllowUIDs and AllowGIDs may change things besides root and the group's members.
	AllowUIDs []int `mapstructure:"allow_uids"`
	AllowGIDs []int `mapstructure:"allow_gids"`
	// Policy replaces the default GroupPolicy (tests; special deployments).
	Policy Policy
	// MaxBodyBytes caps a JSON request body (64 KiB when 0); MaxImportBytes caps a
	// profile import (64 MiB when 0).
	MaxBodyBytes   int64
	MaxImportBytes int64
	// ProcRoot is where callers' comm is read at accept, and their groups on a kernel
	// without SO_PEERGROUPS ("/proc" when empty).
	ProcRoot string
	// Limits bound connections, event streams, headers and bodies (DefaultLimits for
	// zero fields).
	Limits Limits
	Log    *slog.Logger
}

// Server serves the control API.
type Server struct {
	cfg    Config
	ctl    Controller
	policy Policy
	log    *slog.Logger
	ln     *net.UnixListener
	http   *http.Server
	counts *connCounts
}

// New prepares a server for ctl; Listen takes the socket.
func New(cfg Config, ctl Controller) *Server {
	if cfg.SocketMode == 0 {
		cfg.SocketMode = 0o660
	}
	if cfg.Group == "" {
		cfg.Group = api.GroupName
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.MaxImportBytes <= 0 {
		cfg.MaxImportBytes = 64 << 20
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	s := &Server{cfg: cfg, ctl: ctl, log: cfg.Log.With("component", "api"), policy: cfg.Policy, counts: newConnCounts(cfg.Limits)}
	if s.policy == nil {
		// Until Listen looks the group up, only root and the allow-lists may change things.
		s.policy = GroupPolicy{GID: -1, GroupName: cfg.Group, AllowUIDs: cfg.AllowUIDs, AllowGIDs: cfg.AllowGIDs}
	}
	s.http = &http.Server{
		Handler:           s.Handler(),
		ConnContext:       withPeer,
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout,
		ReadTimeout:       cfg.Limits.BodyTimeout,
		IdleTimeout:       cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    cfg.Limits.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s
}

// SocketPath is where the API listens.
func (s *Server) SocketPath() string { return s.cfg.SocketPath }

// Listen creates the socket (removing a stale one), sets its mode and, when the group
// exists, its group. The caller must hold fulcrumd's runtime-directory lock, so a socket
// file found here belongs to a dead fulcrumd unless it answers.
func (s *Server) Listen() error {
	path := s.cfg.SocketPath
	gid := -1
	if s.cfg.Group != "-" {
		var err error
		if gid, err = lookupGroup(s.cfg.Group); err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
	}
	if s.cfg.Policy == nil {
		s.policy = GroupPolicy{GID: gid, GroupName: s.cfg.Group, AllowUIDs: s.cfg.AllowUIDs, AllowGIDs: s.cfg.AllowGIDs}
	}
	if _, err := os.Lstat(path); err == nil {
		if c, derr := net.DialTimeout("unix", path, 200*time.Millisecond); derr == nil {
			c.Close()
			return fmt.Errorf("control socket %s answers: another fulcrumd is serving it; stop it or use another runtime_dir", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove stale control socket %s: %w", path, err)
		}
		s.log.Info("removed a stale control socket", "path", path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen on %s: %w (check runtime_dir exists and is writable)", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, s.cfg.SocketMode); err != nil {
		ln.Close()
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	switch {
	case gid >= 0:
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return fmt.Errorf("chown %s to group %s: %w (run fulcrumd as root or as a member of %s)", path, s.cfg.Group, err, s.cfg.Group)
		}
	case s.cfg.Group != "-":
		s.log.Info("group does not exist; the control socket keeps fulcrumd's group and only root (and control.allow_uids/allow_gids) may change things",
			"group", s.cfg.Group, "gid", os.Getgid())
	}
	s.ln = ln
	s.log.Info("control API listening", "path", path, "mode", fmt.Sprintf("%#o", s.cfg.SocketMode), "group_gid", gid)
	return nil
}

// Serve answers requests until ctx ends, then stops: in-flight requests get up to 5 s,
// streams (events --follow) and a running optimize are cancelled.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		return errors.New("api: Serve before Listen")
	}
	s.http.BaseContext = func(net.Listener) context.Context { return ctx }
	done := make(chan error, 1)
	ln := &limitListener{UnixListener: s.ln, counts: s.counts, procRoot: s.cfg.ProcRoot, policy: func() Policy { return s.policy }, log: s.log,
		refusing: make(chan struct{}, maxRefusing)}
	go func() { done <- s.http.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("control API on %s: %w", s.cfg.SocketPath, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.http.Close()
	}
	<-done
	s.log.Info("control API closed")
	return nil
}

// routes maps each path to the methods it answers, for 404 vs 405.
var routes = map[string]string{
	"/v1/status":          "GET",
	"/v1/budgets":         "GET, PUT",
	"/v1/budgets/reset":   "POST",
	"/v1/healthz":         "GET",
	"/v1/workers":         "GET",
	"/v1/mode":            "GET, PUT",
	"/v1/mode/resume":     "POST",
	"/v1/profiles":        "GET",
	"/v1/profiles/export": "GET",
	"/v1/profiles/import": "POST",
	"/v1/optimize":        "POST",
	"/v1/events":          "GET",
}

// Handler is the API's HTTP handler. Requests must come through a connection whose
// context carries the peer (Serve does that); without one, mutating calls are refused.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.getStatus)
	mux.HandleFunc("GET /v1/budgets", s.getBudgets)
	mux.HandleFunc("PUT /v1/budgets", s.mutating(s.putBudgets))
	mux.HandleFunc("GET /v1/workers", s.getWorkers)
	mux.HandleFunc("GET /v1/mode", s.getMode)
	mux.HandleFunc("PUT /v1/mode", s.mutating(s.putMode))
	mux.HandleFunc("POST /v1/mode/resume", s.mutating(s.resumeMode))
	mux.HandleFunc("GET /v1/profiles", s.getProfiles)
	mux.HandleFunc("GET /v1/profiles/export", s.exportProfiles)
	mux.HandleFunc("POST /v1/profiles/import", s.mutating(s.importProfiles))
	mux.HandleFunc("POST /v1/optimize", s.mutating(s.optimize))
	mux.HandleFunc("GET /v1/events", s.getEvents)
	mux.HandleFunc("POST /v1/budgets/reset", s.mutating(s.resetBudgets))
	mux.HandleFunc("GET /v1/healthz", s.getHealth)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow, ok := routes[strings.TrimSuffix(r.URL.Path, "/")]; ok {
			w.Header().Set("Allow", allow)
			writeError(w, api.Errorf(http.StatusMethodNotAllowed, api.CodeMethod, "", "%s %s: method not allowed; use %s", r.Method, r.URL.Path, allow))
			return
		}
		writeError(w, api.Errorf(http.StatusNotFound, api.CodeNotFound, "", "no endpoint %s; see docs/api.md (paths start with /%s/)", r.URL.Path, api.Version))
	})
	return mux
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, by api.Caller)

// mutating checks the caller may change things, then logs what it did and the outcome.
func (s *Server) mutating(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := callerFrom(r.Context())
		if !ok {
			s.log.Warn("refused a change from a caller without peer credentials", "method", r.Method, "path", r.URL.Path)
			writeError(w, api.Errorf(http.StatusForbidden, api.CodeForbidden, "", "fulcrumd cannot tell who you are (no peer credentials); connect over the unix socket"))
			return
		}
		log := s.log.With("method", r.Method, "path", r.URL.Path, "uid", c.UID, "gid", c.GID, "pid", c.PID, "comm", c.Comm)
		if err := s.policy.Allow(c); err != nil {
			log.Warn("refused a change", "reason", err)
			writeError(w, api.Errorf(http.StatusForbidden, api.CodeForbidden, "", "%v", err))
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		h(rec, r, c)
		log.Info("control call", "status", rec.status, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, api.Errorf(http.StatusInternalServerError, api.CodeInternal, "", "encode the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// maxErrorMessage bounds an error answer's message: no reply echoes unbounded input (an
// import's 20 MB name once came back whole in a 400).
const maxErrorMessage = 1024

func writeError(w http.ResponseWriter, e *api.Error) {
	if len(e.Message) > maxErrorMessage {
		cut := maxErrorMessage
		for cut > 0 && !utf8.RuneStart(e.Message[cut]) {
			cut--
		}
		c := *e
		c.Message = fmt.Sprintf("%s… (message of %d bytes truncated)", e.Message[:cut], len(e.Message))
		e = &c
	}
	b, _ := json.Marshal(api.ErrorBody{Error: e})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(b, '\n'))
}

// fail answers err: an *api.Error as it is, a body over the limit as 413, anything else 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "", "request body over %d bytes; send less (split an import into several files)", tooBig.Limit))
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The body did not arrive in time (Limits.BodyTimeout); the connection is closed.
		w.Header().Set("Connection", "close")
		writeError(w, api.Errorf(http.StatusRequestTimeout, api.CodeBadRequest, "", "request body not received in time; send the whole body at once"))
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nobody reads the answer
	}
	e := api.AsError(err)
	if e.Status >= 500 && e.Status != http.StatusServiceUnavailable {
		s.log.Error("control call failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, e)
}

// decode reads a JSON body of at most MaxBodyBytes strictly: unknown fields, keys that
// match a field only case-insensitively, keys given twice and trailing data are 400s
// naming the key.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	if err := checkKeys(raw, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "", "empty body: send a JSON object (see docs/api.md)")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, f, "unknown field %q (see docs/api.md for the fields)", f)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, te.Field, "field %q: want a %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "", "malformed JSON body: %v", err)
	}
	if dec.More() {
		return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "", "trailing data after the JSON object; send exactly one object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "", "trailing data after the JSON object; send exactly one object")
	}
	return nil
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.ctl.Status(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) getBudgets(w http.ResponseWriter, r *http.Request) {
	b, err := s.ctl.Budgets(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) putBudgets(w http.ResponseWriter, r *http.Request, by api.Caller) {
	var u api.BudgetsUpdate
	if err := s.decode(w, r, &u); err != nil {
		s.fail(w, r, err)
		return
	}
	if u.Empty() {
		s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadBudget, "", "no budget given: set at least one of latency_ms, power_mw, rate_rps, rate_auto, quantile, rho_max (with workload: latency_ms, rate_rps, rate_auto or shared)"))
		return
	}
	cur, err := s.ctl.Budgets(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Check ranges here so every controller rejects the same way and changes nothing.
	if _, err := ApplyUpdate(u, cur); err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.ctl.SetBudgets(r.Context(), u, by)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if u.Workload != "" {
		// Workers only fails when the controller is gone; the budgets are set anyway.
		if ws, err := s.ctl.Workers(r.Context()); err == nil {
			b.Warnings = u.Warnings(ws)
		}
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) getWorkers(w http.ResponseWriter, r *http.Request) {
	ws, err := s.ctl.Workers(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if ws == nil {
		ws = []api.Worker{}
	}
	writeJSON(w, http.StatusOK, api.WorkersResponse{Workers: ws})
}

func (s *Server) getMode(w http.ResponseWriter, r *http.Request) {
	m, err := s.ctl.Mode(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) putMode(w http.ResponseWriter, r *http.Request, by api.Caller) {
	var req api.ModeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Preset != "" {
		if req.Mode != (powermode.Mode{}) {
			s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadMode, "preset", "give a mode or a preset, not both"))
			return
		}
		pr, ok := s.ctl.(PresetResolver)
		if !ok {
			s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadMode, "preset", "this board has no nvpmodel presets; give a mode"))
			return
		}
		m, err := pr.ResolvePreset(r.Context(), req.Preset)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		req.Mode = m
	}
	if err := req.Mode.Validate(); err != nil {
		s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadMode, "mode", "%v: give all four knobs (cores, cpu_khz, gpu_hz, emc_hz); GET /v1/mode lists the board's levels", err))
		return
	}
	m, err := s.ctl.ApplyMode(r.Context(), req.Mode, by)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// resumeMode is POST /v1/mode/resume: fulcrumd takes the board back after standing down
// for another tool's change.
func (s *Server) resumeMode(w http.ResponseWriter, r *http.Request, by api.Caller) {
	rs, ok := s.ctl.(Resumer)
	if !ok {
		s.fail(w, r, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "", "this fulcrumd drives no board it could resume"))
		return
	}
	m, err := rs.Resume(r.Context(), by)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func filterFrom(r *http.Request) (store.Filter, error) {
	q := r.URL.Query()
	f := store.Filter{Board: q.Get("board"), Workload: q.Get("workload")}
	if role := q.Get("role"); role != "" {
		rl, err := truth.ParseRole(role)
		if err != nil {
			return f, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "role", "role %q: want train or infer", role)
		}
		f.Role = rl
	}
	return f, nil
}

func (s *Server) getProfiles(w http.ResponseWriter, r *http.Request) {
	f, err := filterFrom(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ps, err := s.ctl.Profiles(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]api.Profile, len(ps))
	for i, p := range ps {
		out[i] = ProfileFrom(p)
	}
	writeJSON(w, http.StatusOK, api.ProfilesResponse{Count: len(out), Profiles: out})
}

func formatFrom(r *http.Request, dflt store.Format) (store.Format, error) {
	v := r.URL.Query().Get("format")
	if v == "" {
		return dflt, nil
	}
	f, err := store.ParseFormat(v)
	if err != nil {
		return "", api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "format", "format %q: want csv or json", v)
	}
	return f, nil
}

func (s *Server) exportProfiles(w http.ResponseWriter, r *http.Request) {
	format, err := formatFrom(r, store.CSV)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := filterFrom(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Buffer so a failure halfway still gets an error status, not a truncated file.
	var buf bytes.Buffer
	if err := s.ctl.ExportProfiles(r.Context(), &buf, format, f); err != nil {
		s.fail(w, r, err)
		return
	}
	ct := "text/csv; charset=utf-8"
	if format == store.JSON {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	// A client that stops reading is dropped rather than holding the buffer.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.Limits.WriteTimeout))
	_, _ = buf.WriteTo(w)
}

func (s *Server) importProfiles(w http.ResponseWriter, r *http.Request, by api.Caller) {
	format, err := formatFrom(r, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	opts := store.ImportOptions{Format: format, Board: q.Get("board")}
	switch ov := q.Get("overwrite"); ov {
	case "", "0", "false":
	case "1", "true":
		opts.Overwrite = true
	default:
		s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "overwrite", "overwrite %q: want 1 or 0", ov))
		return
	}
	// An import's body may take longer than an ordinary call's (Limits.ImportTimeout).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.Limits.ImportTimeout))
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxImportBytes)
	res, err := s.ctl.ImportProfiles(r.Context(), body, opts, by)
	if err != nil {
		// Whatever the controller made of it, a body over the limit is a 413: a
		// MaxBytesReader repeats its error on the next read.
		if _, rerr := body.Read(make([]byte, 1)); rerr != nil {
			var tooBig *http.MaxBytesError
			if errors.As(rerr, &tooBig) {
				err = rerr
			}
		}
		// A body that is not a profile file (garbage, a bad row, a conflict) is the
		// caller's to fix: a 400 saying what is wrong, not a 500.
		var bad *store.InputError
		if errors.As(err, &bad) && api.AsError(err).Status >= 500 {
			err = api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "", "%v", err)
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ImportResponseFrom(res))
}

func (s *Server) optimize(w http.ResponseWriter, r *http.Request, by api.Caller) {
	var req api.OptimizeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Method != api.OptimizeGMD && req.Method != api.OptimizeALS {
		s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadMethod, "method", "method %q: want gmd (about 15 profiled modes) or als (up to 50, reusable)", req.Method))
		return
	}
	if req.MaxProfiles < 0 || req.MaxProfiles > 10000 {
		s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "max_profiles", "max_profiles = %d is out of range: want 0 (the method's default) to 10000", req.MaxProfiles))
		return
	}
	res, err := s.ctl.Optimize(r.Context(), req, by)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "since", "since %q: want an event seq (a non-negative integer)", v))
			return
		}
		since = n
	}
	follow := false
	switch v := q.Get("follow"); v {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		s.fail(w, r, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "follow", "follow %q: want 1 or 0", v))
		return
	}
	if !follow {
		evs, err := s.ctl.Events(r.Context(), since)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		last := since
		if len(evs) > 0 {
			last = evs[len(evs)-1].Seq
		} else {
			evs = []api.Event{}
		}
		writeJSON(w, http.StatusOK, api.EventsResponse{Events: evs, Last: last})
		return
	}
	s.follow(w, r, since)
}

// follow streams events as newline-delimited JSON: the kept ones after since, then each
// new one as it happens, flushed one by one, until the client goes away or the daemon
// stops. Subscribing before reading the backlog means no event falls between the two.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, since uint64) {
	ctx := r.Context()
	c, ok := callerFrom(ctx)
	if !ok {
		c = api.Caller{UID: -1, PID: -1}
	}
	release, err := s.counts.startFollow(c)
	if err != nil {
		s.log.Warn("refused an event stream", "reason", err, "uid", c.UID, "pid", c.PID)
		s.fail(w, r, api.Errorf(http.StatusServiceUnavailable, api.CodeBusy, "", "%v", err))
		return
	}
	defer release()
	ch, cancel := s.ctl.Subscribe(ctx)
	defer cancel()
	backlog, err := s.ctl.Events(ctx, since)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	last := since
	send := func(e api.Event) bool {
		if e.Seq != 0 && e.Seq <= last {
			return true // already sent from the backlog
		}
		b, err := json.Marshal(e)
		if err != nil {
			return false
		}
		// A follower that stops reading is dropped (Limits.WriteTimeout an event).
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.Limits.WriteTimeout))
		if _, err := w.Write(append(b, '\n')); err != nil {
			return false
		}
		if e.Seq > last {
			last = e.Seq
		}
		return rc.Flush() == nil
	}
	for _, e := range backlog {
		if !send(e) {
			return
		}
	}
	if err := rc.Flush(); err != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-ch:
			if !ok || !send(e) {
				return
			}
		}
	}
}
