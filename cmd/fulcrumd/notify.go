package main

import (
	"context"
	"log/slog"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
)

// startWatchdog feeds systemd's watchdog (WatchdogSec= in fulcrumd.service) until ctx
// ends. A ping is sent only when the scheduler answered a snapshot request since the
// previous tick: the scheduler's lock is what every worker turn goes through, so a
// deadlocked or wedged scheduler stops the pings and systemd restarts fulcrumd (whose
// next start restores the board from its snapshot). Outside systemd, or without
// WatchdogSec, it does nothing.
func startWatchdog(ctx context.Context, log *slog.Logger, d *daemon.Daemon) {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog settings unreadable; not feeding the watchdog", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	// Half the interval, as sd_watchdog_enabled(3) recommends, so one late tick is not fatal.
	period := interval / 2
	log.Info("feeding the systemd watchdog", "watchdog_ms", interval.Milliseconds(), "period_ms", period.Milliseconds())
	t := time.NewTicker(period)
	go func() {
		defer t.Stop()
		watchdogLoop(ctx, log, t.C, func() <-chan struct{} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				d.Server.Snapshot()
			}()
			return done
		}, sdNotify)
	}()
}

// sdNotify sends one state line to systemd's notify socket (a no-op without one).
func sdNotify(state string) error {
	_, err := sddaemon.SdNotify(false, state)
	return err
}

// watchdogLoop sends WATCHDOG=1 on each tick if the probe started at the previous tick
// has finished, then starts a new probe. probe starts one check and returns a channel
// closed when it completes. A probe still running means the daemon is stuck: the ping is
// withheld (logged once per stuck spell) and no second probe is piled on. It returns when
// ctx ends or ticks is closed.
func watchdogLoop(ctx context.Context, log *slog.Logger, ticks <-chan time.Time, probe func() <-chan struct{}, notify func(string) error) {
	var done <-chan struct{} // the outstanding probe; nil before the first tick
	stuck := false
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ticks:
			if !ok {
				return
			}
		}
		if done != nil {
			select {
			case <-done:
			default:
				if !stuck {
					log.Error("the scheduler has not answered since the last watchdog tick; withholding the systemd watchdog ping so systemd restarts fulcrumd if it stays stuck")
					stuck = true
				}
				continue
			}
		}
		if stuck {
			log.Info("the scheduler answers again; feeding the systemd watchdog")
			stuck = false
		}
		if err := notify(sddaemon.SdNotifyWatchdog); err != nil {
			log.Warn("systemd watchdog ping failed", "err", err)
		}
		done = probe()
	}
}
