package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// repeatReader gives n bytes of b repeated, without holding them.
type repeatReader struct {
	b byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}

// A body with one huge field is refused after about a record's bytes: the import
// allocates a small fraction of the body (before: 8 to 14 times it) and stores nothing.
func TestImportHugeFieldRefusedEarly(t *testing.T) {
	const huge = 20 << 20
	header := "workload,role,cores,cpu_khz,gpu_hz,emc_hz,batch,time_ms,power_mw,board\n"
	row := "w,infer,8,1728000,612000000,3199000000,1,10,20000,agx-orin-64gb\n"
	for _, tc := range []struct {
		name   string
		format Format
		body   func() io.Reader
	}{
		{"csv header line", CSV, func() io.Reader {
			return io.MultiReader(strings.NewReader("workload,role"), &repeatReader{'x', huge}, strings.NewReader("\n"+row))
		}},
		{"csv quoted field over many lines", CSV, func() io.Reader {
			return io.MultiReader(strings.NewReader(header+`"`), &repeatReader{'\n', huge}, strings.NewReader(`",infer,8,1728000,612000000,3199000000,1,10,20000,b`+"\n"))
		}},
		{"json workload name", JSON, func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"schema_version": 1, "profiles": [{"board": "b", "workload": "`), &repeatReader{'x', huge}, strings.NewReader(`"}]}`))
		}},
		{"json key before profiles", JSON, func() io.Reader {
			return io.MultiReader(strings.NewReader(`{"`), &repeatReader{'k', huge}, strings.NewReader(`": 1, "profiles": []}`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			_, err = s.Import(tc.body(), ImportOptions{Format: tc.format})
			runtime.ReadMemStats(&m1)
			alloc := m1.TotalAlloc - m0.TotalAlloc
			t.Logf("a %d MB field: %.1f MB allocated, error %d bytes", huge>>20, float64(alloc)/(1<<20), len(fmt.Sprint(err)))
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("import: %v, want an input error", err)
			}
			if len(err.Error()) > 1024 {
				t.Errorf("the error echoes the input: %d bytes", len(err.Error()))
			}
			// An allocation count, not a timing: the body is 20 MB; a record is 64 KiB.
			if alloc > huge/2 {
				t.Errorf("allocated %d MB for a %d MB body: the field was held", alloc>>20, huge>>20)
			}
			if n, _ := s.Count(); n != 0 {
				t.Errorf("%d profiles stored", n)
			}
		})
	}
}

// Each field limit refuses the whole import, with a message that quotes at most a
// clipped value; the profile just inside each limit is stored.
func TestImportFieldLimits(t *testing.T) {
	orin, err := powermode.NewSpace(powermode.Levels{Cores: []int{1, 2, 4, 8, 12}, CPUKHz: []int64{1728000}, GPUHz: []int64{612000000}, EMCHz: []int64{3199000000}})
	if err != nil {
		t.Fatal(err)
	}
	spaces := map[string]*powermode.Space{"agx-orin-64gb": orin}
	base := readBody(t, importBody(t, JSON, 1), JSON)[0]
	base.Mode = powermode.Mode{Cores: 8, CPUKHz: 1728000, GPUHz: 612000000, EMCHz: 3199000000}
	for _, tc := range []struct {
		name string
		edit func(p *Profile)
		want string // "" : stored
	}{
		{"name at the protocol's limit", func(p *Profile) { p.Workload = strings.Repeat("n", 128) }, ""},
		{"name over it", func(p *Profile) { p.Workload = strings.Repeat("n", 129) }, "workload"},
		{"huge name", func(p *Profile) { p.Workload = strings.Repeat("n", 60000) }, "at most 128"},
		{"board name", func(p *Profile) { p.Board = strings.Repeat("b", 200) }, "board"},
		{"source", func(p *Profile) { p.Source = strings.Repeat("s", 200) }, "source"},
		{"time 1e308", func(p *Profile) { p.TimeMS.Mean, p.TimeMS.P50, p.TimeMS.P95 = 1e308, 1e308, 1e308 }, "time_ms.mean = 1e+308 is not a physical value"},
		{"time one hour", func(p *Profile) { p.TimeMS.Mean, p.TimeMS.P50, p.TimeMS.P95 = 3.6e6, 3.6e6, 3.6e6 }, ""},
		{"p95 over an hour", func(p *Profile) { p.TimeMS.P95 = 3.7e6 }, "time_ms.p95"},
		{"power 2 kW", func(p *Profile) { p.PowerMW.Mean = 2e6 }, "power_mw.mean"},
		{"batch 5000", func(p *Profile) { p.Batch = 5000 }, "batch 5000"},
		{"999 cores on a known board", func(p *Profile) { p.Mode.Cores = 999 }, "cores 999 is not a level of this board"},
		{"off-board clock on a known board", func(p *Profile) { p.Mode.GPUHz = 612000001 }, "gpu_hz 612000001 is not a level"},
		{"999 cores elsewhere", func(p *Profile) { p.Board = "other"; p.Mode.Cores = 999 }, ""},
		{"5000 cores elsewhere", func(p *Profile) { p.Board = "other"; p.Mode.Cores = 5000 }, "no board's"},
		{"1 THz elsewhere", func(p *Profile) { p.Board = "other"; p.Mode.GPUHz = 1e12 }, "no board's"},
		{"samples", func(p *Profile) { p.Samples = 1 << 31 }, "samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := base
			tc.edit(&p)
			for _, format := range []Format{JSON, CSV} {
				var body bytes.Buffer
				if err := WriteProfiles(&body, format, []Profile{p}); err != nil {
					t.Fatal(err)
				}
				_, err := s.Import(&body, ImportOptions{Format: format, Overwrite: true, Spaces: spaces})
				n, _ := s.Count()
				if tc.want == "" {
					if err != nil || n != 1 {
						t.Fatalf("%s: %v, %d stored; want it stored", format, err, n)
					}
					continue
				}
				var ie *InputError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%s: %v, want an input error saying %q", format, err, tc.want)
				}
				if len(err.Error()) > 600 || n != 0 {
					t.Fatalf("%s: %d stored; message of %d bytes: %s", format, n, len(err.Error()), err)
				}
			}
		})
	}
	// A CSV value that is not a number is quoted clipped, without strconv's echo.
	s, err := Open(filepath.Join(t.TempDir(), "p.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := "workload,role,cores,cpu_khz,gpu_hz,emc_hz,batch,time_ms,power_mw,board\nw,infer,8,1728000,612000000,3199000000,1," + strings.Repeat("9x", 20000) + ",20000,b\n"
	_, err = s.Import(strings.NewReader(body), ImportOptions{})
	if err == nil || len(err.Error()) > 400 || !strings.Contains(err.Error(), "column time_ms") {
		t.Fatalf("a 40 KB bad number: %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
}

const killEnv = "FULCRUM_STORE_TEST_KILL_DB"

// TestHelperKilledImport is the child of TestImportKilledMidwayLeavesNoFiles: it imports
// the body on stdin into the store named in the environment and stops in the second
// write chunk (the first committed), saying so, until it is killed.
func TestHelperKilledImport(t *testing.T) {
	db := os.Getenv(killEnv)
	if db == "" {
		return
	}
	s, err := Open(db, Options{})
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	s.importFault = func(chunk int) error {
		if chunk == 1 {
			fmt.Println("WRITING")
			select {}
		}
		return nil
	}
	_, err = s.Import(os.Stdin, ImportOptions{Format: JSON})
	fmt.Println("ERROR import returned", err)
}

// A real process SIGKILLed while an import writes leaves its first chunk stored (what
// docs/operations.md says) and its spool and undo log on disk; RemoveImportLeftovers,
// which fulcrumd calls at start, removes them and only them, and importing the same
// file again completes the import.
func TestImportKilledMidwayLeavesNoFiles(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "profiles.db")
	const n = 2*importChunk + 10
	body := importBody(t, JSON, n)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestHelperKilledImport$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnv+"="+db)
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "WRITING" {
		if strings.HasPrefix(sc.Text(), "ERROR") {
			t.Fatal(sc.Text())
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	// Files a killed import leaves, one of an older build, and others that must stay.
	for _, f := range []string{".import-123", ".import-undo-456", ".other.db.import-1", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".profiles.db.import-*"))
	if len(left) != 2 {
		t.Fatalf("after the kill: %v, want the spool and the undo log", left)
	}
	s, err := Open(db, Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, _ := s.Count(); c != importChunk {
		t.Errorf("after the kill %d profiles are stored, want the first chunk (%d)", c, importChunk)
	}
	removed, err := s.RemoveImportLeftovers()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range removed {
		names = append(names, filepath.Base(r))
	}
	slices.Sort(names)
	want := append(slices.Clone([]string{filepath.Base(left[0]), filepath.Base(left[1])}), ".import-123", ".import-undo-456")
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("removed %v, want %v", names, want)
	}
	ents, _ := os.ReadDir(dir)
	var kept []string
	for _, e := range ents {
		kept = append(kept, e.Name())
	}
	if !slices.Equal(kept, []string{".other.db.import-1", "notes.txt", "profiles.db"}) {
		t.Errorf("directory after the cleanup: %v", kept)
	}
	res, err := s.Import(bytes.NewReader(body), ImportOptions{Format: JSON})
	if err != nil || res.Added != n-importChunk || res.Unchanged != importChunk {
		t.Fatalf("importing again: %+v %v", res, err)
	}
}
