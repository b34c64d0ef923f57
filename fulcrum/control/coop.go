package control

import (
	"context"
	"sync"

	"github.com/fulcrum-edge/fulcrum/fulcrum/sched"
)

// coopMutex is the controller's lock. Under a real clock it is a sync.Mutex. Under a
// cooperative clock (sched.Coop: the daemon on virtual time, internal/vclock) a goroutine
// that finds it held parks on the clock instead of blocking: the holder may itself be
// parked (Step holds c.mu while BetweenTurns waits for the running minibatch), and only
// the clock can run it again. The zero value is a plain mutex.
type coopMutex struct {
	real sync.Mutex
	co   sched.Coop

	state   sync.Mutex // guards held and waiters (co only)
	held    bool
	waiters []sched.Event
}

func (m *coopMutex) Lock() {
	if m.co == nil {
		m.real.Lock()
		return
	}
	m.state.Lock()
	if !m.held {
		m.held = true
		m.state.Unlock()
		return
	}
	e := m.co.NewEvent()
	m.waiters = append(m.waiters, e)
	m.state.Unlock()
	_ = e.Wait(context.Background()) // Unlock hands the lock over: held stays true
}

func (m *coopMutex) Unlock() {
	if m.co == nil {
		m.real.Unlock()
		return
	}
	m.state.Lock()
	defer m.state.Unlock()
	if len(m.waiters) == 0 {
		m.held = false
		return
	}
	next := m.waiters[0]
	m.waiters = m.waiters[1:]
	next.Fire()
}
