package profiler

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
)

// SelectModes turns a campaign's --modes value into modes of space:
//
//	all        every mode of the space, in ordinal order
//	presets    the board's nvpmodel presets that need no reboot from the running mode
//	           (nvp.LiveModes: the live conf's, else the catalog's), as modes of space,
//	           duplicates dropped; nil nvp means the catalog relative to its default
//	random:N   N distinct modes drawn with the given seed (same seed, same modes: this
//	           is what makes a rerun resume the same campaign)
//	FILE       one mode per line, "cores/cpu_khz/gpu_hz/emc_hz" (Mode.String) or CSV
//	           "cores,cpu_khz,gpu_hz,emc_hz" (an optional header line with those names);
//	           blank lines and lines starting with # are ignored
//
// Every mode must be in space; the error names the first that is not.
func SelectModes(spec string, board *powermode.BoardSpec, nvp *nvpmodel.BoardPresets, space *powermode.Space, seed uint64) ([]powermode.Mode, error) {
	switch {
	case spec == "all":
		return space.Modes(), nil
	case spec == "presets":
		if nvp == nil {
			var err error
			if nvp, err = nvpmodel.Catalog(board, board.NVP.Default, false); err != nil {
				return nil, fmt.Errorf("modes presets: %w", err)
			}
		}
		var out []powermode.Mode
		seen := map[powermode.Mode]bool{}
		ms, _ := nvp.LiveModes()
		for _, m := range ms {
			// Caps snap at or below into the space (a no-op for the board's own grid).
			if m = space.Snap(m); !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("modes presets: board %s has no nvpmodel preset reachable without a reboot (%s presets, running mode %d)", board.Name, nvp.Source, nvp.Current)
		}
		return out, nil
	case strings.HasPrefix(spec, "random:"):
		n, err := strconv.Atoi(strings.TrimPrefix(spec, "random:"))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("modes %q: want random:N with N a positive integer", spec)
		}
		all := space.Modes()
		if n > len(all) {
			return nil, fmt.Errorf("modes %q: the space has only %d modes", spec, len(all))
		}
		rng := rand.New(rand.NewPCG(seed, 0x66756c6372756d)) // "fulcrum"
		// Partial Fisher–Yates: the first n entries are a uniform sample without repeats.
		for i := range n {
			j := i + rng.IntN(len(all)-i)
			all[i], all[j] = all[j], all[i]
		}
		return all[:n], nil
	}
	f, err := os.Open(spec)
	if err != nil {
		return nil, fmt.Errorf("modes %q: not all, presets or random:N, and not a readable file: %w", spec, err)
	}
	defer f.Close()
	modes, err := ReadModes(f)
	if err != nil {
		return nil, fmt.Errorf("modes file %s: %w", spec, err)
	}
	for i, m := range modes {
		if !space.Contains(m) {
			return nil, fmt.Errorf("modes file %s: mode %d (%s) is not one of board %s's modes: snap it to the board's frequency tables", spec, i+1, m, board.Name)
		}
	}
	return modes, nil
}

// ReadModes parses a modes file (see SelectModes). Repeated modes are dropped.
func ReadModes(r io.Reader) ([]powermode.Mode, error) {
	sc := bufio.NewScanner(r)
	var out []powermode.Mode
	seen := map[powermode.Mode]bool{}
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		var m powermode.Mode
		var err error
		if strings.Contains(s, ",") {
			f := strings.Split(s, ",")
			for i := range f {
				f[i] = strings.TrimSpace(f[i])
			}
			if len(out) == 0 && strings.Join(f, ",") == "cores,cpu_khz,gpu_hz,emc_hz" {
				continue
			}
			if len(f) != 4 {
				return nil, fmt.Errorf("line %d: %q: want cores,cpu_khz,gpu_hz,emc_hz", line, s)
			}
			m, err = powermode.ParseMode(strings.Join(f, "/"))
		} else {
			m, err = powermode.ParseMode(s)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no modes: want one per line, cores/cpu_khz/gpu_hz/emc_hz or cores,cpu_khz,gpu_hz,emc_hz")
	}
	return out, nil
}
