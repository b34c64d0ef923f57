package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

func TestBudgetsApply(t *testing.T) {
	cur := api.Budgets{LatencyMS: 100, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}
	cases := []struct {
		name  string
		u     api.BudgetsUpdate
		want  api.Budgets
		field string // non-empty: the error's field
	}{
		{"latency only", api.BudgetsUpdate{LatencyMS: ptr(80.0)}, api.Budgets{LatencyMS: 80, PowerMW: 30000, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"no power budget", api.BudgetsUpdate{PowerMW: ptr(0.0)}, api.Budgets{LatencyMS: 100, RateRPS: 40, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"rate auto drops the rate", api.BudgetsUpdate{RateAuto: ptr(true)}, api.Budgets{LatencyMS: 100, PowerMW: 30000, RateAuto: true, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"rate_auto false alone", api.BudgetsUpdate{RateAuto: ptr(false)}, cur, "rate_auto"},
		{"rate_auto false with a rate", api.BudgetsUpdate{RateAuto: ptr(false), RateRPS: ptr(5.0)}, api.Budgets{LatencyMS: 100, PowerMW: 30000, RateRPS: 5, Quantile: 0.99, RhoMax: 0.95}, ""},
		{"power in watts", api.BudgetsUpdate{PowerMW: ptr(30.0)}, cur, "power_mw"},
		{"latency NaN-free", api.BudgetsUpdate{LatencyMS: ptr(0.01)}, cur, "latency_ms"},
		{"quantile 1", api.BudgetsUpdate{Quantile: ptr(1.0)}, cur, "quantile"},
		{"rho 0", api.BudgetsUpdate{RhoMax: ptr(0.0)}, cur, "rho_max"},
		{"rate 0", api.BudgetsUpdate{RateRPS: ptr(0.0)}, cur, "rate_rps"},
	}
	for _, tc := range cases {
		got, err := tc.u.Apply(cur)
		if tc.field != "" {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Field != tc.field || ae.Code != api.CodeBadBudget || ae.Status != 400 {
				t.Errorf("%s: %v, want a bad_budget on %s", tc.name, err, tc.field)
			}
			if got != cur {
				t.Errorf("%s: a rejected update returned %+v", tc.name, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: result does not validate: %v", tc.name, err)
		}
	}
	if s := (api.Budgets{LatencyMS: 80, RateAuto: true, RateRPS: 40.2, Quantile: 0.999}).String(); s != "latency 80ms (p99.9), power none, rate auto (measured 40.2 req/s)" {
		t.Errorf("String = %q", s)
	}
	if err := (api.Budgets{LatencyMS: 80, Quantile: 0.99, RhoMax: 0.95}).Validate(); err == nil || !strings.Contains(err.Error(), "rate_rps") {
		t.Errorf("a set rate of 0 validated: %v", err)
	}
}
