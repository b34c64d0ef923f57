package tegra

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// rails finds the INA3221 channels: hwmon (ina3221 driver, JetPack 5/6:
// inC_label, inC_input mV, currC_input mA for C = 1..3) and IIO (ina3221x driver,
// JetPack 4: rail_name_K, in_powerK_input mW, in_voltageK_input mV, in_currentK_input
// mA for K = 0..2). Channels labelled NC (not connected) are skipped; so is the
// "sum of shunt voltages" channel (in7), which is not a rail. The hwmonN number varies
// from boot to boot, so it is globbed each time.
func (b *Backend) rails() ([]rail, error) {
	var out []rail
	dirs, err := b.t.glob(hwmonGlob)
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		for c := 1; c <= 3; c++ {
			label, err := b.t.readString(fmt.Sprintf("%s/in%d_label", d, c))
			if err != nil || skipRail(label) {
				continue
			}
			out = append(out, rail{Name: label, Volt: fmt.Sprintf("%s/in%d_input", d, c), Curr: fmt.Sprintf("%s/curr%d_input", d, c)})
		}
	}
	dirs, err = b.t.glob(iioGlob)
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		for k := 0; k <= 2; k++ {
			label, err := b.t.readString(fmt.Sprintf("%s/rail_name_%d", d, k))
			if err != nil || skipRail(label) {
				continue
			}
			out = append(out, rail{
				Name:  label,
				Volt:  fmt.Sprintf("%s/in_voltage%d_input", d, k),
				Curr:  fmt.Sprintf("%s/in_current%d_input", d, k),
				Power: fmt.Sprintf("%s/in_power%d_input", d, k),
			})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("power: no INA3221 rail under %s or %s: is the ina3221 driver loaded (and is this a Jetson)?",
			path.Dir(path.Dir(path.Dir(hwmonGlob))), path.Dir(path.Dir(iioGlob)))
	}
	return out, nil
}

func skipRail(label string) bool {
	return label == "" || strings.EqualFold(label, "NC") || strings.Contains(strings.ToLower(label), "sum of shunt")
}

// Power reads every rail now. Power per rail is the sensor's mW (IIO) or mV·mA/1000
// (hwmon); the total follows the board's rule: "sum" adds the rails, a rail name (e.g.
// VDD_IN on Orin NX/Nano) takes that rail, which already is the board's input.
func (b *Backend) Power(ctx context.Context) (powermode.PowerReading, error) {
	if err := ctx.Err(); err != nil {
		return powermode.PowerReading{}, err
	}
	rs, err := b.rails()
	if err != nil {
		return powermode.PowerReading{}, err
	}
	r := powermode.PowerReading{At: b.now()}
	for _, rl := range rs {
		var rp powermode.RailPower
		rp.Name = rl.Name
		if rp.VoltageMV, err = b.readFloat(rl.Volt); err != nil {
			return powermode.PowerReading{}, err
		}
		if rp.CurrentMA, err = b.readFloat(rl.Curr); err != nil {
			return powermode.PowerReading{}, err
		}
		if rl.Power != "" {
			if rp.PowerMW, err = b.readFloat(rl.Power); err != nil {
				return powermode.PowerReading{}, err
			}
		} else {
			rp.PowerMW = rp.VoltageMV * rp.CurrentMA / 1000
		}
		r.Rails = append(r.Rails, rp)
	}
	total := b.spec.Power.Total
	if total == "" || total == "sum" {
		for _, rp := range r.Rails {
			r.TotalMW += rp.PowerMW
		}
		return r, nil
	}
	i := slices.IndexFunc(r.Rails, func(rp powermode.RailPower) bool { return rp.Name == total })
	if i < 0 {
		names := make([]string, len(r.Rails))
		for j, rp := range r.Rails {
			names[j] = rp.Name
		}
		return powermode.PowerReading{}, fmt.Errorf("power: the catalog says rail %q is board %s's total, but the sensors have only %s: fix power.total in its catalog entry",
			total, b.info.Name, strings.Join(names, ", "))
	}
	r.TotalMW = r.Rails[i].PowerMW
	return r, nil
}

func (b *Backend) readFloat(p string) (float64, error) {
	s, err := b.t.readString(p)
	if err != nil {
		return 0, fmt.Errorf("power: read %s: %w", p, cause(err))
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("power: %s holds %q, not a number: is the sensor driver healthy?", p, s)
	}
	return v, nil
}

