//go:build cgo

package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// fakeClocks is a ClockLister over a table: memory clock MHz -> graphics clocks MHz.
type fakeClocks struct {
	uuid  string
	table map[uint32][]uint32
	err   error
}

func (f fakeClocks) MemoryClocksMHz(uuid string) ([]uint32, error) {
	if f.err != nil {
		return nil, f.err
	}
	if uuid != f.uuid {
		return nil, errors.New("wrong uuid " + uuid)
	}
	var out []uint32
	for m := range f.table {
		out = append(out, m)
	}
	slices.Sort(out)
	slices.Reverse(out) // NVML lists clocks highest first
	return out, nil
}

func (f fakeClocks) GraphicsClocksMHz(uuid string, mem uint32) ([]uint32, error) {
	if uuid != f.uuid {
		return nil, errors.New("wrong uuid " + uuid)
	}
	g, ok := f.table[mem]
	if !ok {
		return nil, errors.New("no such memory clock")
	}
	return g, nil
}

const testUUID = "GPU-8a5e3c1b-0000-4000-8000-000000000001"

// gpu is a mock discrete GPU that records what was set on it.
type gpu struct {
	dev          *mock.Device
	lib          *mock.Interface
	powerLimitMW uint32
	gpuLocked    [][2]uint32
	memLocked    [][2]uint32
	resets       []string
	shutdowns    int
	failGpuAt    uint32    // SetGpuLockedClocks at this MHz fails
	runningMHz   uint32    // graphics clock now (default 1752)
	appMHz       [2]uint32 // application clocks (graphics, memory); 0: not supported
}

func newGPU() *gpu {
	g := &gpu{powerLimitMW: 350000}
	var pci gonvml.PciInfo
	copy(pci.BusId[:], []int8{'0', '0', '0', '0', ':', '1', '7', ':', '0', '0', '.', '0'})
	g.dev = &mock.Device{
		GetNameFunc:    func() (string, gonvml.Return) { return "NVIDIA H100 80GB HBM3", gonvml.SUCCESS },
		GetUUIDFunc:    func() (string, gonvml.Return) { return testUUID, gonvml.SUCCESS },
		GetPciInfoFunc: func() (gonvml.PciInfo, gonvml.Return) { return pci, gonvml.SUCCESS },
		GetClockInfoFunc: func(c gonvml.ClockType) (uint32, gonvml.Return) {
			if c == gonvml.CLOCK_MEM {
				return 2619, gonvml.SUCCESS
			}
			if g.runningMHz > 0 {
				return g.runningMHz, gonvml.SUCCESS
			}
			return 1752, gonvml.SUCCESS // between levels: Current snaps it
		},
		GetApplicationsClockFunc: func(c gonvml.ClockType) (uint32, gonvml.Return) {
			i := 0
			if c == gonvml.CLOCK_MEM {
				i = 1
			}
			if g.appMHz[i] == 0 {
				return 0, gonvml.ERROR_NOT_SUPPORTED
			}
			return g.appMHz[i], gonvml.SUCCESS
		},
		GetPowerUsageFunc:             func() (uint32, gonvml.Return) { return 123456, gonvml.SUCCESS },
		GetTotalEnergyConsumptionFunc: func() (uint64, gonvml.Return) { return 987654321, gonvml.SUCCESS },
		GetTemperatureFunc:            func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 41, gonvml.SUCCESS },
		GetPowerManagementLimitFunc:   func() (uint32, gonvml.Return) { return g.powerLimitMW, gonvml.SUCCESS },
		GetPowerManagementLimitConstraintsFunc: func() (uint32, uint32, gonvml.Return) {
			return 200000, 700000, gonvml.SUCCESS
		},
		SetPowerManagementLimitFunc: func(mw uint32) gonvml.Return { g.powerLimitMW = mw; return gonvml.SUCCESS },
		SetGpuLockedClocksFunc: func(lo, hi uint32) gonvml.Return {
			if lo == g.failGpuAt {
				return gonvml.ERROR_NO_PERMISSION
			}
			g.gpuLocked = append(g.gpuLocked, [2]uint32{lo, hi})
			return gonvml.SUCCESS
		},
		SetMemoryLockedClocksFunc: func(lo, hi uint32) gonvml.Return {
			g.memLocked = append(g.memLocked, [2]uint32{lo, hi})
			return gonvml.SUCCESS
		},
		ResetGpuLockedClocksFunc:    func() gonvml.Return { g.resets = append(g.resets, "gpu"); return gonvml.SUCCESS },
		ResetMemoryLockedClocksFunc: func() gonvml.Return { g.resets = append(g.resets, "mem"); return gonvml.SUCCESS },
	}
	g.lib = &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:               func() gonvml.Return { g.shutdowns++; return gonvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, gonvml.Return) { return 1, gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) { return g.dev, gonvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "580.65.06", gonvml.SUCCESS },
	}
	return g
}

