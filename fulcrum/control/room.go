package control

import (
	"fmt"
	"time"

	"github.com/fulcrum-edge/fulcrum/fulcrum/proto"
	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// KindRoom: an inference stream's learned admission room changed (docs/runtime.md "The
// learned admission room"); at most one event per stream per RoomEventEvery.
const KindRoom Kind = "admission_room"

// RoomEventEvery rate-limits the admission-room events of one stream: the changes in
// between are counted in the next event (the scheduler changes a room at most once per
// scheduler.room_interval_ms; a room that moves faster than this is reported, not
// listed change by change).
const RoomEventEvery = 30 * time.Second

// roomWatch is what the controller last reported of each stream's learned room.
type roomWatch struct {
	seen map[string]uint64    // changes reported, by workload
	at   map[string]time.Time // when the last event was
}

// noteRooms records an event for each stream whose learned room changed since the last
// one (at most one per RoomEventEvery). Called with c.mu held.
func (c *Controller) noteRooms(snap sched.Snapshot, now time.Time) {
	if c.rooms.seen == nil {
		c.rooms = roomWatch{seen: map[string]uint64{}, at: map[string]time.Time{}}
	}
	for _, wl := range snap.Workloads {
		if wl.Role != proto.RoleInfer || wl.RoomChanges == c.rooms.seen[wl.Workload] {
			continue
		}
		if at, ok := c.rooms.at[wl.Workload]; ok && now.Sub(at) < RoomEventEvery {
			continue
		}
		n := wl.RoomChanges - c.rooms.seen[wl.Workload]
		c.rooms.seen[wl.Workload], c.rooms.at[wl.Workload] = wl.RoomChanges, now
		why := ""
		if wl.RoomWhy != "" {
			why = "; the last because " + wl.RoomWhy
		}
		c.events.Add(Event{Kind: KindRoom, Reason: fmt.Sprintf(
			"%s: admission room now %.0f ms (margin + %.0f ms learned; %d change(s) since the last event) for p99 %.0f ms against %.0f ms%s",
			wl.Workload, wl.AdmissionRoomMS, wl.RoomLearnedMS, n, wl.Latency.P99MS, wl.LatencyBudgetMS, why),
			Measured: &Measured{LatencyP99MS: wl.Latency.P99MS}})
	}
	// Forget streams no longer in the snapshot (bounded by the scheduler's workloads).
	for k := range c.rooms.seen {
		found := false
		for _, wl := range snap.Workloads {
			found = found || wl.Workload == k
		}
		if !found {
			delete(c.rooms.seen, k)
			delete(c.rooms.at, k)
		}
	}
}

// learnedRoomMS is the largest learned admission room (ms) of the inference streams in
// snap: what the decision adds to the scheduler's margin, so that the plan is judged
// with the room the scheduler applies (docs/design.md §9). One room for every stream
// is conservative for those that learned less.
func learnedRoomMS(snap sched.Snapshot) float64 {
	var m float64
	for _, wl := range snap.Workloads {
		if wl.Role == proto.RoleInfer {
			m = max(m, wl.RoomLearnedMS)
		}
	}
	return m
}
