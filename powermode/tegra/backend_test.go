package tegra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra/tegratest"
)

// boardNames are tegratest's hand-written layouts, sorted for stable subtests.
func boardNames() []string {
	var names []string
	for n := range tegratest.Boards() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// mode15W puts a board in a MODE_15W-like state: only the first cluster online, the
// EMC locked low, the GPU capped, cluster 0 capped. Offline clusters make their
// policies inactive (EBUSY under kernelFS).
func mode15W(b *tegratest.Board) {
	b.Offline = nil
	for _, cl := range b.Clusters[1:] {
		b.Offline = append(b.Offline, cl...)
	}
}

func writeTree(t *testing.T, b tegratest.Board) string {
	t.Helper()
	dir := t.TempDir()
	if err := tegratest.Write(dir, b); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openTree(t *testing.T, root string, b tegratest.Board, fsys FileSystem) *Backend {
	t.Helper()
	be, err := OpenWith(context.Background(), root, b.Spec(), powermode.BoardInfo{Name: b.Name}, Options{FS: fsys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func digest(t *testing.T, root string) map[string]string {
	t.Helper()
	d, err := tegratest.Digest(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func sameTree(t *testing.T, before map[string]string, root, what string) {
	t.Helper()
	if diff := tegratest.DiffDigests(before, digest(t, root)); len(diff) > 0 {
		t.Errorf("%s: tree changed: %s", what, strings.Join(diff, ", "))
	}
}

func readTrim(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(hostPath(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// testModes is a walk through a board's space that goes down, up, splits a cluster,
// takes whole clusters offline and comes back: every ordering case Apply has.
func testModes(b tegratest.Board) []powermode.Mode {
	return walkModes(b.Cores(), len(b.Clusters[0]), b.CPUFreqsKHz, b.GPUFreqsHz, b.EMCRatesHz)
}

func walkModes(cores, first int, c, g, e []int64) []powermode.Mode {
	return []powermode.Mode{
		{Cores: 1, CPUKHz: c[0], GPUHz: g[0], EMCHz: e[0]},
		{Cores: cores, CPUKHz: c[len(c)-1], GPUHz: g[len(g)-1], EMCHz: e[len(e)-1]},
		{Cores: first + 1, CPUKHz: c[len(c)/2], GPUHz: g[len(g)/2], EMCHz: e[len(e)/2]},
		{Cores: first, CPUKHz: c[len(c)/3], GPUHz: g[1], EMCHz: e[1]},
		{Cores: cores, CPUKHz: c[len(c)-2], GPUHz: g[len(g)-1], EMCHz: e[len(e)-1]},
	}
}

func TestOpenDiscoversLayout(t *testing.T) {
	for _, name := range boardNames() {
		t.Run(name, func(t *testing.T) {
			b := tegratest.Boards()[name]
			be := openTree(t, writeTree(t, b), b, nil)
			if be.Cores() != b.Cores() {
				t.Errorf("cores = %d, want %d", be.Cores(), b.Cores())
			}
			if be.GPUNode() != b.GPUNode {
				t.Errorf("gpu node = %q, want %q", be.GPUNode(), b.GPUNode)
			}
			lv := be.Space().Levels()
			if len(lv.Cores) != b.Cores() || lv.Cores[0] != 1 || lv.Cores[len(lv.Cores)-1] != b.Cores() {
				t.Errorf("core levels = %v, want 1..%d", lv.Cores, b.Cores())
			}
			for _, c := range []struct {
				knob      string
				got, want []int64
			}{{"cpu_khz", lv.CPUKHz, b.CPUFreqsKHz}, {"gpu_hz", lv.GPUHz, b.GPUFreqsHz}, {"emc_hz", lv.EMCHz, b.EMCRatesHz}} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s levels = %v, want %v", c.knob, c.got, c.want)
				}
			}
			want := b.Cores() * len(b.CPUFreqsKHz) * len(b.GPUFreqsHz) * len(b.EMCRatesHz)
			if be.Space().Size() != want {
				t.Errorf("space size = %d, want %d", be.Space().Size(), want)
			}
			m, err := be.Current(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			wantM := powermode.Mode{Cores: b.Cores(), CPUKHz: slices.Max(b.CPUFreqsKHz), GPUHz: slices.Max(b.GPUFreqsHz), EMCHz: slices.Max(b.EMCRatesHz)}
			if m != wantM {
				t.Errorf("Current = %v, want %v", m, wantM)
			}
		})
	}
}

func TestOpenOfflineClusterIsInactive(t *testing.T) {
	// Under MODE_15W the upper clusters are offline and their policies answer EBUSY:
	// Open must still work, Current must count 4 cores, and Apply must be able to
	// bring them back and set them.
	b := tegratest.AGXOrin64GBJP6()
	mode15W(&b)
	root := writeTree(t, b)
	kfs := newKernelFS(root)
	be := openTree(t, root, b, kfs)
	m, err := be.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.Cores != 4 {
		t.Errorf("Current cores = %d, want 4", m.Cores)
	}
	if got := be.Space().Levels().CPUKHz; !slices.Equal(got, b.CPUFreqsKHz) {
		t.Errorf("cpu levels = %v", got)
	}
	target := powermode.Mode{Cores: 12, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	if err := be.Apply(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	if got, _ := be.Current(context.Background()); got != target {
		t.Errorf("Current after Apply = %v, want %v", got, target)
	}
	if got := readTrim(t, root, "/sys/devices/system/cpu/cpufreq/policy8/scaling_min_freq"); got != "1728000" {
		t.Errorf("policy8 min = %s, want 1728000", got)
	}
}

func TestApplyOrderingUnderKernelRules(t *testing.T) {
	for _, name := range boardNames() {
		for _, start := range []string{"all-online", "mode15w"} {
			t.Run(name+"/"+start, func(t *testing.T) {
				b := tegratest.Boards()[name]
				if start == "mode15w" {
					mode15W(&b)
				}
				root := writeTree(t, b)
				kfs := newKernelFS(root)
				be := openTree(t, root, b, kfs)
				// After every accepted write: each active cluster and the GPU have min <= max.
				kfs.after = func(w write) {
					pairs := [][2]string{{be.gpu.file("min_freq"), be.gpu.file("max_freq")}}
					for _, p := range be.policies {
						if !kfs.inactivePolicy(p.file("scaling_min_freq")) {
							pairs = append(pairs, [2]string{p.file("scaling_min_freq"), p.file("scaling_max_freq")})
						}
					}
					for _, pr := range pairs {
						lo, _ := kfs.readInt(pr[0])
						hi, _ := kfs.readInt(pr[1])
						if lo > hi {
							t.Errorf("after writing %s=%s: %s=%d > %s=%d", w.Path, strings.TrimSpace(w.Data), pr[0], lo, pr[1], hi)
						}
					}
				}
				for _, m := range testModes(b) {
					n0 := len(kfs.Writes())
					if err := be.Apply(context.Background(), m); err != nil {
						t.Fatalf("Apply %v: %v", m, err)
					}
					ws := kfs.Writes()[n0:]
					checkWriteOrder(t, m, ws)
					got, err := be.Current(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					if got != m {
						t.Errorf("Current after Apply = %v, want %v", got, m)
					}
					checkPinned(t, root, be, m)
				}
			})
		}
	}
}

// checkWriteOrder asserts the order Apply documents: hotplug writes first (online
// ascending, then offline descending), then CPU frequencies, then GPU, then EMC lock
// before rate.
func checkWriteOrder(t *testing.T, m powermode.Mode, ws []write) {
	t.Helper()
	phase := func(p string) int {
		switch {
		case strings.HasSuffix(p, "/online"):
			return 0
		case strings.Contains(p, "/cpufreq/"):
			return 1
		case strings.Contains(p, "/devfreq/"):
			return 2
		case strings.HasSuffix(p, "mrq_rate_locked"):
			return 3
		case strings.HasSuffix(p, "/rate"):
			return 4
		}
		t.Errorf("unexpected write to %s", p)
		return -1
	}
	last, lastOn, lastOff := -1, -1, 1<<30
	for _, w := range ws {
		if w.Err != nil {
			t.Errorf("mode %v: write %s refused: %v", m, w.Path, w.Err)
		}
		ph := phase(w.Path)
		if ph < last {
			t.Errorf("mode %v: write to %s (phase %d) after phase %d", m, w.Path, ph, last)
		}
		last = ph
		if ph == 0 {
			cpu, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(w.Path)), "cpu"))
			if strings.TrimSpace(w.Data) == "1" {
				if cpu < lastOn || lastOff != 1<<30 {
					t.Errorf("mode %v: online cpu%d out of order", m, cpu)
				}
				lastOn = cpu
			} else {
				if cpu > lastOff {
					t.Errorf("mode %v: offline cpu%d after a lower cpu", m, cpu)
				}
				lastOff = cpu
			}
		}
	}
}

func checkPinned(t *testing.T, root string, be *Backend, m powermode.Mode) {
	t.Helper()
	want := map[string]string{
		be.gpu.file("min_freq"):               strconv.FormatInt(m.GPUHz, 10),
		be.gpu.file("max_freq"):               strconv.FormatInt(m.GPUHz, 10),
		emcFile("mrq_rate_locked"):            "1",
		emcFile("rate"):                       strconv.FormatInt(m.EMCHz, 10),
		be.gpu.file("cur_freq"):               readTrim(t, root, be.gpu.file("cur_freq")), // never written
		"/sys/devices/system/cpu/cpu1/online": map[bool]string{true: "1", false: "0"}[m.Cores > 1],
	}
	for i, c := range be.cpus {
		if c.Online != "" {
			want[c.Online] = map[bool]string{true: "1", false: "0"}[i < m.Cores]
		}
	}
	for _, p := range be.policies {
		if p.CPUs[0] < m.Cores {
			want[p.file("scaling_min_freq")] = strconv.FormatInt(m.CPUKHz, 10)
			want[p.file("scaling_max_freq")] = strconv.FormatInt(m.CPUKHz, 10)
		}
	}
	for p, v := range want {
		if got := readTrim(t, root, p); got != v {
			t.Errorf("mode %v: %s = %s, want %s", m, p, got, v)
		}
	}
}

func TestApplyRejectsModeOutsideSpaceAndWritesNothing(t *testing.T) {
	b := tegratest.AGXOrin64GBJP5()
	root := writeTree(t, b)
	kfs := newKernelFS(root)
	be := openTree(t, root, b, kfs)
	for _, c := range []struct {
		m    powermode.Mode
		want string
	}{
		{powermode.Mode{Cores: 8, CPUKHz: 1700000, GPUHz: 612000000, EMCHz: 3199000000}, "cpu_khz 1700000 is not a level of this board (nearest: 1651200 or 1728000)"},
		{powermode.Mode{Cores: 13, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}, "cores 13 is not a level of this board (nearest: 12)"},
		{powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 600000000, EMCHz: 3199000000}, "gpu_hz 600000000"},
		{powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3200000000}, "emc_hz 3200000000 is not a level of this board (nearest: 3199000000)"},
	} {
		err := be.Apply(context.Background(), c.m)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Apply %v: err = %v, want it to contain %q", c.m, err, c.want)
		}
	}
	if ws := kfs.Writes(); len(ws) != 0 {
		t.Errorf("rejected modes wrote %d files: %v", len(ws), ws)
	}
}

func TestApplyRollsBackRefusedWrite(t *testing.T) {
	errnos := []syscall.Errno{syscall.EINVAL, syscall.EPERM}
	for _, name := range boardNames() {
		for _, start := range []string{"all-online", "mode15w"} {
			if start == "mode15w" && name != "agx-orin-64gb-jp6" && name != "agx-xavier" {
				continue // keeps the test quick; these two have 3 and 4 clusters
			}
			b := tegratest.Boards()[name]
			if start == "mode15w" {
				mode15W(&b)
			}
			target := testModes(b)[2] // splits a cluster, changes every knob
			// Count the writes a clean Apply makes from this start.
			dry := writeTree(t, b)
			dfs := newKernelFS(dry)
			if err := openTree(t, dry, b, dfs).Apply(context.Background(), target); err != nil {
				t.Fatalf("%s/%s: clean Apply: %v", name, start, err)
			}
			clean := dfs.Writes()
			if len(clean) < 6 {
				t.Fatalf("%s/%s: only %d writes; the test needs a bigger change", name, start, len(clean))
			}
			// One tree for every k: each rollback must leave it exactly as it was, so the
			// next refusal starts from the same state.
			t.Run(name+"/"+start, func(t *testing.T) {
				root := writeTree(t, b)
				kfs := newKernelFS(root)
				be := openTree(t, root, b, kfs)
				before := digest(t, root)
				prevMode, _ := be.Current(context.Background())
				for k := 1; k <= len(clean); k++ {
					errno := errnos[k%2]
					n0 := len(kfs.Writes())
					kfs.refuseAt, kfs.refuseBy = n0+k, errno
					err := be.Apply(context.Background(), target)
					kfs.refuseAt = 0
					if err == nil {
						t.Fatalf("refusing write %d: Apply succeeded", k)
					}
					refused := clean[k-1].Path
					for _, want := range []string{"write " + refused + ": " + errno.Error(), "board left in mode " + prevMode.String()} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("refusing write %d: error %q does not contain %q", k, err, want)
						}
					}
					sameTree(t, before, root, fmt.Sprintf("refusing write %d (%s)", k, refused))
				}
			})
		}
	}
}

// clampFS accepts a write to one file but stores another value, as a kernel does
// when a cap (nvpmodel, thermal) clamps the request.
type clampFS struct {
	OSFS
	path, stored string
	done         bool
}

func (c *clampFS) WriteFile(p string, data []byte) error {
	if p == c.path && !c.done {
		data, c.done = []byte(c.stored), true // once: the rollback's write goes through
	}
	return c.OSFS.WriteFile(p, data)
}

func TestApplyReadBackMismatchRollsBack(t *testing.T) {
	b := tegratest.AGXOrin64GBJP6()
	root := writeTree(t, b)
	be0 := openTree(t, root, b, nil)
	maxPath := be0.gpu.file("max_freq")
	be := openTree(t, root, b, &clampFS{OSFS: OSFS{Root: root}, path: maxPath, stored: "306000000\n"})
	before := digest(t, root)
	// Going down from 1300.5 MHz, min is written first, then max is clamped.
	err := be.Apply(context.Background(), powermode.Mode{Cores: 12, CPUKHz: 2201600, GPUHz: 612000000, EMCHz: 3199000000})
	if err == nil || !strings.Contains(err.Error(), "read back "+maxPath+": wrote \"612000000\", it reads \"306000000\"") {
		t.Fatalf("err = %v, want a read-back mismatch on %s", err, maxPath)
	}
	sameTree(t, before, root, "after read-back rollback")
}

func TestApplyRefusedByFileModeRollsBack(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root, which ignores file modes; TestApplyRollsBackRefusedWrite refuses through the FileSystem seam instead")
	}
	b := tegratest.AGXOrin64GBJP5()
	root := writeTree(t, b)
	be := openTree(t, root, b, nil)
	ro := be.gpu.file("max_freq")
	if err := os.Chmod(hostPath(root, ro), 0o444); err != nil {
		t.Fatal(err)
	}
	before := digest(t, root)
	err := be.Apply(context.Background(), powermode.Mode{Cores: 6, CPUKHz: 1113600, GPUHz: 408000000, EMCHz: 2133000000})
	if err == nil || !strings.Contains(err.Error(), "write "+ro+": permission denied") {
		t.Fatalf("err = %v, want permission denied on %s", err, ro)
	}
	sameTree(t, before, root, "after rollback")
}

func TestApplyCancelledContextRollsBack(t *testing.T) {
	b := tegratest.OrinNano8GB()
	root := writeTree(t, b)
	kfs := newKernelFS(root)
	be := openTree(t, root, b, kfs)
	before := digest(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	kfs.after = func(write) { cancel() } // cancelled after the first write
	err := be.Apply(ctx, powermode.Mode{Cores: 2, CPUKHz: 729600, GPUHz: 408000000, EMCHz: 665600000})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	kfs.after = nil
	sameTree(t, before, root, "after cancelled Apply")
}

func TestSnapshotRestoreIsByteIdentical(t *testing.T) {
	for _, name := range boardNames() {
		for _, start := range []string{"all-online", "mode15w"} {
			t.Run(name+"/"+start, func(t *testing.T) {
				b := tegratest.Boards()[name]
				if start == "mode15w" {
					mode15W(&b)
				}
				root := writeTree(t, b)
				kfs := newKernelFS(root)
				be := openTree(t, root, b, kfs)
				// A different starting state than the writer's defaults: a userspace governor
				// and a locked EMC, so Restore has more than limits to put back.
				for p, v := range map[string]string{
					"/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "userspace\n",
					be.gpu.file("governor"):    "performance\n",
					emcFile("mrq_rate_locked"): "1\n",
					emcFile("rate"):            strconv.FormatInt(b.EMCRatesHz[1], 10) + "\n",
				} {
					if err := os.WriteFile(hostPath(root, p), []byte(v), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				before := digest(t, root)
				snap, err := be.Snapshot(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				stateDir := t.TempDir()
				if err := powermode.SaveSnapshot(stateDir, snap); err != nil {
					t.Fatal(err)
				}
				for _, m := range testModes(b) {
					if err := be.Apply(context.Background(), m); err != nil {
						t.Fatalf("Apply %v: %v", m, err)
					}
				}
				loaded, err := powermode.LoadSnapshot(stateDir)
				if err != nil {
					t.Fatal(err)
				}
				n0 := len(kfs.Writes())
				if err := be.Restore(context.Background(), loaded); err != nil {
					t.Fatal(err)
				}
				for _, w := range kfs.Writes()[n0:] {
					if w.Err != nil {
						t.Errorf("restore write %s refused: %v", w.Path, w.Err)
					}
				}
				sameTree(t, before, root, "after Apply then Restore")
				// Restoring again changes nothing; the only writes are the brief onlining
				// of clusters that were offline in the snapshot (to reopen their hidden
				// limits) and taking them offline again.
				n1 := len(kfs.Writes())
				if err := be.Restore(context.Background(), loaded); err != nil {
					t.Fatal(err)
				}
				for _, w := range kfs.Writes()[n1:] {
					if !strings.HasSuffix(w.Path, "/online") {
						t.Errorf("second Restore wrote %s", w.Path)
					}
				}
				sameTree(t, before, root, "after a second Restore")
			})
		}
	}
}

func TestRestoreRefusesForeignSnapshot(t *testing.T) {
	b := tegratest.AGXOrin64GBJP5()
	root := writeTree(t, b)
	be := openTree(t, root, b, nil)
	snap, err := be.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	other := *snap
	other.Board = "orin-nano-8gb"
	if err := be.Restore(context.Background(), &other); err == nil || !strings.Contains(err.Error(), "orin-nano-8gb") {
		t.Errorf("foreign board: err = %v", err)
	}
	other = *snap
	other.Backend = "nvml"
	if err := be.Restore(context.Background(), &other); err == nil || !strings.Contains(err.Error(), "nvml") {
		t.Errorf("foreign backend: err = %v", err)
	}
	// A state that names a file outside the board's control files is refused whole.
	other = *snap
	other.State = []byte(strings.Replace(string(snap.State), "/sys/kernel/debug/bpmp/debug/clk/emc/rate", "/etc/passwd", 1))
	before := digest(t, root)
	if err := be.Restore(context.Background(), &other); err == nil || !strings.Contains(err.Error(), "/etc/passwd") {
		t.Errorf("tampered state: err = %v", err)
	}
	sameTree(t, before, root, "after refused restore")
}

// pinHidden sets a policy's limits in the tree directly, as if a cluster had been
// pinned and then taken offline: the kernel keeps those limits, unreadable.
func pinHidden(t *testing.T, root string, policy int, khz string) {
	t.Helper()
	for _, f := range []string{"scaling_min_freq", "scaling_max_freq"} {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpufreq/policy%d/%s", policy, f)
		if err := os.WriteFile(hostPath(root, p), []byte(khz+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRollbackLeavesHiddenClusterLimitsAlone(t *testing.T) {
	// MODE_15W with clusters 1 and 2 offline, their policies holding pinned limits
	// nobody can read. An Apply to 12 cores that fails right after onlining cpu4 must
	// not touch policy4's or policy8's hidden limits.
	b := tegratest.AGXOrin64GBJP6()
	mode15W(&b)
	root := writeTree(t, b)
	pinHidden(t, root, 4, "1113600")
	pinHidden(t, root, 8, "729600")
	kfs := newKernelFS(root)
	be := openTree(t, root, b, kfs)
	before := digest(t, root)
	for k := 1; k <= 12; k++ { // every hotplug write, and the first frequency writes
		n0 := len(kfs.Writes())
		kfs.refuseAt, kfs.refuseBy = n0+k, syscall.EINVAL
		err := be.Apply(context.Background(), powermode.Mode{Cores: 12, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000})
		kfs.refuseAt = 0
		if err == nil || !strings.Contains(err.Error(), "invalid argument") {
			t.Fatalf("refusing write %d: err = %v", k, err)
		}
		sameTree(t, before, root, fmt.Sprintf("refusing write %d", k))
	}
}

func TestRestoreReopensClustersOfflineInSnapshot(t *testing.T) {
	// The snapshot cannot read an offline cluster's limits; Restore gives such a cluster
	// its hardware range (documented) rather than leaving Fulcrum's pins hidden in it.
	b := tegratest.AGXOrin64GBJP6()
	mode15W(&b)
	root := writeTree(t, b)
	pinHidden(t, root, 8, "729600")
	kfs := newKernelFS(root)
	be := openTree(t, root, b, kfs)
	snap, err := be.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Apply(context.Background(), powermode.Mode{Cores: 12, CPUKHz: 1497600, GPUHz: 816000000, EMCHz: 3199000000}); err != nil {
		t.Fatal(err)
	}
	if err := be.Restore(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"/sys/devices/system/cpu/cpufreq/policy4/scaling_min_freq": "115200",
		"/sys/devices/system/cpu/cpufreq/policy4/scaling_max_freq": "2201600",
		"/sys/devices/system/cpu/cpufreq/policy8/scaling_min_freq": "115200",
		"/sys/devices/system/cpu/cpufreq/policy8/scaling_max_freq": "2201600",
		"/sys/devices/system/cpu/cpu4/online":                      "0",
		"/sys/devices/system/cpu/cpu8/online":                      "0",
	} {
		if got := readTrim(t, root, p); got != want {
			t.Errorf("%s = %s, want %s", p, got, want)
		}
	}
}

// BenchmarkApply alternates an AGX Orin tree between two modes that differ in every
// knob (hotplug of a cluster, CPU, GPU, EMC): the cost of the writes and read-backs.
func BenchmarkApply(b *testing.B) {
	tb := tegratest.AGXOrin64GBJP6()
	dir := b.TempDir()
	if err := tegratest.Write(dir, tb); err != nil {
		b.Fatal(err)
	}
	be, err := OpenWith(context.Background(), dir, tb.Spec(), powermode.BoardInfo{}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	modes := []powermode.Mode{
		{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000},
		{Cores: 12, CPUKHz: 1113600, GPUHz: 816000000, EMCHz: 2133000000},
	}
	for i := 0; b.Loop(); i++ {
		if err := be.Apply(context.Background(), modes[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
