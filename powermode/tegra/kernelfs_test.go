package tegra

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// kernelFS wraps the real OSFS with the rules a Jetson kernel applies to the files
// Apply writes, so tests see the refusals a board would give:
//   - a cpufreq policy whose CPUs are all offline is inactive: its files answer EBUSY;
//   - a write that would leave min above max is refused with EINVAL (cpufreq on 4.9
//     kernels, devfreq min_freq/max_freq);
//   - a write to cpu0/online offline is refused with EBUSY;
//   - refuse, when set, fails the k-th write (1-based) with the given errno.
//
// Every write is recorded, and after each one check (when set) looks at the tree.
type kernelFS struct {
	OSFS

	mu       sync.Mutex
	writes   []write
	refuseAt int
	refuseBy error
	after    func(w write)
}

type write struct {
	Path, Data string
	Err        error
}

func newKernelFS(root string) *kernelFS {
	return &kernelFS{OSFS: OSFS{Root: root}}
}

func (k *kernelFS) Writes() []write {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]write(nil), k.writes...)
}

func (k *kernelFS) ReadFile(p string) ([]byte, error) {
	if k.inactivePolicy(p) {
		return nil, &os.PathError{Op: "read", Path: p, Err: syscall.EBUSY}
	}
	return k.OSFS.ReadFile(p)
}

func (k *kernelFS) WriteFile(p string, data []byte) error {
	err := k.check(p, data)
	if err == nil {
		err = k.OSFS.WriteFile(p, data)
	}
	k.mu.Lock()
	k.writes = append(k.writes, write{Path: p, Data: string(data), Err: err})
	w := k.writes[len(k.writes)-1]
	after := k.after
	k.mu.Unlock()
	if err == nil && after != nil {
		after(w)
	}
	return err
}

func (k *kernelFS) check(p string, data []byte) error {
	k.mu.Lock()
	n := len(k.writes) + 1
	refuse := k.refuseAt == n
	k.mu.Unlock()
	if refuse {
		return &os.PathError{Op: "write", Path: p, Err: k.refuseBy}
	}
	if k.inactivePolicy(p) {
		return &os.PathError{Op: "write", Path: p, Err: syscall.EBUSY}
	}
	if p == "/sys/devices/system/cpu/cpu0/online" && strings.TrimSpace(string(data)) == "0" {
		return &os.PathError{Op: "write", Path: p, Err: syscall.EBUSY}
	}
	v, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	dir, base := path.Split(p)
	var other string
	switch base {
	case "scaling_min_freq":
		other = dir + "scaling_max_freq"
	case "scaling_max_freq":
		other = dir + "scaling_min_freq"
	case "min_freq":
		other = dir + "max_freq"
	case "max_freq":
		other = dir + "min_freq"
	default:
		return nil
	}
	if perr != nil {
		return &os.PathError{Op: "write", Path: p, Err: syscall.EINVAL}
	}
	ov, err := k.readInt(other)
	if err != nil {
		return err
	}
	if (strings.HasSuffix(base, "min_freq") && v > ov) || (strings.HasSuffix(base, "max_freq") && v < ov) {
		return &os.PathError{Op: "write", Path: p, Err: syscall.EINVAL}
	}
	return nil
}

func (k *kernelFS) readInt(p string) (int64, error) {
	b, err := k.OSFS.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// inactivePolicy reports whether p is a file of a cpufreq policy whose CPUs are all
// offline (other than related_cpus, which the kernel shows regardless).
func (k *kernelFS) inactivePolicy(p string) bool {
	const pre = "/sys/devices/system/cpu/cpufreq/policy"
	if !strings.HasPrefix(p, pre) || strings.HasSuffix(p, "/related_cpus") {
		return false
	}
	dir := path.Dir(p)
	rel, err := k.OSFS.ReadFile(dir + "/related_cpus")
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(rel)) {
		on, err := k.OSFS.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%s/online", f))
		if err != nil || strings.TrimSpace(string(on)) != "0" {
			return false // no online file (cpu0) or online
		}
	}
	return true
}
