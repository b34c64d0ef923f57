//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stddef.h>

// The driver API's types, declared here so no cuda.h is needed.
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

// Trampolines: Go cannot call C function pointers, so each signature gets one.
static CUresult t_u32(void *f, unsigned a) { return ((CUresult (*)(unsigned))f)(a); }
static CUresult t_intp(void *f, int *out) { return ((CUresult (*)(int *))f)(out); }
static CUresult t_dev_get(void *f, CUdevice *dev, int ordinal) { return ((CUresult (*)(CUdevice *, int))f)(dev, ordinal); }
static CUresult t_dev_name(void *f, char *name, int len, CUdevice dev) { return ((CUresult (*)(char *, int, CUdevice))f)(name, len, dev); }
static CUresult t_dev_attr(void *f, int *v, int attr, CUdevice dev) { return ((CUresult (*)(int *, int, CUdevice))f)(v, attr, dev); }
static CUresult t_dev_mem(void *f, size_t *bytes, CUdevice dev) { return ((CUresult (*)(size_t *, CUdevice))f)(bytes, dev); }
static CUresult t_ctx_retain(void *f, void **ctx, CUdevice dev) { return ((CUresult (*)(void **, CUdevice))f)(ctx, dev); }
static CUresult t_dev(void *f, CUdevice dev) { return ((CUresult (*)(CUdevice))f)(dev); }
static CUresult t_ptr(void *f, void *p) { return ((CUresult (*)(void *))f)(p); }
static CUresult t_void(void *f) { return ((CUresult (*)(void))f)(); }
static CUresult t_fn(void *f, void **fn, void *mod, const char *name) { return ((CUresult (*)(void **, void *, const char *))f)(fn, mod, name); }
static CUresult t_alloc(void *f, CUdeviceptr *p, size_t n) { return ((CUresult (*)(CUdeviceptr *, size_t))f)(p, n); }
static CUresult t_free(void *f, CUdeviceptr p) { return ((CUresult (*)(CUdeviceptr))f)(p); }
static CUresult t_memset32(void *f, CUdeviceptr p, unsigned v, size_t n) { return ((CUresult (*)(CUdeviceptr, unsigned, size_t))f)(p, v, n); }
static CUresult t_errstr(void *f, CUresult r, const char **s) { return ((CUresult (*)(CUresult, const char **))f)(r, s); }

// cuModuleLoadDataEx with the JIT error log, so a PTX the driver rejects says why.
static CUresult t_module_load(void *f, void **mod, const void *image, char *log, size_t log_size) {
	int opts[2] = {5, 6}; // CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	void *vals[2] = {log, (void *)log_size};
	return ((CUresult (*)(void **, const void *, unsigned, int *, void **))f)(mod, image, 2, opts, vals);
}

typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
	unsigned, void *, void **, void **);

