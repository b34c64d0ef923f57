//go:build cgo

package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// Backend drives one discrete GPU through NVML. It implements powermode.Backend.
// Methods are safe for concurrent use; Apply, SetPowerLimit and Restore are serialised.
type Backend struct {
	lib    gonvml.Interface
	dev    gonvml.Device
	o      Options
	uuid   string
	info   powermode.BoardInfo
	space  *powermode.Space // what the controller may choose: every pair, or read-only the one it runs at
	full   *powermode.Space // every supported (graphics, memory) pair
	cores  int
	cpuKHz int64
	pciBus string // NVML's bus id, e.g. "00000000:17:00.0"
	// lockMem: the GPU lists more than one memory clock, so Apply locks it. With one
	// (HBM datacenter GPUs) there is nothing to choose, and many of them refuse memory
	// locks (ERROR_NOT_SUPPORTED), so it is left alone.
	lockMem bool

	mu      sync.Mutex
	applied *powermode.Mode // the mode Apply last set; nil while the driver governs clocks
	orig    *State          // the state found before the first change, for Close
	closed  bool
}

var _ powermode.Backend = (*Backend)(nil)

// State is the Snapshot's State: what Restore puts back. NVML cannot read locked
// clocks back, so the snapshot records whether Fulcrum locked them; Restore always
// resets them to the driver's default (unlocked), the state after boot.
type State struct {
	UUID string `json:"uuid"`
	// PowerLimitMW is the power limit found (nvmlDeviceGetPowerManagementLimit); 0 when
	// the GPU does not report one, and Restore then leaves the limit alone.
	PowerLimitMW uint32 `json:"power_limit_mw"`
	// ClocksLocked says Fulcrum had locked clocks when the snapshot was taken.
	ClocksLocked bool `json:"clocks_locked"`
}

// Open loads NVML (go-nvml, dlopen of Options.LibraryPath), initialises it, and opens
// GPU Options.Device. It fails with a clear error when the library is missing or the
// GPU is not a discrete one whose clocks NVML can list.
func Open(o Options) (*Backend, error) {
	o.fill()
	return OpenWith(gonvml.New(gonvml.WithLibraryPath(o.LibraryPath)), DLClocks{LibraryPath: o.LibraryPath}, o)
}

// OpenWith is Open over an injected NVML interface and clock lister (tests use
// go-nvml's mock). Nothing is called on lib before its Init succeeds.
func OpenWith(lib gonvml.Interface, clocks ClockLister, o Options) (*Backend, error) {
	o.fill()
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		if ret == gonvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("nvml: %s not found: install the NVIDIA driver, or on a Jetson use board auto (the tegra backend): %w", o.LibraryPath, ret)
		}
		return nil, fmt.Errorf("nvml: init: %w (is the NVIDIA driver loaded? try nvidia-smi)", ret)
	}
	b, err := open(lib, clocks, o)
	if err != nil {
		lib.Shutdown()
		return nil, err
	}
	return b, nil
}

