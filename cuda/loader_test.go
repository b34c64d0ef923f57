//go:build cgo

package cuda

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeDriver is a C library with the driver API's symbols and calling convention: an
// Orin-like integrated device, a module loader that checks the image is PTX and that
// the entry asked for is in it, and kernels that sleep in proportion to their work.
// -DNO_DEVICE makes cuInit fail as on a machine whose GPU is missing.
const fakeDriver = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef int CUresult;
static int inited, ctx_token, mod_token, fn_fma, fn_triad;
static char *image;
static unsigned long long next_ptr = 0x10000;
CUresult cuInit(unsigned flags) {
#ifdef NO_DEVICE
	return 100;
#else
	inited = 1;
	return 0;
#endif
}
CUresult cuDriverGetVersion(int *v) { *v = 12060; return 0; }
CUresult cuDeviceGetCount(int *n) { if (!inited) return 3; *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int i) { if (i != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char *name, int len, int d) { snprintf(name, len, "Orin (nvgpu)"); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
	switch (attr) {
	case 13: *v = 1300500; return 0;
	case 16: *v = 16; return 0;
	case 18: *v = 1; return 0;
	case 75: *v = 8; return 0;
	case 76: *v = 7; return 0;
	}
	return 1;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { *b = (size_t)64 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = &ctx_token; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
CUresult cuCtxSetCurrent(void *c) { return c == &ctx_token ? 0 : 201; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *opts, void **vals) {
	if (!strstr((const char *)img, ".version") || !strstr((const char *)img, ".target")) {
		if (n >= 1 && opts[0] == 5) strcpy((char *)vals[0], "not PTX");
		return 218;
	}
	free(image);
	image = strdup((const char *)img);
	*m = &mod_token;
	return 0;
}
CUresult cuModuleUnload(void *m) { return m == &mod_token ? 0 : 400; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	char pat[128];
	snprintf(pat, sizeof pat, ".entry %s(", name);
	if (m != &mod_token || !image || !strstr(image, pat)) return 500;
	*f = strcmp(name, "fma_burn") == 0 ? (void *)&fn_fma : (void *)&fn_triad;
	return 0;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shm, void *stream, void **params, void **extra) {
	if (gx == 0 || bx == 0 || extra != NULL) return 1;
	if (f == &fn_fma) { usleep(*(unsigned *)params[1] / 1024 + 1); return 0; }
	if (f == &fn_triad) { usleep(*(unsigned *)params[3] / 65536 + 1); return 0; }
	return 400;
}
CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) { *p = next_ptr; next_ptr += n; return 0; }
CUresult cuMemFree_v2(unsigned long long p) { return p ? 0 : 1; }
CUresult cuMemsetD32_v2(unsigned long long p, unsigned v, size_t n) { return p ? 0 : 1; }
static const char *name_of(CUresult r) {
	switch (r) {
	case 3: return "CUDA_ERROR_NOT_INITIALIZED";
	case 100: return "CUDA_ERROR_NO_DEVICE";
	case 218: return "CUDA_ERROR_INVALID_PTX";
	case 500: return "CUDA_ERROR_NOT_FOUND";
	}
	return 0;
}
CUresult cuGetErrorName(CUresult r, const char **s) { *s = name_of(r); return *s ? 0 : 1; }
CUresult cuGetErrorString(CUresult r, const char **s) { *s = r == 100 ? "no CUDA-capable device is detected" : 0; return *s ? 0 : 1; }
`

func buildLib(t *testing.T, src string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "libcuda.so.1")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	args := append([]string{"-shared", "-fPIC", "-o", so, c}, flags...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", so, err, out)
	}
	return so
}

func TestLoadMissingLibrary(t *testing.T) {
	p := filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err := Load(Options{LibraryPath: p})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "no NVIDIA driver") {
		t.Fatalf("missing library: %v", err)
	}
}

func TestLoadNotCUDA(t *testing.T) {
	// libc loads fine and has none of the driver's symbols.
	_, err := Load(Options{LibraryPath: "libc.so.6"})
	if err == nil || !strings.Contains(err.Error(), "has no symbol cuInit") {
		t.Fatalf("libc as libcuda: %v", err)
	}
	// A library with the first symbols only: the error names the first one missing.
	partial := buildLib(t, "int cuInit(unsigned f) { return 0; }\nint cuDriverGetVersion(int *v) { *v = 1; return 0; }\n")
	_, err = Load(Options{LibraryPath: partial})
	if err == nil || !strings.Contains(err.Error(), "has no symbol cuDeviceGetCount") {
		t.Fatalf("partial library: %v", err)
	}
}

func TestCallsBeforeInit(t *testing.T) {
	d, err := Load(Options{LibraryPath: buildLib(t, fakeDriver)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err1 := d.Version()
	_, err2 := d.DeviceCount()
	_, err3 := d.Device(0)
	_, err4 := d.NewContext(0)
	for i, err := range []error{err1, err2, err3, err4} {
		if !errors.Is(err, ErrNotInitialized) {
			t.Errorf("call %d before Init: %v", i+1, err)
		}
	}
}

func TestInitNoDevice(t *testing.T) {
	d, err := Load(Options{LibraryPath: buildLib(t, fakeDriver, "-DNO_DEVICE")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	err = d.Init()
	var ce *Error
	if !errors.As(err, &ce) || ce.Name != "CUDA_ERROR_NO_DEVICE" || !strings.Contains(err.Error(), "nvidia-smi") {
		t.Fatalf("init without a device: %v", err)
	}
	if _, err := d.DeviceCount(); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("after a failed Init: %v", err)
	}
}

func TestDeviceProps(t *testing.T) {
	d, err := Load(Options{LibraryPath: buildLib(t, fakeDriver)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Version(); err != nil || v != 12060 {
		t.Fatalf("version %d %v", v, err)
	}
	p, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	want := DeviceProps{Index: 0, Name: "Orin (nvgpu)", SMCount: 16, ComputeMajor: 8, ComputeMinor: 7, TotalMemB: 64 << 30, Integrated: true, ClockKHz: 1300500}
	if p != want || p.SM() != "sm_87" {
		t.Fatalf("props %+v, want %+v", p, want)
	}
	if _, err := d.Device(1); err == nil || !strings.Contains(err.Error(), "1 visible") {
		t.Fatalf("device 1: %v", err)
	}
}

func TestBurnerOnFakeDriver(t *testing.T) {
	d, err := Load(Options{LibraryPath: buildLib(t, fakeDriver)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	c, err := d.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []Kernel{Compute, Memory} {
		b, err := c.NewBurner(ctx, k, BurnerOptions{})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if b.UnitMS() <= 0 || b.Kernel() != k {
			t.Fatalf("%s: unit %v ms", k, b.UnitMS())
		}
		if n := b.Units(time.Duration(10 * b.UnitMS() * float64(time.Millisecond))); n != 10 {
			t.Fatalf("%s: %d units for ten unit times", k, n)
		}
		if n := b.Units(0); n != 1 {
			t.Fatalf("%s: %d units for 0", k, n)
		}
		took, err := b.Run(ctx, 3*time.Millisecond)
		if err != nil || took <= 0 {
			t.Fatalf("%s: run %v %v", k, took, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.Run(cctx, time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: cancelled run: %v", k, err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("%s: close: %v", k, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err == nil {
		t.Fatal("Synchronize on a closed context succeeded")
	}
	if _, err := c.NewBurner(ctx, Compute, BurnerOptions{}); err == nil {
		t.Fatal("NewBurner on a closed context succeeded")
	}
}