// The argument arrays are built here, in C memory: cuLaunchKernel takes an array of
// pointers to the arguments, which Go memory may not hold.
static CUresult t_launch_fma(void *f, void *fn, unsigned grid, unsigned block, CUdeviceptr out, unsigned iters) {
	void *args[2] = {&out, &iters};
	return ((launch_fn)f)(fn, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}
static CUresult t_launch_triad(void *f, void *fn, unsigned grid, unsigned block, CUdeviceptr a, CUdeviceptr b,
	CUdeviceptr c, unsigned n, float s) {
	void *args[5] = {&a, &b, &c, &n, &s};
	return ((launch_fn)f)(fn, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}

static void *open_lib(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// symbols are the driver functions used, by their exported (versioned) names.
var symbols = [...]string{
	symInit: "cuInit", symDriverVersion: "cuDriverGetVersion", symDeviceCount: "cuDeviceGetCount",
	symDeviceGet: "cuDeviceGet", symDeviceName: "cuDeviceGetName", symDeviceAttr: "cuDeviceGetAttribute",
	symDeviceMem: "cuDeviceTotalMem_v2", symCtxRetain: "cuDevicePrimaryCtxRetain",
	symCtxRelease: "cuDevicePrimaryCtxRelease_v2", symCtxSetCurrent: "cuCtxSetCurrent",
	symCtxSync: "cuCtxSynchronize", symModuleLoad: "cuModuleLoadDataEx", symModuleUnload: "cuModuleUnload",
	symModuleFunc: "cuModuleGetFunction", symLaunch: "cuLaunchKernel", symMemAlloc: "cuMemAlloc_v2",
	symMemFree: "cuMemFree_v2", symMemset: "cuMemsetD32_v2", symErrName: "cuGetErrorName",
	symErrString: "cuGetErrorString",
}

const (
	symInit = iota
	symDriverVersion
	symDeviceCount
	symDeviceGet
	symDeviceName
	symDeviceAttr
	symDeviceMem
	symCtxRetain
	symCtxRelease
	symCtxSetCurrent
	symCtxSync
	symModuleLoad
	symModuleUnload
	symModuleFunc
	symLaunch
	symMemAlloc
	symMemFree
	symMemset
	symErrName
	symErrString
	numSymbols
)

// CUdevice_attribute values (cuda.h).
const (
	attrClockRate      = 13
	attrMultiprocessor = 16
	attrIntegrated     = 18
	attrComputeMajor   = 75
	attrComputeMinor   = 76
)

// Driver is a loaded CUDA driver library. Its methods are safe for concurrent use.
type Driver struct {
	path string
	mu   sync.Mutex
	h    unsafe.Pointer
	fn   [numSymbols]unsafe.Pointer
	init bool
}

// Load dlopens the driver library and resolves every function this package uses. It
// does not initialise the driver (Init does). A missing library or symbol is a clear
// error naming it.
func Load(o Options) (*Driver, error) {
	path := o.LibraryPath
	if path == "" {
		path = DefaultLibrary
	}
	runtime.LockOSThread() // dlerror is per thread
	defer runtime.UnlockOSThread()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.open_lib(cpath)
	if h == nil {
		return nil, fmt.Errorf("cuda: load %s: %s (no NVIDIA driver on this machine? install it, or on a Jetson install JetPack's nvidia-l4t-cuda)", path, dlerror())
	}
	d := &Driver{path: path, h: h}
	for i, name := range symbols {
		cname := C.CString(name)
		C.dlerror()
		p := C.dlsym(h, cname)
		C.free(unsafe.Pointer(cname))
		if p == nil {
			msg := dlerror()
			C.dlclose(h)
			return nil, fmt.Errorf("cuda: %s has no symbol %s (%s): not a CUDA driver library, or one too old (need CUDA 11+)", path, name, msg)
		}
		d.fn[i] = p
	}
	return d, nil
}

func dlerror() string {
	if e := C.dlerror(); e != nil {
		return C.GoString(e)
	}
	return "unknown dl error"
}

// Path is the library that was loaded.
func (d *Driver) Path() string { return d.path }

// check turns a CUresult into an error naming the call and the driver's own words.
func (d *Driver) check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	name, desc := "", ""
	var s *C.char
	if C.t_errstr(d.fn[symErrName], r, &s) == 0 && s != nil {
		name = C.GoString(s)
	}
	s = nil
	if C.t_errstr(d.fn[symErrString], r, &s) == 0 && s != nil {
		desc = C.GoString(s)
	}
	if name == "" {
		name = fmt.Sprintf("CUresult %d", int(r))
	}
	e := &Error{Call: call, Code: int(r), Name: name, Desc: desc}
	return e
}

// Init initialises the driver (cuInit). Every other call fails until it succeeds.
func (d *Driver) Init() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return fmt.Errorf("cuda: %s was closed", d.path)
	}
	if d.init {
		return nil
	}
	if err := d.check("cuInit", C.t_u32(d.fn[symInit], 0)); err != nil {
		return err
	}
	d.init = true
	return nil
}