func open(lib gonvml.Interface, clocks ClockLister, o Options) (*Backend, error) {
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: device count: %w", ret)
	}
	if o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("nvml: GPU %d does not exist: NVML sees %d GPU(s) (indices as in nvidia-smi)", o.Device, n)
	}
	dev, ret := lib.DeviceGetHandleByIndex(o.Device)
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: GPU %d: handle: %w", o.Device, ret)
	}
	name, ret := dev.GetName()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: GPU %d: name: %w", o.Device, ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: GPU %d (%s): uuid: %w", o.Device, name, ret)
	}
	// Integrated GPUs (Jetson Orin/Thor's nvgpu) have no PCI function and no clock or
	// power controls in NVML: they belong to the tegra backend.
	pci, ret := dev.GetPciInfo()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: GPU %d (%s) has no PCI info (%v): not a discrete GPU; on a Jetson use board auto (the tegra backend)", o.Device, name, ret)
	}
	b := &Backend{lib: lib, dev: dev, o: o, uuid: uuid, cores: runtime.NumCPU(), cpuKHz: hostCPUKHz(o.Root)}
	b.pciBus = busID(pci)
	b.info = powermode.BoardInfo{Name: slug(name), Model: name, Module: uuid, SoC: "discrete " + b.pciBus}
	if v, ret := lib.SystemGetDriverVersion(); ret == gonvml.SUCCESS {
		b.info.L4T = "driver " + v
	}
	space, err := buildSpace(clocks, uuid, b.cores, b.cpuKHz)
	if err != nil {
		return nil, fmt.Errorf("nvml: GPU %d (%s): %w", o.Device, name, err)
	}
	b.space, b.full = space, space
	b.lockMem = len(space.Levels().EMCHz) > 1
	if !o.ClockControl {
		// Read-only, the one mode fulcrumd can run at is the one the GPU is set to: a space
		// of that mode alone lets the controller profile it and choose batch sizes there.
		// The whole table made every search fail at its first refused write, and nothing
		// was planned (an H200, 2026-11-26).
		at, err := b.setMode()
		if err != nil {
			return nil, fmt.Errorf("nvml: GPU %d (%s): %w", o.Device, name, err)
		}
		if b.space, err = powermode.NewSubspace([]powermode.Mode{at}); err != nil {
			return nil, fmt.Errorf("nvml: GPU %d (%s): %w", o.Device, name, err)
		}
		o.Logger.Info("nvml: read-only: fulcrumd plans at the clocks the GPU is set to; nvml.clock_control: true lets it choose clocks",
			"mode", at.Human())
	}
	o.Logger.Info("nvml: GPU opened", "index", o.Device, "name", name, "uuid", uuid, "modes", space.Size(),
		"clock_control", o.ClockControl)
	return b, nil
}

// LockPath is the node fulcrumd locks to own this GPU (powermode.LockBoard): its PCI
// device directory in sysfs under Options.Root, /sys/bus/pci/devices/DDDD:BB:DD.F,
// which names the GPU itself whatever runtime or state directory a daemon uses.
func (b *Backend) LockPath() string {
	return filepath.Join(b.o.Root, "sys", "bus", "pci", "devices", sysfsBusID(b.pciBus))
}

// sysfsBusID turns NVML's bus id ("00000000:17:00.0": a 32-bit domain, upper case)
// into sysfs's ("0000:17:00.0").
func sysfsBusID(nv string) string {
	id := strings.ToLower(nv)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) == 8 && strings.HasPrefix(dom, "0000") {
		id = dom[4:] + ":" + rest
	}
	return id
}

