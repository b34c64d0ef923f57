// Package throwaway starts a real fulcrumd with no board in a temporary directory, for
// the scripts that attack or measure a daemon (scripts/attack, scripts/ctlattack,
// scripts/names), and removes it afterwards. One place, so the scripts start fulcrumd the
// same way and read its memory the same way (scripts/soak reads it through RSSMiB too).
package throwaway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fulcrum-edge/fulcrum/internal/paths"
)

// Options tune Start.
type Options struct {
	// Out receives fulcrumd's stdout and stderr (discarded when nil).
	Out io.Writer
	// Env is added to this process's environment (e.g. FULCRUM_METRICS_LISTEN=...).
	Env []string
	// Ready reports that the daemon answers; the default is a dial of the worker socket.
	Ready func(d *Daemon) bool
	// StartTimeout bounds the wait for Ready (15 s when zero).
	StartTimeout time.Duration
}

// Daemon is a fulcrumd started by Start.
type Daemon struct {
	Dir string
	Cmd *exec.Cmd
}

// Start runs bin/fulcrumd with --board none under a new temporary directory named after
// prefix and waits until it is ready.
func Start(bin, prefix string, o Options) (*Daemon, error) {
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		return nil, err
	}
	d := &Daemon{Dir: dir}
	d.Cmd = exec.Command(filepath.Join(bin, "fulcrumd"), "--runtime-dir", d.RuntimeDir(),
		"--state-dir", filepath.Join(dir, "state"), "--board", "none", "--log-level", "error")
	if len(o.Env) > 0 {
		d.Cmd.Env = append(os.Environ(), o.Env...)
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	d.Cmd.Stdout, d.Cmd.Stderr = out, out
	if err := d.Cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w (build it with go build -o %s/ ./cmd/fulcrumd)", d.Cmd.Path, err, bin)
	}
	ready := o.Ready
	if ready == nil {
		ready = func(d *Daemon) bool {
			c, err := net.Dial("unix", d.WorkerSocket())
			if err == nil {
				c.Close()
			}
			return err == nil
		}
	}
	limit := o.StartTimeout
	if limit == 0 {
		limit = 15 * time.Second
	}
	for deadline := time.Now().Add(limit); !ready(d); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			d.Stop()
			return nil, fmt.Errorf("fulcrumd did not answer within %v under %s", limit, d.RuntimeDir())
		}
	}
	return d, nil
}

// RuntimeDir holds the sockets.
func (d *Daemon) RuntimeDir() string { return filepath.Join(d.Dir, "run") }

// WorkerSocket is the worker socket's path.
func (d *Daemon) WorkerSocket() string { return filepath.Join(d.RuntimeDir(), paths.WorkerSocketName) }

// ControlSocket is the control API socket's path.
func (d *Daemon) ControlSocket() string {
	return filepath.Join(d.RuntimeDir(), paths.ControlSocketName)
}

// Stop kills fulcrumd (if it still runs) and removes its directory.
func (d *Daemon) Stop() {
	if d.Cmd.ProcessState == nil {
		_ = d.Cmd.Process.Kill()
		_ = d.Cmd.Wait()
	}
	os.RemoveAll(d.Dir)
}

// RSSMiB is fulcrumd's resident set in MiB.
func (d *Daemon) RSSMiB() (float64, error) { return RSSMiB(d.Cmd.Process.Pid) }

// RSSMiB is a process's resident set in MiB, from /proc/<pid>/status.
func RSSMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
