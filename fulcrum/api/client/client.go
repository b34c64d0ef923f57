// Package client is the Go client of fulcrumd's control API: one method per endpoint,
// over the unix socket, answering in the wire types of fulcrum/api. It links none of
// fulcrumd's internals (fulcrum/api/deps_test.go holds it there), so a dashboard or a
// script in Go stays small:
//
//	c := client.New(api.DefaultSocket)
//	defer c.Close()
//	st, err := c.Status(ctx)
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

// ErrNoDaemon is wrapped by a Client's error when nothing answers on the socket.
var ErrNoDaemon = errors.New("cannot reach fulcrumd")

// ErrNotControlSocket is wrapped by a Client's error when the socket answers but not in
// HTTP (the worker socket, most likely).
var ErrNotControlSocket = errors.New("not fulcrumd's control socket")

// Client calls the control API over its unix socket.
type Client struct {
	socket string
	hc     *http.Client
}

// New returns a client for the socket at path (api.DefaultSocket where fulcrumd runs as
// a system service).
func New(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns: 2,
	}
	return &Client{socket: path, hc: &http.Client{Transport: tr}}
}

// Socket is the socket path the client uses.
func (c *Client) Socket() string { return c.socket }

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// connErr explains a failed connection in the user's terms.
func (c *Client) connErr(err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w at %s: is fulcrumd running? (systemctl status fulcrumd) — or pass --socket", ErrNoDaemon, c.socket)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("no permission to open %s: join the %s group (sudo usermod -aG %s $USER, then log in again) or use sudo", c.socket, api.GroupName, api.GroupName)
	}
	return fmt.Errorf("%w at %s: %v", ErrNoDaemon, c.socket, err)
}

// do sends a request; a 2xx answer is returned open, anything else becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	u := "http://fulcrum/" + api.Version + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, c.connErr(err)
		}
		if strings.Contains(err.Error(), "malformed HTTP") {
			// The worker socket answers a request line with a JSON error line.
			return nil, fmt.Errorf("%w: %s did not answer in HTTP; it is probably fulcrumd's worker socket (worker.sock, where workers register), not its control socket: give the control socket, e.g. --socket %s", ErrNotControlSocket, c.socket, api.DefaultSocket)
		}
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
		eb.Error.Status = resp.StatusCode
		return nil, eb.Error
	}
	return nil, &api.Error{Status: resp.StatusCode, Code: api.CodeInternal,
		Message: fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(b))}
}

func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, q, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w (is fulcrumd the same version as fulcrumctl?)", method, path, err)
	}
	return nil
}

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var s api.Status
	return s, c.call(ctx, http.MethodGet, "/status", nil, nil, &s)
}

// Budgets is GET /v1/budgets.
func (c *Client) Budgets(ctx context.Context) (api.Budgets, error) {
	var b api.Budgets
	return b, c.call(ctx, http.MethodGet, "/budgets", nil, nil, &b)
}

// SetBudgets is PUT /v1/budgets.
func (c *Client) SetBudgets(ctx context.Context, u api.BudgetsUpdate) (api.Budgets, error) {
	var b api.Budgets
	return b, c.call(ctx, http.MethodPut, "/budgets", nil, u, &b)
}

// ResetBudgets is POST /v1/budgets/reset.
func (c *Client) ResetBudgets(ctx context.Context) (api.Budgets, error) {
	var b api.Budgets
	return b, c.call(ctx, http.MethodPost, "/budgets/reset", nil, nil, &b)
}

// Health is GET /v1/healthz. A 503 (not ready) is no error: Health.Ready says it; an
// error means fulcrumd did not answer (or answered something else).
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://fulcrum/"+api.Version+"/healthz", nil)
	if err != nil {
		return h, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return h, ctx.Err()
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return h, c.connErr(err)
		}
		return h, fmt.Errorf("GET /healthz on %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return h, fmt.Errorf("GET /healthz: HTTP %d: %s (is fulcrumd the same version as fulcrumctl?)", resp.StatusCode, bytes.TrimSpace(b))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil {
		return h, fmt.Errorf("GET /healthz: decode the answer: %w (is fulcrumd the same version as fulcrumctl?)", err)
	}
	return h, nil
}

