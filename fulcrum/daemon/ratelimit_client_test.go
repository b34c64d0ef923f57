package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/proto/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// TestGoClientTakesRateLimitedAsRefusals: the Go client on a real socket, two inference
// streams, one reporting 2,000 requests at once. fulcrumd refuses the excess with
// rate_limited; the flood's pending Acquire does not return the error but the grant of
// the admitted requests, TakeRefused names each refused request with the error (its IDs
// copied from request_ids), the refused and granted requests do not overlap and together
// are all 2,000, and the steady stream is served. Before, Acquire returned the error
// (without the ids) and the worker stopped.
func TestGoClientTakesRateLimitedAsRefusals(t *testing.T) {
	s := startServerL(t, Config{Sched: sched.Config{DefaultTrain: time.Millisecond, DefaultInfer: 5 * time.Millisecond}}, 100*time.Millisecond)
	steady := dial(t, s, client.Registration{Role: proto.RoleInfer, Workload: "steady", Batch: 8})
	flood := dial(t, s, client.Registration{Role: proto.RoleInfer, Workload: "flood", Batch: 4096})
	const n = 2000
	reqs := make([]proto.Request, n)
	for i := range reqs {
		reqs[i].ID = fmt.Sprintf("f%d", i)
	}
	if err := flood.Arrivals(reqs); err != nil {
		t.Fatal(err)
	}
	granted := map[string]bool{}
	refused := map[string]*proto.Error{}
	for len(granted)+len(refused) < n {
		g, err := flood.Acquire(ctx10(t))
		if err != nil {
			t.Fatalf("flood: Acquire returned %v after %d granted, %d refused; want refusals through TakeRefused and the acquire kept waiting", err, len(granted), len(refused))
		}
		for _, id := range g.RequestIDs {
			granted[id] = true
		}
		if err := flood.Release(g.Grant, time.Millisecond, 0, nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range flood.TakeRefused() {
			if r.Err == nil || r.Err.Code != proto.CodeRateLimited || len(r.Err.IDs) == 0 {
				t.Fatalf("refusal %+v: want the rate_limited error naming the requests", r)
			}
			if granted[r.ID] {
				t.Fatalf("%s was both granted and refused", r.ID)
			}
			refused[r.ID] = r.Err
		}
	}
	if len(refused) == 0 || len(granted) == 0 || len(granted)+len(refused) != n {
		t.Fatalf("flood: %d granted, %d refused of %d; want some of each, all accounted for", len(granted), len(refused), n)
	}
	t.Logf("flood: %d of %d refused, %d granted", len(refused), n, len(granted))
	if err := steady.Arrivals([]proto.Request{{ID: "s1"}}); err != nil {
		t.Fatal(err)
	}
	g, err := steady.Acquire(ctx10(t))
	if err != nil || len(g.RequestIDs) != 1 || g.RequestIDs[0] != "s1" {
		t.Fatalf("steady: %+v, %v; want a grant for s1", g, err)
	}
	if rs := steady.TakeRefused(); len(rs) != 0 {
		t.Fatalf("steady refused %+v", rs)
	}
	// The flood is still registered: a heartbeat is answered.
	if err := flood.Heartbeat(ctx10(t)); err != nil {
		t.Fatalf("flood after its refusals: %v", err)
	}
}
