//go:build cgo

package nvml

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// fakeNVML is a C library with NVML's calling convention for the three functions
// DLClocks uses: a count query with *count smaller than the table answers
// NVML_ERROR_INSUFFICIENT_SIZE (7) and the size, as the real library does.
const fakeNVML = `
#include <string.h>
static int dev_token = 42;
int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev) {
	if (strcmp(uuid, "GPU-fake") != 0) return 13; /* NVML_ERROR_NOT_FOUND... any error */
	*dev = &dev_token;
	return 0;
}
static const unsigned mem[] = {2619, 1593};
static const unsigned gr_hi[] = {1980, 1965, 1950, 1410, 345};
static const unsigned gr_lo[] = {1410, 345};
static int copy_out(const unsigned *src, unsigned n, unsigned *count, unsigned *out) {
	if (*count < n) { *count = n; return 7; }
	memcpy(out, src, n * sizeof(unsigned));
	*count = n;
	return 0;
}
int nvmlDeviceGetSupportedMemoryClocks(void *dev, unsigned *count, unsigned *out) {
	if (dev != &dev_token) return 2;
	return copy_out(mem, 2, count, out);
}
int nvmlDeviceGetSupportedGraphicsClocks(void *dev, unsigned memMHz, unsigned *count, unsigned *out) {
	if (dev != &dev_token) return 2;
	if (memMHz == 2619) return copy_out(gr_hi, 5, count, out);
	if (memMHz == 1593) return copy_out(gr_lo, 2, count, out);
	return 2; /* NVML_ERROR_INVALID_ARGUMENT */
}
`

// buildLib compiles C source into a shared library in a temp dir. CI has gcc: cgo
// needs it.
func buildLib(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "lib.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "libfake.so")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", so, err, out)
	}
	return so
}

func TestDLClocksSizedQuery(t *testing.T) {
	d := DLClocks{LibraryPath: buildLib(t, fakeNVML)}
	mem, err := d.MemoryClocksMHz("GPU-fake")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mem, []uint32{2619, 1593}) {
		t.Fatalf("memory clocks %v", mem)
	}
	gr, err := d.GraphicsClocksMHz("GPU-fake", 2619)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gr, []uint32{1980, 1965, 1950, 1410, 345}) {
		t.Fatalf("graphics clocks %v: want all five, not go-nvml's single value", gr)
	}
	if _, err := d.GraphicsClocksMHz("GPU-fake", 1000); err == nil || !strings.Contains(err.Error(), "memory 1000 MHz") {
		t.Fatalf("bad memory clock: %v", err)
	}
	if _, err := d.MemoryClocksMHz("GPU-other"); err == nil || !strings.Contains(err.Error(), "nvmlDeviceGetHandleByUUID(GPU-other)") {
		t.Fatalf("unknown uuid: %v", err)
	}
	// The whole backend over the sized lists.
	g := newGPU()
	g.dev.GetUUIDFunc = func() (string, gonvml.Return) { return "GPU-fake", gonvml.SUCCESS }
	b, err := OpenWith(g.lib, d, Options{Logger: quiet(), Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Supported().Size() != 7 || b.Space().Size() != 1 {
		t.Fatalf("%d supported modes, space of %d (read-only); want 7 and 1", b.Supported().Size(), b.Space().Size())
	}
}

func TestDLClocksFailures(t *testing.T) {
	missing := DLClocks{LibraryPath: filepath.Join(t.TempDir(), "libnvidia-ml.so.1")}
	if _, err := missing.MemoryClocksMHz("GPU-x"); err == nil || !strings.Contains(err.Error(), "is the NVIDIA driver installed") {
		t.Fatalf("missing library: %v", err)
	}
	noSyms := DLClocks{LibraryPath: buildLib(t, "int nvmlDeviceGetHandleByUUID(const char *u, void **d) { return 0; }\n")}
	if _, err := noSyms.MemoryClocksMHz("GPU-x"); err == nil || !strings.Contains(err.Error(), "symbol nvmlDeviceGetSupportedMemoryClocks not found") {
		t.Fatalf("missing symbol: %v", err)
	}
}
