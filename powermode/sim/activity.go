package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Activity is one running minibatch as registered in ActivityDir: the physics loop
// computes board power from the set of these, and each runner counts them to share the
// GPU. The file is created when the minibatch starts and removed when it ends; a file
// whose process is gone is stale and is removed by the next reader.
type Activity struct {
	Workload  string    `json:"workload"`
	Role      string    `json:"role"`
	Batch     int       `json:"batch"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	// Share is the fraction of the last physics step this minibatch ran, for a source
	// that integrates (Options.Activities on virtual time); 0: it runs now (the files').
	Share float64 `json:"share,omitempty"`
}

// registerActivity writes a's file atomically (temp name without the .json suffix, then
// rename) and returns its path.
func registerActivity(root string, a Activity) (string, error) {
	dir := filepath.Join(root, ActivityDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("sim: activity directory: %w", err)
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+strconv.Itoa(a.PID)+"-*.tmp")
	if err != nil {
		return "", fmt.Errorf("sim: register activity: %w", err)
	}
	_, werr := f.Write(append(raw, '\n'))
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("sim: register activity: %w", err)
	}
	final := filepath.Join(dir, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f.Name()), "."), ".tmp")+".json")
	if err := os.Rename(f.Name(), final); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("sim: register activity: %w", err)
	}
	return final, nil
}

// readActivities lists the running minibatches under root, removing stale files whose
// process has exited. A missing directory means nothing runs.
func readActivities(root string) ([]Activity, error) {
	dir := filepath.Join(root, ActivityDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sim: read activity: %w", err)
	}
	var out []Activity
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // removed since the listing: that minibatch just ended
		}
		var a Activity
		if err := json.Unmarshal(raw, &a); err != nil {
			continue
		}
		if !processAlive(a.PID) {
			os.Remove(p)
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// countActivities counts the *.json files without parsing them (the runner's cheap
// poll of how many minibatches share the GPU).
func countActivities(root string) int {
	entries, err := os.ReadDir(filepath.Join(root, ActivityDir))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	return n
}

// processAlive reports whether pid exists (signal 0 probes without signalling; EPERM
// means it exists but belongs to someone else).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