// busID reads the PCI bus id, a NUL-terminated C string.
func busID(p gonvml.PciInfo) string {
	var b []byte
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// buildSpace lists every (memory clock, graphics clock) pair NVML supports. The
// graphics clocks differ per memory clock, so the space is the subset of exactly those
// pairs, not their grid.
func buildSpace(clocks ClockLister, uuid string, cores int, cpuKHz int64) (*powermode.Space, error) {
	mems, err := clocks.MemoryClocksMHz(uuid)
	if err != nil {
		return nil, err
	}
	if len(mems) == 0 {
		return nil, errors.New("NVML lists no supported memory clocks (clock control not supported on this GPU)")
	}
	var modes []powermode.Mode
	for _, mem := range mems {
		grs, err := clocks.GraphicsClocksMHz(uuid, mem)
		if err != nil {
			return nil, err
		}
		for _, gr := range grs {
			if gr == 0 || mem == 0 {
				continue
			}
			modes = append(modes, powermode.Mode{Cores: cores, CPUKHz: cpuKHz, GPUHz: int64(gr) * 1e6, EMCHz: int64(mem) * 1e6})
		}
	}
	if len(modes) == 0 {
		return nil, errors.New("NVML lists no supported graphics clocks")
	}
	return powermode.NewSubspace(modes)
}

// Info identifies the GPU: Name is its slugged name, Model NVML's name, Module its UUID,
// SoC "discrete" and its PCI bus id, L4T the driver version.
func (b *Backend) Info() powermode.BoardInfo { return b.info }

// Space is what fulcrumd may choose: with clock control the set of supported (graphics,
// memory) clock pairs, read-only the one pair the GPU is set to; with one cores level (the
// host's CPU count) and one cpu_khz level (the host's maximum), never changed.
func (b *Backend) Space() *powermode.Space { return b.space }

// Supported is every (graphics, memory) clock pair the GPU lists, also when read-only
// (where Space is the one pair it is set to).
func (b *Backend) Supported() *powermode.Space { return b.full }

// ClockControl reports whether Apply may change clocks.
func (b *Backend) ClockControl() bool { return b.o.ClockControl }

// Current returns the mode Apply set; before any Apply (the driver governs the clocks)
// it reads the application clocks — the clocks the driver runs the GPU at under load,
// the setting nvidia-smi -ac changes — and snaps them to the space. The running clocks
// are the fallback where a GPU reports no application clocks: they follow the load (an
// H100 idles at 345 MHz and runs at 1980 MHz a moment later), so a mode read from them
// changed with every idle spell (seen on an H100, 2026-11-26).
func (b *Backend) Current(ctx context.Context) (powermode.Mode, error) {
	if err := ctx.Err(); err != nil {
		return powermode.Mode{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return powermode.Mode{}, err
	}
	if b.applied != nil {
		return *b.applied, nil
	}
	return b.setMode()
}

// setMode is the application clocks snapped to the supported pairs.
func (b *Backend) setMode() (powermode.Mode, error) {
	gr, err := b.setClockMHz(gonvml.CLOCK_GRAPHICS, "graphics")
	if err != nil {
		return powermode.Mode{}, err
	}
	mem, err := b.setClockMHz(gonvml.CLOCK_MEM, "memory")
	if err != nil {
		return powermode.Mode{}, err
	}
	return b.full.SnapNearest(powermode.Mode{Cores: b.cores, CPUKHz: b.cpuKHz, GPUHz: int64(gr) * 1e6, EMCHz: int64(mem) * 1e6}), nil
}

// setClockMHz is the application clock of one domain, or the running clock where the GPU
// reports none (not supported, or 0).
func (b *Backend) setClockMHz(c gonvml.ClockType, what string) (uint32, error) {
	if mhz, ret := b.dev.GetApplicationsClock(c); ret == gonvml.SUCCESS && mhz > 0 {
		return mhz, nil
	}
	mhz, ret := b.dev.GetClockInfo(c)
	if ret != gonvml.SUCCESS {
		return 0, fmt.Errorf("nvml: %s clock: %w", what, ret)
	}
	return mhz, nil
}

func (b *Backend) usable() error {
	if b.closed {
		return errors.New("nvml: backend is closed")
	}
	return nil
}

// Apply locks the graphics clock to m.GPUHz and the memory clock to m.EMCHz (both
// min = max; the memory clock only when the GPU lists more than one). It refuses unless clock control is enabled, and m's cores and cpu_khz
// must be the host's (the only levels). On error the clocks are put back as they were.
func (b *Backend) Apply(ctx context.Context, m powermode.Mode) error {
	if !b.o.ClockControl {
		// The mode the GPU is set to is "applied" by writing nothing; any other is refused.
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.usable(); err != nil {
			return err
		}
		if at, err := b.setMode(); err == nil && at == m {
			return nil
		}
		return fmt.Errorf("nvml: apply %s: %s", m, EnableHint)
	}
	if !b.full.Contains(m) {
		return fmt.Errorf("nvml: apply %s: not a supported clock pair of this GPU (fulcrumctl board modes lists them)", m)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return err
	}
	if b.orig == nil {
		st, err := b.readState()
		if err != nil {
			return fmt.Errorf("nvml: apply %s: read the GPU's state before changing it: %w (nothing was changed)", m, err)
		}
		b.orig = st
	}
	memMHz, grMHz := uint32(m.EMCHz/1e6), uint32(m.GPUHz/1e6)
	if b.lockMem {
		if ret := b.dev.SetMemoryLockedClocks(memMHz, memMHz); ret != gonvml.SUCCESS {
			return b.rollback(fmt.Errorf("nvml: apply %s: lock memory clock at %d MHz: %w%s", m, memMHz, ret, permHint(ret)))
		}
	}
	if ret := b.dev.SetGpuLockedClocks(grMHz, grMHz); ret != gonvml.SUCCESS {
		return b.rollback(fmt.Errorf("nvml: apply %s: lock graphics clock at %d MHz: %w%s", m, grMHz, ret, permHint(ret)))
	}
	b.applied = &m
	return nil
}

func permHint(ret gonvml.Return) string {
	switch ret {
	case gonvml.ERROR_NO_PERMISSION:
		return " (run fulcrumd as root)"
	case gonvml.ERROR_NOT_SUPPORTED:
		return " (this GPU does not support locked clocks: Volta or newer is needed for graphics, Ampere or newer for memory)"
	}
	return ""
}

// rollback puts the previous mode back after a failed Apply (or the driver's default
// clocks when Fulcrum had not locked them) and builds the error to return.
func (b *Backend) rollback(applyErr error) error {
	var err error
	if b.applied != nil {
		p := *b.applied
		memMHz, grMHz := uint32(p.EMCHz/1e6), uint32(p.GPUHz/1e6)
		err = retErr("lock graphics clock", b.dev.SetGpuLockedClocks(grMHz, grMHz))
		if b.lockMem {
			err = errors.Join(retErr("lock memory clock", b.dev.SetMemoryLockedClocks(memMHz, memMHz)), err)
		}
		if err == nil {
			return fmt.Errorf("%w; GPU left in mode %s (its previous mode)", applyErr, p)
		}
	} else {
		err = b.resetClocks()
		if err == nil {
			return fmt.Errorf("%w; GPU clocks left to the driver (unlocked, as before)", applyErr)
		}
	}
	b.applied = nil
	return fmt.Errorf("%w; rolling back also failed: %v; reset by hand: nvidia-smi -rgc -rmc", applyErr, err)
}

func retErr(what string, ret gonvml.Return) error {
	if ret == gonvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("%s: %w", what, ret)
}

func (b *Backend) resetClocks() error {
	err := retErr("reset graphics clocks", b.dev.ResetGpuLockedClocks())
	if b.lockMem {
		err = errors.Join(err, retErr("reset memory clocks", b.dev.ResetMemoryLockedClocks()))
	}
	return err
}

// SetPowerLimit sets the GPU's power limit (mW), within the limits NVML reports. Like
// Apply it needs clock control; Restore and Close put the original limit back.
func (b *Backend) SetPowerLimit(ctx context.Context, mw uint32) error {
	if !b.o.ClockControl {
		return fmt.Errorf("nvml: set power limit %d mW: %s", mw, EnableHint)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return err
	}
	lo, hi, ret := b.dev.GetPowerManagementLimitConstraints()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: power limit constraints: %w", ret)
	}
	if mw < lo || mw > hi {
		return fmt.Errorf("nvml: power limit %d mW is outside this GPU's range %d..%d mW", mw, lo, hi)
	}
	if b.orig == nil {
		st, err := b.readState()
		if err != nil {
			return fmt.Errorf("nvml: set power limit: read the GPU's state first: %w (nothing was changed)", err)
		}
		b.orig = st
	}
	if ret := b.dev.SetPowerManagementLimit(mw); ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: set power limit %d mW: %w%s", mw, ret, permHint(ret))
	}
	return nil
}

