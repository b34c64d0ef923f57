package control

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/server"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// An import through the controller checks modes against fulcrumd's own board: a profile
// of that board at 999 cores is a 400 naming the knob and stores nothing, the same row
// at one of the board's modes is stored, and another board's row is only checked for
// plausibility.
func TestImportChecksModesAgainstTheBoard(t *testing.T) {
	e := newEnv(t, sched.NewFakeClock())
	c := e.controller(Config{}, plan.Targets{LatencyMS: 400})
	cl := client.New(apitest.Serve(t, server.Config{Policy: server.PolicyFunc(func(api.Caller) error { return nil })}, NewAPI(c, time.Time{})))
	defer cl.Close()
	m := e.board.mode
	row := func(board string, cores int) string {
		return fmt.Sprintf("workload,role,cores,cpu_khz,gpu_hz,emc_hz,batch,time_ms,power_mw,board\nw-infer,infer,%d,%d,%d,%d,1,10,20000,%s\n",
			cores, m.CPUKHz, m.GPUHz, m.EMCHz, board)
	}
	_, err := cl.ImportProfiles(context.Background(), strings.NewReader(row(e.spec.Name, 999)), api.ImportOptions{})
	if err == nil {
		t.Fatal("999 cores on fulcrumd's board was imported, want a 400")
	}
	ae := api.AsError(err)
	if ae.Status != 400 || !strings.Contains(ae.Message, "cores 999 is not a level of this board") {
		t.Fatalf("999 cores on fulcrumd's board: %v (status %d), want a 400 naming the cores", err, ae.Status)
	}
	if n, _ := e.store.Count(); n != 0 {
		t.Fatalf("%d profiles stored", n)
	}
	for _, r := range []string{row(e.spec.Name, m.Cores), row("another-board", 999)} {
		if res, err := cl.ImportProfiles(context.Background(), strings.NewReader(r), api.ImportOptions{}); err != nil || res.Added != 1 {
			t.Fatalf("import %q: %+v %v", r, res, err)
		}
	}
}