// Thermal reads every thermal zone, in zone-number order. A zone whose temperature
// cannot be read (the cv* zones answer EAGAIN while their engines are off) gets Err
// set; that is not a failure.
func (b *Backend) Thermal(ctx context.Context) ([]powermode.ThermalZone, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dirs, err := b.t.glob(thermalGlob)
	if err != nil {
		return nil, err
	}
	type zoneDir struct {
		n   int
		dir string
	}
	var zs []zoneDir
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(path.Base(d), "thermal_zone"))
		if err == nil {
			zs = append(zs, zoneDir{n, d})
		}
	}
	if len(zs) == 0 {
		return nil, fmt.Errorf("thermal: no zone under %s", path.Dir(thermalGlob))
	}
	slices.SortFunc(zs, func(a, c zoneDir) int { return a.n - c.n })
	out := make([]powermode.ThermalZone, 0, len(zs))
	for _, z := range zs {
		tz := powermode.ThermalZone{Zone: path.Base(z.dir)}
		if typ, err := b.t.readString(z.dir + "/type"); err == nil && typ != "" {
			tz.Zone = typ
		}
		s, err := b.t.readString(z.dir + "/temp")
		if err != nil {
			tz.Err = fmt.Sprintf("read %s/temp: %v", z.dir, cause(err))
		} else if mc, perr := strconv.ParseInt(s, 10, 64); perr != nil {
			tz.Err = fmt.Sprintf("%s/temp holds %q, not millidegrees", z.dir, s)
		} else {
			tz.Celsius = float64(mc) / 1000
		}
		tz.TripC = b.tripC(z.dir)
		out = append(out, tz)
	}
	return out, nil
}

// maxTrips bounds the trip_point_N files looked at per zone (Jetson zones have up to 5).
const maxTrips = 16

// tripC is a zone's lowest passive trip point in °C, where clocks start to be capped;
// without a passive one, its lowest hot or critical one (active trips drive fans, not
// clocks); 0 when it has none.
func (b *Backend) tripC(dir string) float64 {
	var passive, other float64
	for n := range maxTrips {
		typ, err := b.t.readString(fmt.Sprintf("%s/trip_point_%d_type", dir, n))
		if err != nil {
			break
		}
		s, err := b.t.readString(fmt.Sprintf("%s/trip_point_%d_temp", dir, n))
		if err != nil {
			continue
		}
		mc, err := strconv.ParseInt(s, 10, 64)
		if err != nil || mc <= 0 {
			continue
		}
		c := float64(mc) / 1000
		switch typ {
		case "passive":
			if passive == 0 || c < passive {
				passive = c
			}
		case "hot", "critical":
			if other == 0 || c < other {
				other = c
			}
		}
	}
	if passive > 0 {
		return passive
	}
	return other
}

// Heat reads the thermal zones, the GPU's load and the clocks running against the
// floors set. A clock under its floor is throttled: Apply
// pins min = max, so only a thermal (or power) cap outside the kernel's governors
// takes it there; on Jetson that is the BPMP firmware's throttling, which cpufreq and
// devfreq report in cur_freq but not in scaling_min_freq/min_freq.
func (b *Backend) Heat(ctx context.Context) (powermode.HeatReading, error) {
	zones, err := b.Thermal(ctx)
	if err != nil {
		return powermode.HeatReading{}, err
	}
	h := powermode.HeatReading{At: b.now(), Zones: zones, GPULoad: -1}
	var why []string
	if v, err := b.readInt(b.gpuLoadPath()); err == nil {
		h.GPULoad = min(max(float64(v)/1000, 0), 1)
	}
	if h.GPUHz, err = b.readInt(b.gpu.file("cur_freq")); err != nil {
		return h, fmt.Errorf("heat: %w", err)
	}
	if h.GPUFloorHz, err = b.readInt(b.gpu.file("min_freq")); err != nil {
		return h, fmt.Errorf("heat: %w", err)
	}
	if h.GPUHz < h.GPUFloorHz {
		h.Throttled = true
		why = append(why, fmt.Sprintf("GPU runs %d MHz under its %d MHz floor", h.GPUHz/1e6, h.GPUFloorHz/1e6))
	}
	online, err := b.onlineSet()
	if err != nil {
		return h, fmt.Errorf("heat: %w", err)
	}
	for _, p := range b.policies {
		if !p.active(online) {
			continue
		}
		cur, err := b.readInt(p.file("cpuinfo_cur_freq"))
		if err != nil {
			if cur, err = b.readInt(p.file("scaling_cur_freq")); err != nil {
				return h, fmt.Errorf("heat: %w", err)
			}
		}
		floor, err := b.readInt(p.file("scaling_min_freq"))
		if err != nil {
			return h, fmt.Errorf("heat: %w", err)
		}
		if h.CPUKHz == 0 || cur < h.CPUKHz {
			h.CPUKHz, h.CPUFloorKHz = cur, floor
		}
		if cur < floor {
			h.Throttled = true
			why = append(why, fmt.Sprintf("CPU policy%d runs %d MHz under its %d MHz floor", p.Num, cur/1000, floor/1000))
		}
	}
	h.Why = strings.Join(why, "; ")
	return h, nil
}

// gpuLoadPath is the GPU device's load node (per mille busy): the devfreq directory
// sits at <device>/devfreq/<device>.
func (b *Backend) gpuLoadPath() string {
	return path.Dir(path.Dir(b.gpu.Dir)) + "/load"
}