func (d *Driver) ready() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return fmt.Errorf("cuda: %s was closed", d.path)
	}
	if !d.init {
		return ErrNotInitialized
	}
	return nil
}

// Version is the driver's CUDA version, e.g. 12040 for 12.4.
func (d *Driver) Version() (int, error) {
	if err := d.ready(); err != nil {
		return 0, err
	}
	var v C.int
	if err := d.check("cuDriverGetVersion", C.t_intp(d.fn[symDriverVersion], &v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount is the number of CUDA devices visible.
func (d *Driver) DeviceCount() (int, error) {
	if err := d.ready(); err != nil {
		return 0, err
	}
	var n C.int
	if err := d.check("cuDeviceGetCount", C.t_intp(d.fn[symDeviceCount], &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device reads device i's properties.
func (d *Driver) Device(i int) (DeviceProps, error) {
	p := DeviceProps{Index: i}
	dev, err := d.device(i)
	if err != nil {
		return p, err
	}
	var name [256]C.char
	if err := d.check("cuDeviceGetName", C.t_dev_name(d.fn[symDeviceName], &name[0], C.int(len(name)), dev)); err != nil {
		return p, err
	}
	p.Name = C.GoString(&name[0])
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrMultiprocessor, &p.SMCount}, {attrComputeMajor, &p.ComputeMajor}, {attrComputeMinor, &p.ComputeMinor}, {attrClockRate, &p.ClockKHz}} {
		var v C.int
		if err := d.check(fmt.Sprintf("cuDeviceGetAttribute(%d)", a.attr), C.t_dev_attr(d.fn[symDeviceAttr], &v, C.int(a.attr), dev)); err != nil {
			return p, err
		}
		*a.dst = int(v)
	}
	var integ C.int
	if err := d.check("cuDeviceGetAttribute(INTEGRATED)", C.t_dev_attr(d.fn[symDeviceAttr], &integ, attrIntegrated, dev)); err != nil {
		return p, err
	}
	p.Integrated = integ != 0
	var mem C.size_t
	if err := d.check("cuDeviceTotalMem", C.t_dev_mem(d.fn[symDeviceMem], &mem, dev)); err != nil {
		return p, err
	}
	p.TotalMemB = uint64(mem)
	return p, nil
}

func (d *Driver) device(i int) (C.CUdevice, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return 0, err
	}
	if i < 0 || i >= n {
		return 0, fmt.Errorf("cuda: device %d does not exist: %d visible (CUDA_VISIBLE_DEVICES renumbers them)", i, n)
	}
	var dev C.CUdevice
	if err := d.check("cuDeviceGet", C.t_dev_get(d.fn[symDeviceGet], &dev, C.int(i))); err != nil {
		return 0, err
	}
	return dev, nil
}

// Close unloads the library. Contexts must be closed first.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return nil
	}
	// The driver is never unloaded once initialised (its threads stay), so only an
	// uninitialised library is dlclosed.
	if !d.init {
		C.dlclose(d.h)
	}
	d.h = nil
	return nil
}

// Context is a device's primary context (the one the CUDA runtime and PyTorch share).
// CUDA contexts are per OS thread; every method locks its goroutine to the thread
// and makes the context current for the call.
type Context struct {
	d     *Driver
	dev   C.CUdevice
	ctx   unsafe.Pointer
	props DeviceProps
	mu    sync.Mutex
}

// NewContext retains device i's primary context.
func (d *Driver) NewContext(i int) (*Context, error) {
	props, err := d.Device(i)
	if err != nil {
		return nil, err
	}
	dev, err := d.device(i)
	if err != nil {
		return nil, err
	}
	c := &Context{d: d, dev: dev, props: props}
	if err := d.check("cuDevicePrimaryCtxRetain", C.t_ctx_retain(d.fn[symCtxRetain], &c.ctx, dev)); err != nil {
		return nil, err
	}
	return c, nil
}

// Props are the context's device properties.
func (c *Context) Props() DeviceProps { return c.props }

// do runs f on a locked OS thread with the context current.
func (c *Context) do(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return fmt.Errorf("cuda: context of device %d is closed", c.props.Index)
	}
	if err := c.d.ready(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.d.check("cuCtxSetCurrent", C.t_ptr(c.d.fn[symCtxSetCurrent], c.ctx)); err != nil {
		return err
	}
	return f()
}

// Synchronize waits for all work queued in the context.
func (c *Context) Synchronize() error {
	return c.do(func() error { return c.d.check("cuCtxSynchronize", C.t_void(c.d.fn[symCtxSync])) })
}

// Close releases the primary context.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return nil
	}
	c.ctx = nil
	return c.d.check("cuDevicePrimaryCtxRelease", C.t_dev(c.d.fn[symCtxRelease], c.dev))
}