// Power reads the GPU's power draw (nvmlDeviceGetPowerUsage, mW). It is the GPU board's
// power, not the host's: there is one rail, "gpu".
func (b *Backend) Power(ctx context.Context) (powermode.PowerReading, error) {
	if err := ctx.Err(); err != nil {
		return powermode.PowerReading{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return powermode.PowerReading{}, err
	}
	mw, ret := b.dev.GetPowerUsage()
	if ret != gonvml.SUCCESS {
		return powermode.PowerReading{}, fmt.Errorf("nvml: power usage: %w", ret)
	}
	return powermode.PowerReading{At: b.o.Now(), TotalMW: float64(mw),
		Rails: []powermode.RailPower{{Name: "gpu", PowerMW: float64(mw)}}}, nil
}

// EnergyMJ reads the GPU's energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ
// since the driver loaded). Two readings give the exact mean power between them,
// where Power is a short average.
func (b *Backend) EnergyMJ(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return 0, err
	}
	mj, ret := b.dev.GetTotalEnergyConsumption()
	if ret != gonvml.SUCCESS {
		return 0, fmt.Errorf("nvml: total energy: %w (Volta or newer is needed)", ret)
	}
	return mj, nil
}

// Thermal reads the GPU core temperature as one zone, "gpu".
func (b *Backend) Thermal(ctx context.Context) ([]powermode.ThermalZone, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	z := powermode.ThermalZone{Zone: "gpu"}
	c, ret := b.dev.GetTemperature(gonvml.TEMPERATURE_GPU)
	if ret != gonvml.SUCCESS {
		z.Err = fmt.Sprintf("nvml: temperature: %v", ret)
	} else {
		z.Celsius = float64(c)
	}
	return []powermode.ThermalZone{z}, nil
}

