package metrics

import (
	"context"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// collector reads the Source on every scrape (pull), so values are never stale.
type collector struct {
	src     Source
	timeout time.Duration

	scrapeOK, railPower, power, powerAvg                             *prometheus.Desc
	cores, cpuHz, gpuHz, emcHz, held                                 *prometheus.Desc
	budgetLatency, budgetPower, budgetRate, budgetQuantile, rateAuto *prometheus.Desc
	windowLatency, arrivalRate, requests, served, failed, misses     *prometheus.Desc
	throughput, samples, minibatches, overruns, workers              *prometheus.Desc
	profiles, violations, decisions, degraded, paused, uptime        *prometheus.Desc
	planFeasible, planBatch, planInForce                             *prometheus.Desc
	clamped, expired                                                 *prometheus.Desc
	temp, trip, throttled, gpuLoad, gpuRunHz, cpuRunHz, capGPUHz     *prometheus.Desc
	room, roomLearned, roomChanges                                   *prometheus.Desc
}

func newCollector(src Source, timeout time.Duration) *collector {
	w := "workload"
	return &collector{
		src: src, timeout: timeout,
		scrapeOK:       desc("fulcrum_scrape_ok", "1 when this scrape read fulcrumd's state, 0 when that failed (the other fulcrum_ metrics are then missing)."),
		railPower:      desc("fulcrum_board_rail_power_watts", "Latest power reading of each board rail.", "rail"),
		power:          desc("fulcrum_board_power_watts", "Latest total board power."),
		powerAvg:       desc("fulcrum_board_power_avg_1s_watts", "1 s moving average of total board power (what the power budget is checked on)."),
		cores:          desc("fulcrum_mode_cores", "Online CPU cores of the current power mode."),
		cpuHz:          desc("fulcrum_mode_cpu_frequency_hertz", "CPU frequency of the current power mode (cpu_khz x 1000)."),
		gpuHz:          desc("fulcrum_mode_gpu_frequency_hertz", "GPU frequency of the current power mode."),
		emcHz:          desc("fulcrum_mode_emc_frequency_hertz", "Memory (EMC) frequency of the current power mode."),
		held:           desc("fulcrum_mode_held", "1 while an operator-applied mode is held."),
		budgetLatency:  desc("fulcrum_budget_latency_seconds", "Inference latency budget, on fulcrum_budget_latency_quantile."),
		budgetPower:    desc("fulcrum_budget_power_watts", "Board power budget on the 1 s average; 0 when there is none."),
		budgetRate:     desc("fulcrum_budget_rate_per_second", "Inference arrival rate planned for (measured when fulcrum_budget_rate_auto is 1)."),
		budgetQuantile: desc("fulcrum_budget_latency_quantile", "Quantile of per-request latency the latency budget applies to."),
		rateAuto:       desc("fulcrum_budget_rate_auto", "1 when the arrival rate is measured rather than set."),
		windowLatency:  desc("fulcrum_inference_latency_window_seconds", "Inference latency quantiles over the scheduler's sliding window.", w, "quantile"),
		arrivalRate:    desc("fulcrum_inference_arrival_rate_per_second", "Measured inference arrival rate.", w),
		requests:       desc("fulcrum_inference_requests_total", "Inference requests reported by workers.", w),
		served:         desc("fulcrum_inference_served_total", "Inference requests served.", w),
		failed:         desc("fulcrum_inference_failed_total", "Inference requests that failed.", w),
		misses:         desc("fulcrum_inference_deadline_misses_total", "Served inference requests that finished after their deadline.", w),
		throughput:     desc("fulcrum_training_throughput_samples_per_second", "Training throughput over the scheduler's window.", w),
		samples:        desc("fulcrum_training_samples_total", "Training samples processed.", w),
		minibatches:    desc("fulcrum_training_minibatches_total", "Training minibatches run.", w),
		overruns:       desc("fulcrum_overruns_total", "Turns that ran far past their expected time.", w, "role"),
		workers:        desc("fulcrum_workers", "Live workers.", w, "role"),
		clamped:        desc("fulcrum_durations_clamped_total", "Releases that reported more time than the turn was held (the held time was used).", w, "role"),
		expired:        desc("fulcrum_turns_expired_total", "Turns taken back by the hold limit (the worker was dropped).", w, "role"),
		room:           desc("fulcrum_admission_room_seconds", "Room the scheduler's admission test keeps before the stream's deadlines (scheduler.margin_ms plus the learned room).", w),
		roomLearned:    desc("fulcrum_admission_room_learned_seconds", "The part of the admission room learned from the stream's latency window (0 while learning is off).", w),
		roomChanges:    desc("fulcrum_admission_room_changes_total", "Changes of the stream's learned admission room.", w),
		profiles:       desc("fulcrum_profiles_stored", "Profiles in the profile store."),
		violations:     desc("fulcrum_budget_violations_total", "Budget violations the controller detected.", "budget"),
		decisions:      desc("fulcrum_controller_decisions_total", "Controller decisions, by kind.", "kind"),
		degraded:       desc("fulcrum_degraded", "1 while fulcrumd runs but not as planned (see fulcrumctl status)."),
		paused:         desc("fulcrum_training_paused", "1 while training gets no GPU turns."),
		uptime:         desc("fulcrum_uptime_seconds", "Seconds since fulcrumd started."),
		planFeasible:   desc("fulcrum_plan_feasible", "1 when the current plan meets every budget; absent before the first plan."),
		planBatch:      desc("fulcrum_plan_infer_batch", "Inference batch size of the current plan."),
		planInForce:    desc("fulcrum_plan_in_force", "1 when the board runs the current plan's mode, 0 while the board refuses the change (fulcrum_degraded is then 1)."),
		temp:           desc("fulcrum_board_temperature_celsius", "Temperature of each readable thermal zone.", "zone"),
		trip:           desc("fulcrum_board_trip_point_celsius", "Passive trip point of each thermal zone (where clocks start to be capped).", "zone"),
		throttled:      desc("fulcrum_board_throttled", "1 while the board runs a clock under the floor it was set to (thermal throttling)."),
		gpuLoad:        desc("fulcrum_gpu_load_ratio", "GPU busy fraction, 0 to 1 (tegrastats GR3D_FREQ)."),
		gpuRunHz:       desc("fulcrum_board_gpu_running_frequency_hertz", "GPU clock the board runs now (cur_freq), next to fulcrum_mode_gpu_frequency_hertz set."),
		cpuRunHz:       desc("fulcrum_board_cpu_running_frequency_hertz", "CPU clock of the slowest online cluster now (cur_freq)."),
		capGPUHz:       desc("fulcrum_thermal_cap_gpu_frequency_hertz", "GPU clock the plan keeps under after throttling; absent without a thermal cap."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.scrapeOK, c.railPower, c.power, c.powerAvg, c.cores, c.cpuHz, c.gpuHz, c.emcHz, c.held,
		c.budgetLatency, c.budgetPower, c.budgetRate, c.budgetQuantile, c.rateAuto, c.windowLatency, c.arrivalRate, c.requests,
		c.served, c.failed, c.misses, c.throughput, c.samples, c.minibatches, c.overruns, c.workers, c.profiles, c.violations,
		c.decisions, c.degraded, c.paused, c.uptime, c.planFeasible, c.planBatch, c.planInForce, c.clamped, c.expired,
		c.temp, c.trip, c.throttled, c.gpuLoad, c.gpuRunHz, c.cpuRunHz, c.capGPUHz,
		c.room, c.roomLearned, c.roomChanges} {
		ch <- d
	}
}

func b01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sortedKeys keeps label order stable across scrapes.
func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	snap, err := c.src.MetricsSnapshot(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.scrapeOK, prometheus.GaugeValue, 0)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	st := snap.Status
	gauge(c.scrapeOK, 1)
	if p := st.Power; p != nil {
		for _, r := range p.Rails {
			gauge(c.railPower, r.PowerMW/1000, r.Name)
		}
		gauge(c.power, p.TotalMW/1000)
		if p.Avg1sSamples > 0 || p.Avg1sMW != 0 { // no reading in the window: absent, not 0 W
			gauge(c.powerAvg, p.Avg1sMW/1000)
		}
	}
	if h := st.Heat; h != nil {
		for _, z := range h.Zones {
			if z.Error == "" {
				gauge(c.temp, z.Celsius, z.Zone)
			}
			if z.TripC > 0 {
				gauge(c.trip, z.TripC, z.Zone)
			}
		}
		gauge(c.throttled, b01(h.Throttled))
		if h.GPULoad != nil {
			gauge(c.gpuLoad, *h.GPULoad)
		}
		gauge(c.gpuRunHz, float64(h.GPUHz))
		if h.CPUKHz > 0 {
			gauge(c.cpuRunHz, float64(h.CPUKHz)*1000)
		}
		if h.CapGPUHz > 0 {
			gauge(c.capGPUHz, float64(h.CapGPUHz))
		}
	}
	if st.Mode.Cores > 0 {
		gauge(c.cores, float64(st.Mode.Cores))
		gauge(c.cpuHz, float64(st.Mode.CPUKHz)*1000)
		gauge(c.gpuHz, float64(st.Mode.GPUHz))
		gauge(c.emcHz, float64(st.Mode.EMCHz))
	}
	gauge(c.held, b01(st.ModeHeld))
	b := st.Budgets
	gauge(c.budgetLatency, b.LatencyMS/1000)
	gauge(c.budgetPower, b.PowerMW/1000)
	gauge(c.budgetRate, b.RateRPS)
	gauge(c.budgetQuantile, b.Quantile)
	gauge(c.rateAuto, b01(b.RateAuto))
	for _, wl := range st.Workloads {
		n := wl.Workload
		counter(c.overruns, float64(wl.Overruns), n, wl.Role)
		counter(c.clamped, float64(wl.DurationsClamped), n, wl.Role)
		counter(c.expired, float64(wl.HoldExpired), n, wl.Role)
		if wl.Role == "train" {
			gauge(c.throughput, wl.ThroughputPerS, n)
			counter(c.samples, float64(wl.Samples), n)
			counter(c.minibatches, float64(wl.Minibatches), n)
			continue
		}
		gauge(c.arrivalRate, wl.ArrivalRateHz, n)
		counter(c.requests, float64(wl.Requests), n)
		counter(c.served, float64(wl.Served), n)
		counter(c.failed, float64(wl.Failed), n)
		counter(c.misses, float64(wl.DeadlineMisses), n)
		gauge(c.room, wl.AdmissionRoomMS/1000, n)
		gauge(c.roomLearned, wl.AdmissionRoomLearnedMS/1000, n)
		counter(c.roomChanges, float64(wl.AdmissionRoomChanges), n)
		if wl.Latency.Count > 0 {
			gauge(c.windowLatency, wl.Latency.P50MS/1000, n, "0.5")
			gauge(c.windowLatency, wl.Latency.P95MS/1000, n, "0.95")
			gauge(c.windowLatency, wl.Latency.P99MS/1000, n, "0.99")
			gauge(c.windowLatency, wl.Latency.MaxMS/1000, n, "1")
		}
	}
	type wr struct{ workload, role string }
	live := map[wr]int{}
	var order []wr
	for _, w := range st.Workers {
		k := wr{w.Workload, w.Role}
		if _, ok := live[k]; !ok {
			order = append(order, k)
		}
		live[k]++
	}
	for _, k := range order {
		gauge(c.workers, float64(live[k]), k.workload, k.role)
	}
	gauge(c.profiles, float64(st.Profiles))
	for _, k := range sortedKeys(snap.Violations) {
		counter(c.violations, float64(snap.Violations[k]), k)
	}
	for _, k := range sortedKeys(snap.Decisions) {
		counter(c.decisions, float64(snap.Decisions[k]), k)
	}
	gauge(c.degraded, b01(st.Degraded))
	gauge(c.paused, b01(st.TrainingPaused))
	gauge(c.uptime, st.UptimeS)
	if p := st.Plan; p != nil {
		gauge(c.planFeasible, b01(p.Feasible))
		gauge(c.planBatch, float64(p.InferBatch))
		gauge(c.planInForce, b01(p.ApplyError == ""))
	}
}
