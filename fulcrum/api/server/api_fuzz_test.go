package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
)

// fuzzRig is a real control API on a unix socket in front of the fake AGX Orin
// controller; the policy lets the test's own uid change things, so every body reaches
// the handler (peer credentials are only set on a real socket connection).
type fuzzRig struct {
	fake *apitest.Fake
	hc   *http.Client
}

func newFuzzRig(f *testing.F) *fuzzRig {
	f.Helper()
	fake := apitest.NewOrin(f, 0)
	sock := apitest.Serve(f, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	f.Cleanup(tr.CloseIdleConnections)
	return &fuzzRig{fake: fake, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// do sends body and checks the answer's shape: never a 5xx, always a JSON body, and a
// non-2xx answer is {"error": {code, message}}. It returns the status and the error.
func (r *fuzzRig) do(t *testing.T, method, path string, body []byte) (int, *api.Error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://fulcrumd"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s %q: status %d (%s); bad input must be a 4xx", method, path, body, resp.StatusCode, out)
	}
	if !json.Valid(out) {
		t.Fatalf("%s %s %q: answer is not JSON: %q", method, path, body, out)
	}
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, nil
	}
	var eb struct {
		Error *api.Error `json:"error"`
	}
	if err := json.Unmarshal(out, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("%s %s %q: status %d with no error object: %q", method, path, body, resp.StatusCode, out)
	}
	return resp.StatusCode, eb.Error
}

func FuzzPutBudgets(f *testing.F) {
	for _, s := range []string{
		`{"latency_ms":80}`, `{"power_mw":25000}`, `{"power_mw":30}`, `{"rate_rps":40}`,
		`{"rate_auto":true}`, `{"rate_auto":false}`, `{"quantile":0.95,"rho_max":0.9}`,
		`{"quantile":1}`, `{"latency_ms":-1}`, `{"latency_ms":1e309}`, `{"latency_ms":"80"}`,
		`{"latency":80}`, `{}`, ``, `{"latency_ms":80}{}`, `[1]`, `null`, `{"power_mw":null}`,
	} {
		f.Add([]byte(s))
	}
	r := newFuzzRig(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		before, _ := r.fake.Budgets(context.Background())
		status, e := r.do(t, http.MethodPut, "/v1/budgets", body)
		after, _ := r.fake.Budgets(context.Background())
		if e != nil {
			if !reflect.DeepEqual(after, before) {
				t.Fatalf("rejected PUT %q (%s) changed the budgets: %+v -> %+v", body, e.Message, before, after)
			}
			if e.Code == api.CodeBadBudget && e.Field == "" && !strings.Contains(e.Message, "no budget given") {
				t.Fatalf("bad_budget answer to %q names no field: %+v", body, e)
			}
			return
		}
		if status != http.StatusOK {
			t.Fatalf("PUT %q: status %d", body, status)
		}
		if err := server.ValidateBudgets(after); err != nil {
			t.Fatalf("accepted PUT %q left invalid budgets %+v: %v", body, after, err)
		}
	})
}

func FuzzPutMode(f *testing.F) {
	for _, s := range []string{
		`{"mode":{"cores":8,"cpu_khz":1728000,"gpu_hz":612000000,"emc_hz":3199000000}}`,
		`{"mode":{"cores":13,"cpu_khz":1728000,"gpu_hz":612000000,"emc_hz":3199000000}}`,
		`{"mode":{"cores":8,"cpu_khz":1728,"gpu_hz":612000000,"emc_hz":3199000000}}`,
		`{"mode":{"cores":-1,"cpu_khz":0,"gpu_hz":0,"emc_hz":0}}`,
		`{"mode":{"cores":8}}`, `{"mode":"8/1728000/612000000/3199000000"}`, `{}`, `{"mode":null}`,
		`{"mode":{"cores":1e99,"cpu_khz":1,"gpu_hz":1,"emc_hz":1}}`,
	} {
		f.Add([]byte(s))
	}
	r := newFuzzRig(f)
	lv := apitest.OrinLevels()
	f.Fuzz(func(t *testing.T, body []byte) {
		before, _ := r.fake.Mode(context.Background())
		_, e := r.do(t, http.MethodPut, "/v1/mode", body)
		after, _ := r.fake.Mode(context.Background())
		if e != nil {
			if after.Current != before.Current {
				t.Fatalf("rejected PUT %q (%s) changed the mode: %v -> %v", body, e.Message, before.Current, after.Current)
			}
			return
		}
		m := after.Current
		if !contains(lv.Cores, m.Cores) || !contains(lv.CPUKHz, m.CPUKHz) || !contains(lv.GPUHz, m.GPUHz) || !contains(lv.EMCHz, m.EMCHz) {
			t.Fatalf("accepted PUT %q set a mode off the board's levels: %v", body, m)
		}
	})
}

func FuzzOptimize(f *testing.F) {
	for _, s := range []string{
		`{"method":"gmd"}`, `{"method":"als","max_profiles":50}`, `{"method":"gmd","max_profiles":-1}`,
		`{"method":"simplex"}`, `{"method":"gmd","max_profiles":100000}`, `{"method":1}`, `{}`, `x`,
	} {
		f.Add([]byte(s))
	}
	r := newFuzzRig(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, e := r.do(t, http.MethodPost, "/v1/optimize", body)
		if e == nil {
			var req api.OptimizeRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("accepted optimize body %q that is not JSON: %v", body, err)
			}
			if req.Method != api.OptimizeGMD && req.Method != api.OptimizeALS {
				t.Fatalf("accepted optimize method %q", req.Method)
			}
		}
	})
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestImpossibleBudgetsNameTheFieldAndChangeNothing: through the real socket, each
// impossible budget or wrong unit is a 400 naming its field, and the budgets stay as
// they were.
func TestImpossibleBudgetsNameTheFieldAndChangeNothing(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, fake)
	c := client.New(sock)
	defer c.Close()
	ctx := context.Background()
	before, err := c.Budgets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		u     api.BudgetsUpdate
		field string
	}{
		{api.BudgetsUpdate{PowerMW: f(30)}, "power_mw"},       // watts given as milliwatts
		{api.BudgetsUpdate{LatencyMS: f(0.01)}, "latency_ms"}, // below the 0.1 ms floor
		{api.BudgetsUpdate{LatencyMS: f(-5)}, "latency_ms"},
		{api.BudgetsUpdate{Quantile: f(99)}, "quantile"}, // percent given as a fraction
		{api.BudgetsUpdate{RhoMax: f(1.5)}, "rho_max"},
		{api.BudgetsUpdate{RateRPS: f(-1)}, "rate_rps"},
		{api.BudgetsUpdate{LatencyMS: f(80), PowerMW: f(-1)}, "power_mw"}, // one bad field spoils the lot
	}
	for _, tc := range cases {
		_, err := c.SetBudgets(ctx, tc.u)
		var e *api.Error
		if err == nil || !errors.As(err, &e) || e.Field != tc.field || !strings.Contains(e.Message, tc.field) {
			t.Errorf("PUT %+v: got %v; want a bad_budget error naming %s", tc.u, err, tc.field)
		}
		after, err := c.Budgets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(after, before) {
			t.Fatalf("rejected PUT %+v changed the budgets: %+v -> %+v", tc.u, before, after)
		}
	}
}