func (b *Backend) readState() (*State, error) {
	st := &State{UUID: b.uuid, ClocksLocked: b.applied != nil}
	mw, ret := b.dev.GetPowerManagementLimit()
	switch ret {
	case gonvml.SUCCESS:
		st.PowerLimitMW = mw
	case gonvml.ERROR_NOT_SUPPORTED:
	default:
		return nil, fmt.Errorf("nvml: power limit: %w", ret)
	}
	return st, nil
}

// Snapshot records the power limit and whether clocks are locked.
func (b *Backend) Snapshot(ctx context.Context) (*powermode.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	st, err := b.readState()
	if err != nil {
		return nil, fmt.Errorf("nvml: snapshot: %w", err)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("nvml: snapshot: %w", err)
	}
	return &powermode.Snapshot{Backend: BackendName, Board: b.info.Name, TakenAt: b.o.Now().UTC(), State: raw}, nil
}

// Restore resets the locked clocks (NVML has no getter for them: the driver default is
// the state after boot) and puts the snapshot's power limit back. It refuses a
// snapshot of another backend or GPU. Without clock control it changes nothing and
// succeeds, since a read-only backend never changed anything.
func (b *Backend) Restore(ctx context.Context, snap *powermode.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if snap == nil {
		return errors.New("nvml: restore: no snapshot given")
	}
	if snap.Backend != BackendName {
		return fmt.Errorf("nvml: restore: snapshot was taken by backend %q, not %q", snap.Backend, BackendName)
	}
	var st State
	if err := json.Unmarshal(snap.State, &st); err != nil {
		return fmt.Errorf("nvml: restore: decode snapshot state: %w", err)
	}
	if st.UUID != b.uuid {
		return fmt.Errorf("nvml: restore: snapshot is of GPU %s, this is %s (select the GPU with nvml.device)", st.UUID, b.uuid)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return err
	}
	return b.restore(&st)
}

func (b *Backend) restore(st *State) error {
	if !b.o.ClockControl {
		return nil
	}
	errs := []error{b.resetClocks()}
	if st.PowerLimitMW > 0 {
		if cur, ret := b.dev.GetPowerManagementLimit(); ret != gonvml.SUCCESS || cur != st.PowerLimitMW {
			errs = append(errs, retErr(fmt.Sprintf("set power limit back to %d mW", st.PowerLimitMW), b.dev.SetPowerManagementLimit(st.PowerLimitMW)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nvml: restore: %w (reset by hand: nvidia-smi -rgc -rmc; nvidia-smi -pl <watts>)", err)
	}
	b.applied = nil
	return nil
}

// Close puts back what this backend changed (locked clocks reset, the power limit found
// before the first change) and shuts NVML down. It is safe to call twice.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var err error
	if b.orig != nil {
		err = b.restore(b.orig)
	}
	if ret := b.lib.Shutdown(); ret != gonvml.SUCCESS {
		err = errors.Join(err, fmt.Errorf("nvml: shutdown: %w", ret))
	}
	return err
}

func (o *Options) fill() {
	if o.LibraryPath == "" {
		o.LibraryPath = DefaultLibrary
	}
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// slug turns a GPU name into a board name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3".
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
