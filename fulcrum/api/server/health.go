package server

import (
	"net/http"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

// getHealth answers GET /v1/healthz: 200 when ready, 503 when not, the checks either
// way. Anyone who can open the socket may ask (a probe needs no group).
func (s *Server) getHealth(w http.ResponseWriter, r *http.Request) {
	h := s.ctl.Health(r.Context())
	if h.Checks == nil {
		h.Checks = []api.HealthCheck{}
	}
	status := http.StatusOK
	if !h.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// resetBudgets answers POST /v1/budgets/reset (no body): back to the configuration's
// budgets, the run-time ones dropped and their saved copy deleted.
func (s *Server) resetBudgets(w http.ResponseWriter, r *http.Request, by api.Caller) {
	b, err := s.ctl.ResetBudgets(r.Context(), by)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}