// module is a loaded PTX module and its kernel functions.
type module struct {
	mod unsafe.Pointer
	fn  unsafe.Pointer
}

// loadKernel JIT-compiles the embedded PTX and finds k's entry. Call inside do.
func (c *Context) loadKernel(k Kernel) (module, error) {
	var m module
	img := C.CString(PTX) // the image must be NUL-terminated text
	defer C.free(unsafe.Pointer(img))
	const logSize = 4096
	log := (*C.char)(C.calloc(logSize, 1))
	defer C.free(unsafe.Pointer(log))
	if err := c.d.check("cuModuleLoadDataEx", C.t_module_load(c.d.fn[symModuleLoad], &m.mod, unsafe.Pointer(img), log, logSize)); err != nil {
		if s := C.GoString(log); s != "" {
			return m, fmt.Errorf("%w: JIT log: %s", err, s)
		}
		return m, err
	}
	name := C.CString(k.entry())
	defer C.free(unsafe.Pointer(name))
	if err := c.d.check("cuModuleGetFunction("+k.entry()+")", C.t_fn(c.d.fn[symModuleFunc], &m.fn, m.mod, name)); err != nil {
		C.t_ptr(c.d.fn[symModuleUnload], m.mod)
		return m, err
	}
	return m, nil
}

func (c *Context) alloc(bytes uint64) (C.CUdeviceptr, error) {
	var p C.CUdeviceptr
	if err := c.d.check(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), C.t_alloc(c.d.fn[symMemAlloc], &p, C.size_t(bytes))); err != nil {
		return 0, err
	}
	return p, nil
}

func (c *Context) free(p C.CUdeviceptr) error {
	if p == 0 {
		return nil
	}
	return c.d.check("cuMemFree", C.t_free(c.d.fn[symMemFree], p))
}

func (c *Context) memset32(p C.CUdeviceptr, v uint32, n uint64) error {
	return c.d.check("cuMemsetD32", C.t_memset32(c.d.fn[symMemset], p, C.uint(v), C.size_t(n)))
}

func (c *Context) launchFMA(fn unsafe.Pointer, grid, block uint32, out C.CUdeviceptr, iters uint32) error {
	return c.d.check("cuLaunchKernel(fma_burn)", C.t_launch_fma(c.d.fn[symLaunch], fn, C.uint(grid), C.uint(block), out, C.uint(iters)))
}

func (c *Context) launchTriad(fn unsafe.Pointer, grid, block uint32, a, b, cc C.CUdeviceptr, n uint32, s float32) error {
	return c.d.check("cuLaunchKernel(triad)", C.t_launch_triad(c.d.fn[symLaunch], fn, C.uint(grid), C.uint(block), a, b, cc, C.uint(n), C.float(s)))
}

func (c *Context) sync() error {
	return c.d.check("cuCtxSynchronize", C.t_void(c.d.fn[symCtxSync]))
}

func (c *Context) unload(m module) error {
	if m.mod == nil {
		return nil
	}
	return c.d.check("cuModuleUnload", C.t_ptr(c.d.fn[symModuleUnload], m.mod))
}