var h100Clocks = fakeClocks{uuid: testUUID, table: map[uint32][]uint32{
	2619: {1980, 1965, 1755, 1410, 345},
	1593: {1410, 1200, 345},
}}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// hostRoot writes a fake host cpufreq tree with two CPUs of different maxima.
func hostRoot(t *testing.T) string {
	root := t.TempDir()
	for cpu, khz := range map[string]string{"cpu0": "3000000\n", "cpu1": "3500000\n"} {
		d := filepath.Join(root, "sys/devices/system/cpu", cpu, "cpufreq")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cpuinfo_max_freq"), []byte(khz), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func openGPU(t *testing.T, g *gpu, control bool) *Backend {
	t.Helper()
	b, err := OpenWith(g.lib, h100Clocks, Options{ClockControl: control, Root: hostRoot(t), Logger: quiet(),
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLibraryNotFoundReal(t *testing.T) {
	// The real go-nvml over a library path that does not exist: Init fails with
	// ERROR_LIBRARY_NOT_FOUND and Open says what to do.
	_, err := Open(Options{LibraryPath: filepath.Join(t.TempDir(), "libnvidia-ml.so.1"), Logger: quiet()})
	if err == nil {
		t.Fatal("Open succeeded without an NVML library")
	}
	if !errors.Is(err, gonvml.ERROR_LIBRARY_NOT_FOUND) || !strings.Contains(err.Error(), "install the NVIDIA driver") {
		t.Fatalf("error %q: want ERROR_LIBRARY_NOT_FOUND and advice", err)
	}
}

func TestNothingCalledBeforeInit(t *testing.T) {
	// Every other mock func is nil: calling any of them would panic.
	for _, ret := range []gonvml.Return{gonvml.ERROR_LIBRARY_NOT_FOUND, gonvml.ERROR_DRIVER_NOT_LOADED} {
		lib := &mock.Interface{InitFunc: func() gonvml.Return { return ret }}
		_, err := OpenWith(lib, h100Clocks, Options{Logger: quiet()})
		if !errors.Is(err, ret) {
			t.Fatalf("init %v: error %v", ret, err)
		}
		if len(lib.InitCalls()) != 1 {
			t.Fatalf("Init called %d times", len(lib.InitCalls()))
		}
	}
}

func TestSpaceAndInfo(t *testing.T) {
	g := newGPU()
	b := openGPU(t, g, true)
	s := b.Space()
	if s.Size() != 8 || s.IsGrid() {
		t.Fatalf("space: %d modes, grid %v; want the 8 supported pairs, not their grid", s.Size(), s.IsGrid())
	}
	lv := s.Levels()
	if !slices.Equal(lv.Cores, []int{runtime.NumCPU()}) || !slices.Equal(lv.CPUKHz, []int64{3500000}) {
		t.Fatalf("host levels %v %v", lv.Cores, lv.CPUKHz)
	}
	if !slices.Equal(lv.EMCHz, []int64{1593e6, 2619e6}) {
		t.Fatalf("memory levels %v", lv.EMCHz)
	}
	m := powermode.Mode{Cores: runtime.NumCPU(), CPUKHz: 3500000, GPUHz: 1200e6, EMCHz: 1593e6}
	if !s.Contains(m) {
		t.Fatalf("%s missing", m)
	}
	m.EMCHz = 2619e6 // 1200 MHz is only offered with the 1593 MHz memory clock
	if s.Contains(m) {
		t.Fatalf("%s should not be in the space", m)
	}
	info := b.Info()
	if info.Name != "nvidia-h100-80gb-hbm3" || info.Module != testUUID || info.SoC != "discrete 0000:17:00.0" || info.L4T != "driver 580.65.06" {
		t.Fatalf("info %+v", info)
	}
	cur, err := b.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cur.GPUHz != 1755e6 || cur.EMCHz != 2619e6 {
		t.Fatalf("current %s: want the running clocks snapped to 1755/2619 MHz", cur)
	}
}

// Before any Apply, the mode is the application clocks, not the running clocks: an idle
// H100 runs at 345 MHz with 1980 MHz set, and a mode read from the running clock moved
// with the load.
func TestCurrentIsTheApplicationClocks(t *testing.T) {
	g := newGPU()
	g.runningMHz = 345
	g.appMHz = [2]uint32{1980, 2619}
	b := openGPU(t, g, false)
	cur, err := b.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cur.GPUHz != 1980e6 || cur.EMCHz != 2619e6 {
		t.Fatalf("current %s with the GPU idle at 345 MHz: want the application clocks 1980/2619 MHz", cur.Human())
	}
	g.runningMHz = 1410 // under load, still the same setting
	if again, _ := b.Current(context.Background()); again != cur {
		t.Fatalf("current moved with the running clock: %s then %s", cur.Human(), again.Human())
	}
}

func TestHostCPUWithoutCpufreq(t *testing.T) {
	if got := hostCPUKHz(t.TempDir()); got != UncontrolledCPUKHz {
		t.Fatalf("no cpufreq: %d", got)
	}
}

// Read-only, the space is the one pair the GPU is set to: the controller profiles it and
// chooses batch sizes there. "Applying" it writes nothing; any other pair is refused.
func TestReadOnlyPlansAtTheClocksSet(t *testing.T) {
	g := newGPU()
	g.runningMHz = 345
	g.appMHz = [2]uint32{1755, 2619}
	b := openGPU(t, g, false)
	ctx := context.Background()
	if b.Space().Size() != 1 || b.Supported().Size() != 8 {
		t.Fatalf("read-only: space %d modes, supported %d; want 1 and 8", b.Space().Size(), b.Supported().Size())
	}
	at := b.Space().Modes()[0]
	if at.GPUHz != 1755e6 || at.EMCHz != 2619e6 {
		t.Fatalf("read-only space holds %s; want the application clocks 1755/2619 MHz", at.Human())
	}
	if err := b.Apply(ctx, at); err != nil {
		t.Fatalf("applying the mode the GPU is set to: %v", err)
	}
	other := powermode.Mode{Cores: at.Cores, CPUKHz: at.CPUKHz, GPUHz: 1410e6, EMCHz: 2619e6}
	if err := b.Apply(ctx, other); err == nil || !strings.Contains(err.Error(), "clock_control: true") {
		t.Fatalf("read-only Apply of another pair: %v", err)
	}
	if cur, _ := b.Current(ctx); cur != at {
		t.Fatalf("current %s after the no-op apply, want %s", cur.Human(), at.Human())
	}
	if len(g.gpuLocked)+len(g.memLocked)+len(g.resets) != 0 {
		t.Fatalf("read-only backend wrote clocks: %+v", g)
	}
}

func TestReadOnlyRefuses(t *testing.T) {
	g := newGPU()
	b := openGPU(t, g, false)
	m := b.Supported().Modes()[0]
	if m == b.Space().Modes()[0] {
		m = b.Supported().Modes()[1]
	}
	err := b.Apply(context.Background(), m)
	if err == nil || !strings.Contains(err.Error(), "clock_control: true") {
		t.Fatalf("read-only Apply: %v", err)
	}
	if err := b.SetPowerLimit(context.Background(), 300000); err == nil || !strings.Contains(err.Error(), "clock_control") {
		t.Fatalf("read-only SetPowerLimit: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if len(g.gpuLocked)+len(g.memLocked)+len(g.resets) != 0 || g.powerLimitMW != 350000 {
		t.Fatalf("read-only backend changed the GPU: %+v", g)
	}
	if g.shutdowns != 1 {
		t.Fatalf("shutdowns %d", g.shutdowns)
	}
}

func TestApplyAndRestoreOnClose(t *testing.T) {
	g := newGPU()
	b := openGPU(t, g, true)
	ctx := context.Background()
	bad := b.Space().Modes()[0]
	bad.GPUHz = 1234e6
	if err := b.Apply(ctx, bad); err == nil {
		t.Fatal("unsupported clock pair accepted")
	}
	m := powermode.Mode{Cores: runtime.NumCPU(), CPUKHz: 3500000, GPUHz: 1410e6, EMCHz: 1593e6}
	if err := b.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.memLocked, [][2]uint32{{1593, 1593}}) || !slices.Equal(g.gpuLocked, [][2]uint32{{1410, 1410}}) {
		t.Fatalf("locked mem %v gpu %v", g.memLocked, g.gpuLocked)
	}
	if cur, _ := b.Current(ctx); cur != m {
		t.Fatalf("current %s, want %s", cur, m)
	}
	if err := b.SetPowerLimit(ctx, 100000); err == nil {
		t.Fatal("power limit below the GPU's minimum accepted")
	}
	if err := b.SetPowerLimit(ctx, 300000); err != nil || g.powerLimitMW != 300000 {
		t.Fatalf("set power limit: %v (%d)", err, g.powerLimitMW)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.resets, []string{"gpu", "mem"}) || g.powerLimitMW != 350000 || g.shutdowns != 1 {
		t.Fatalf("after close: resets %v, power limit %d, shutdowns %d", g.resets, g.powerLimitMW, g.shutdowns)
	}
	if err := b.Close(); err != nil || g.shutdowns != 1 {
		t.Fatalf("second close: %v, shutdowns %d", err, g.shutdowns)
	}
	if _, err := b.Power(ctx); err == nil {
		t.Fatal("Power after Close succeeded")
	}
}

func TestApplyRollsBack(t *testing.T) {
	g := newGPU()
	b := openGPU(t, g, true)
	ctx := context.Background()
	first := powermode.Mode{Cores: runtime.NumCPU(), CPUKHz: 3500000, GPUHz: 1980e6, EMCHz: 2619e6}
	// Failing with nothing applied before: clocks go back to the driver.
	g.failGpuAt = 1980
	err := b.Apply(ctx, first)
	if err == nil || !strings.Contains(err.Error(), "run fulcrumd as root") || !strings.Contains(err.Error(), "left to the driver") {
		t.Fatalf("apply error %v", err)
	}
	if !slices.Equal(g.resets, []string{"gpu", "mem"}) {
		t.Fatalf("resets %v", g.resets)
	}
	// Failing after a mode was applied: that mode is locked again.
	g.failGpuAt = 0
	if err := b.Apply(ctx, first); err != nil {
		t.Fatal(err)
	}
	g.failGpuAt = 345
	second := powermode.Mode{Cores: runtime.NumCPU(), CPUKHz: 3500000, GPUHz: 345e6, EMCHz: 1593e6}
	if err := b.Apply(ctx, second); err == nil || !strings.Contains(err.Error(), "previous mode") {
		t.Fatalf("apply error %v", err)
	}
	if last := g.memLocked[len(g.memLocked)-1]; last != [2]uint32{2619, 2619} {
		t.Fatalf("memory clock not rolled back: %v", g.memLocked)
	}
	if cur, _ := b.Current(ctx); cur != first {
		t.Fatalf("current %s, want %s", cur, first)
	}
}

func TestSnapshotRestore(t *testing.T) {
	g := newGPU()
	b := openGPU(t, g, true)
	ctx := context.Background()
	snap, err := b.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(snap.State, &st); err != nil || st.UUID != testUUID || st.PowerLimitMW != 350000 || st.ClocksLocked {
		t.Fatalf("state %+v %v", st, err)
	}
	if snap.Backend != BackendName || snap.Board != "nvidia-h100-80gb-hbm3" {
		t.Fatalf("snapshot %+v", snap)
	}
	if err := b.SetPowerLimit(ctx, 250000); err != nil {
		t.Fatal(err)
	}
	other := *snap
	other.Backend = "tegra"
	if err := b.Restore(ctx, &other); err == nil {
		t.Fatal("tegra snapshot accepted")
	}
	raw, _ := json.Marshal(State{UUID: "GPU-other", PowerLimitMW: 1})
	other = powermode.Snapshot{Backend: BackendName, State: raw}
	if err := b.Restore(ctx, &other); err == nil || !strings.Contains(err.Error(), "GPU-other") {
		t.Fatalf("other GPU's snapshot: %v", err)
	}
	if err := b.Restore(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if g.powerLimitMW != 350000 || !slices.Equal(g.resets, []string{"gpu", "mem"}) {
		t.Fatalf("after restore: %d mW, resets %v", g.powerLimitMW, g.resets)
	}
}

func TestSensors(t *testing.T) {
	g := newGPU()
	b := openGPU(t, g, false)
	ctx := context.Background()
	p, err := b.Power(ctx)
	if err != nil || p.TotalMW != 123456 || len(p.Rails) != 1 || p.Rails[0].Name != "gpu" || !p.At.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("power %+v %v", p, err)
	}
	if e, err := b.EnergyMJ(ctx); err != nil || e != 987654321 {
		t.Fatalf("energy %d %v", e, err)
	}
	z, err := b.Thermal(ctx)
	if err != nil || len(z) != 1 || z[0].Celsius != 41 {
		t.Fatalf("thermal %+v %v", z, err)
	}
	g.dev.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	if z, err := b.Thermal(ctx); err != nil || z[0].Err == "" {
		t.Fatalf("unreadable temperature: %+v %v", z, err)
	}
}

func TestNotDiscreteOrMissing(t *testing.T) {
	g := newGPU()
	g.dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) { return gonvml.PciInfo{}, gonvml.ERROR_NOT_SUPPORTED }
	_, err := OpenWith(g.lib, h100Clocks, Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "tegra backend") || g.shutdowns != 1 {
		t.Fatalf("integrated GPU: %v (shutdowns %d)", err, g.shutdowns)
	}
	g = newGPU()
	if _, err := OpenWith(g.lib, h100Clocks, Options{Device: 3, Logger: quiet()}); err == nil || !strings.Contains(err.Error(), "sees 1 GPU") {
		t.Fatalf("missing GPU: %v", err)
	}
	g = newGPU()
	if _, err := OpenWith(g.lib, fakeClocks{err: errors.New("boom")}, Options{Logger: quiet()}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("clock listing failure: %v", err)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{"NVIDIA H100 80GB HBM3": "nvidia-h100-80gb-hbm3", "  Tesla T4 ": "tesla-t4", "NVIDIA GeForce RTX 4090 (x)": "nvidia-geforce-rtx-4090-x"} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSingleMemoryClockNotLocked(t *testing.T) {
	g := newGPU()
	// HBM GPUs list one memory clock and often refuse memory locks: never ask.
	g.dev.SetMemoryLockedClocksFunc = nil
	g.dev.ResetMemoryLockedClocksFunc = nil
	one := fakeClocks{uuid: testUUID, table: map[uint32][]uint32{2619: {1980, 1410, 345}}}
	b, err := OpenWith(g.lib, one, Options{ClockControl: true, Root: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	m := powermode.Mode{Cores: runtime.NumCPU(), CPUKHz: UncontrolledCPUKHz, GPUHz: 1410e6, EMCHz: 2619e6}
	if err := b.Apply(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.gpuLocked, [][2]uint32{{1410, 1410}}) || !slices.Equal(g.resets, []string{"gpu"}) {
		t.Fatalf("locked %v, resets %v", g.gpuLocked, g.resets)
	}
}

// The board lock of an NVML GPU is its PCI device directory as sysfs names it.
func TestSysfsBusID(t *testing.T) {
	for nv, want := range map[string]string{
		"00000000:17:00.0": "0000:17:00.0",
		"00000000:B3:00.0": "0000:b3:00.0",
		"0000:65:00.0":     "0000:65:00.0",
		"00010000:01:00.0": "00010000:01:00.0", // a domain past 16 bits is kept whole
	} {
		if got := sysfsBusID(nv); got != want {
			t.Errorf("sysfsBusID(%q) = %q, want %q", nv, got, want)
		}
	}
}
