//go:build cgo

package nvml

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// Trampolines: Go cannot call a C function pointer directly.
typedef int (*handle_by_uuid_fn)(const char *uuid, void **device);
typedef int (*mem_clocks_fn)(void *device, unsigned int *count, unsigned int *clocks_mhz);
typedef int (*gr_clocks_fn)(void *device, unsigned int mem_mhz, unsigned int *count, unsigned int *clocks_mhz);

static int call_handle_by_uuid(void *f, const char *uuid, void **device) {
	return ((handle_by_uuid_fn)f)(uuid, device);
}
static int call_mem_clocks(void *f, void *device, unsigned int *count, unsigned int *clocks_mhz) {
	return ((mem_clocks_fn)f)(device, count, clocks_mhz);
}
static int call_gr_clocks(void *f, void *device, unsigned int mem_mhz, unsigned int *count, unsigned int *clocks_mhz) {
	return ((gr_clocks_fn)f)(device, mem_mhz, count, clocks_mhz);
}
static void *open_lib(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ClockLister lists a GPU's supported clocks. go-nvml v0.13.3-0's
// DeviceGetSupportedMemoryClocks/GraphicsClocks pass a one-element buffer and so return
// only the count and at most one clock; the backend uses a ClockLister instead.
type ClockLister interface {
	// MemoryClocksMHz lists the memory clocks of the GPU with this UUID.
	MemoryClocksMHz(uuid string) ([]uint32, error)
	// GraphicsClocksMHz lists the graphics clocks allowed with memory clock memMHz.
	GraphicsClocksMHz(uuid string, memMHz uint32) ([]uint32, error)
}

// DLClocks is the real ClockLister: it looks up nvmlDeviceGetHandleByUUID and
// nvmlDeviceGetSupported{Memory,Graphics}Clocks in the NVML library with dlsym and
// calls them the way the C API intends: a count query (count 0), then a buffer of that
// size. Use it only after NVML's Init succeeded (the handles are NVML's).
type DLClocks struct {
	// LibraryPath is the NVML library (default DefaultLibrary); dlopen of the library
	// go-nvml already loaded returns the same instance.
	LibraryPath string
}

// nvmlInsufficientSize is NVML_ERROR_INSUFFICIENT_SIZE.
const nvmlInsufficientSize = int(gonvml.ERROR_INSUFFICIENT_SIZE)

// MemoryClocksMHz implements ClockLister.
func (d DLClocks) MemoryClocksMHz(uuid string) ([]uint32, error) {
	var out []uint32
	err := d.withDevice(uuid, "nvmlDeviceGetSupportedMemoryClocks", func(fn, dev unsafe.Pointer) error {
		var err error
		out, err = sizedQuery("nvmlDeviceGetSupportedMemoryClocks", func(count *C.uint, buf *C.uint) int {
			return int(C.call_mem_clocks(fn, dev, count, buf))
		})
		return err
	})
	return out, err
}

// GraphicsClocksMHz implements ClockLister.
func (d DLClocks) GraphicsClocksMHz(uuid string, memMHz uint32) ([]uint32, error) {
	var out []uint32
	err := d.withDevice(uuid, "nvmlDeviceGetSupportedGraphicsClocks", func(fn, dev unsafe.Pointer) error {
		var err error
		out, err = sizedQuery(fmt.Sprintf("nvmlDeviceGetSupportedGraphicsClocks(memory %d MHz)", memMHz), func(count *C.uint, buf *C.uint) int {
			return int(C.call_gr_clocks(fn, dev, C.uint(memMHz), count, buf))
		})
		return err
	})
	return out, err
}

// withDevice opens the library, resolves the device handle for uuid and the symbol
// sym, and runs f with both; the OS thread stays locked so dlerror reads our error.
func (d DLClocks) withDevice(uuid, sym string, f func(fn, dev unsafe.Pointer) error) error {
	path := d.LibraryPath
	if path == "" {
		path = DefaultLibrary
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.open_lib(cpath)
	if h == nil {
		return fmt.Errorf("nvml: supported clocks: dlopen %s: %s (is the NVIDIA driver installed?)", path, dlerror())
	}
	defer C.dlclose(h)
	lookup := func(name string) (unsafe.Pointer, error) {
		cname := C.CString(name)
		defer C.free(unsafe.Pointer(cname))
		C.dlerror()
		p := C.dlsym(h, cname)
		if p == nil {
			return nil, fmt.Errorf("nvml: supported clocks: symbol %s not found in %s: %s (driver too old?)", name, path, dlerror())
		}
		return p, nil
	}
	byUUID, err := lookup("nvmlDeviceGetHandleByUUID")
	if err != nil {
		return err
	}
	fn, err := lookup(symbolName(sym))
	if err != nil {
		return err
	}
	cuuid := C.CString(uuid)
	defer C.free(unsafe.Pointer(cuuid))
	var dev unsafe.Pointer
	if ret := int(C.call_handle_by_uuid(byUUID, cuuid, &dev)); ret != 0 {
		return fmt.Errorf("nvml: supported clocks: nvmlDeviceGetHandleByUUID(%s): %w", uuid, gonvml.Return(ret))
	}
	return f(fn, dev)
}

// symbolName strips a call description down to the C symbol.
func symbolName(s string) string {
	for i, r := range s {
		if r == '(' {
			return s[:i]
		}
	}
	return s
}

func dlerror() string {
	if e := C.dlerror(); e != nil {
		return C.GoString(e)
	}
	return "unknown dl error"
}

// sizedQuery runs an NVML "count then buffer" call: first with count 0, which answers
// NVML_ERROR_INSUFFICIENT_SIZE and the count needed, then with a buffer of that size
// (again if the table grew in between).
func sizedQuery(what string, call func(count *C.uint, buf *C.uint) int) ([]uint32, error) {
	var count, probe C.uint
	ret := call(&count, &probe)
	for range 3 {
		if ret == 0 && count == 0 {
			return nil, nil // nothing supported
		}
		if ret != nvmlInsufficientSize {
			if ret == 0 {
				return nil, fmt.Errorf("nvml: %s: count query succeeded with %d clocks and no buffer", what, count)
			}
			return nil, fmt.Errorf("nvml: %s: %w", what, gonvml.Return(ret))
		}
		n := int(count)
		if n <= 0 {
			return nil, fmt.Errorf("nvml: %s: insufficient size but a count of %d", what, n)
		}
		// C memory: NVML writes into it and Go's collector must not move it.
		buf := (*C.uint)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.uint(0)))))
		if buf == nil {
			return nil, errors.New("nvml: out of memory")
		}
		count = C.uint(n)
		ret = call(&count, buf)
		if ret == 0 {
			out := append([]uint32(nil), unsafe.Slice((*uint32)(unsafe.Pointer(buf)), min(int(count), n))...)
			C.free(unsafe.Pointer(buf))
			return out, nil
		}
		C.free(unsafe.Pointer(buf))
	}
	return nil, fmt.Errorf("nvml: %s: the clock table kept growing; try again", what)
}
