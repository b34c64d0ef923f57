// Package cudatest builds a fake CUDA driver library for tests on machines without a
// GPU: a real shared object, compiled with the C compiler cgo uses, that exports the
// driver API functions package cuda loads, with their calling convention.
package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Source is the fake driver's C source: an Orin-like integrated device (16 SMs, sm_87,
// 64 GiB), a module loader that checks the image is PTX and that the entry asked for is
// in it, and kernels that sleep in proportion to their work (fma_burn: iters/1024 µs,
// triad: n/65536 µs). Built with -DNO_DEVICE, cuInit fails with CUDA_ERROR_NO_DEVICE as
// on a machine whose GPU is missing.
const Source = `
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

// Build compiles C source into libcuda.so.1 in a temp dir and returns its path ($CC or
// gcc; cgo needs one, so CI has it).
func Build(t testing.TB, src string, flags ...string) string {
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