// Workers is GET /v1/workers.
func (c *Client) Workers(ctx context.Context) ([]api.Worker, error) {
	var r api.WorkersResponse
	return r.Workers, c.call(ctx, http.MethodGet, "/workers", nil, nil, &r)
}

// Mode is GET /v1/mode.
func (c *Client) Mode(ctx context.Context) (api.ModeInfo, error) {
	var m api.ModeInfo
	return m, c.call(ctx, http.MethodGet, "/mode", nil, nil, &m)
}

// ApplyMode is PUT /v1/mode.
func (c *Client) ApplyMode(ctx context.Context, m api.Mode) (api.ModeInfo, error) {
	var mi api.ModeInfo
	return mi, c.call(ctx, http.MethodPut, "/mode", nil, api.ModeRequest{Mode: m}, &mi)
}

// ApplyPreset is PUT /v1/mode with a live nvpmodel preset (name or id).
func (c *Client) ApplyPreset(ctx context.Context, nameOrID string) (api.ModeInfo, error) {
	var mi api.ModeInfo
	return mi, c.call(ctx, http.MethodPut, "/mode", nil, api.ModeRequest{Preset: nameOrID}, &mi)
}

// ResumeMode is POST /v1/mode/resume.
func (c *Client) ResumeMode(ctx context.Context) (api.ModeInfo, error) {
	var mi api.ModeInfo
	return mi, c.call(ctx, http.MethodPost, "/mode/resume", nil, struct{}{}, &mi)
}

func filterQuery(f api.ProfileFilter) url.Values {
	q := url.Values{}
	if f.Board != "" {
		q.Set("board", f.Board)
	}
	if f.Workload != "" {
		q.Set("workload", f.Workload)
	}
	if f.Role != "" {
		q.Set("role", f.Role)
	}
	return q
}

// Profiles is GET /v1/profiles.
func (c *Client) Profiles(ctx context.Context, f api.ProfileFilter) ([]api.Profile, error) {
	var r api.ProfilesResponse
	return r.Profiles, c.call(ctx, http.MethodGet, "/profiles", filterQuery(f), nil, &r)
}

// ExportProfiles is GET /v1/profiles/export in format (api.FormatCSV or FormatJSON),
// copied to w.
func (c *Client) ExportProfiles(ctx context.Context, w io.Writer, format string, f api.ProfileFilter) error {
	q := filterQuery(f)
	q.Set("format", format)
	resp, err := c.do(ctx, http.MethodGet, "/profiles/export", q, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// ImportProfiles is POST /v1/profiles/import.
func (c *Client) ImportProfiles(ctx context.Context, r io.Reader, opts api.ImportOptions) (api.ImportResponse, error) {
	q := url.Values{}
	if opts.Format != "" {
		q.Set("format", opts.Format)
	}
	if opts.Board != "" {
		q.Set("board", opts.Board)
	}
	if opts.Overwrite {
		q.Set("overwrite", "1")
	}
	resp, err := c.do(ctx, http.MethodPost, "/profiles/import", q, r, "application/octet-stream")
	var res api.ImportResponse
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// Optimize is POST /v1/optimize; it blocks until the search ends.
func (c *Client) Optimize(ctx context.Context, req api.OptimizeRequest) (api.OptimizeResult, error) {
	var r api.OptimizeResult
	return r, c.call(ctx, http.MethodPost, "/optimize", nil, req, &r)
}

// Events is GET /v1/events?since=N.
func (c *Client) Events(ctx context.Context, since uint64) (api.EventsResponse, error) {
	var r api.EventsResponse
	q := url.Values{"since": {strconv.FormatUint(since, 10)}}
	return r, c.call(ctx, http.MethodGet, "/events", q, nil, &r)
}

// Follow streams events after since to fn until ctx ends, fn returns an error, or the
// daemon closes the stream (then the error says so).
func (c *Client) Follow(ctx context.Context, since uint64, fn func(api.Event) error) error {
	q := url.Values{"since": {strconv.FormatUint(since, 10)}, "follow": {"1"}}
	resp, err := c.do(ctx, http.MethodGet, "/events", q, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e api.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("event stream: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("event stream from %s: %w", c.socket, err)
	}
	return errors.New("fulcrumd closed the event stream (did it stop?)")
}
