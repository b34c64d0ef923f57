package powermode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ErrNotJetson is wrapped by Detect's error on a host that is not a Jetson.
var ErrNotJetson = errors.New("not a Jetson")

// ErrUnknownBoard is wrapped by Detect's error on a Jetson the catalog does not know.
var ErrUnknownBoard = errors.New("unknown Jetson module")

// Paths Detect reads, relative to the filesystem root.
const (
	DTModelPath      = "/proc/device-tree/model"
	DTCompatiblePath = "/proc/device-tree/compatible"
	TegraReleasePath = "/etc/nv_tegra_release"
	nvpmodelConfPath = "/etc/nvpmodel.conf"
)

// simulatorHint tells a user on a non-Jetson host how to get a board to run against.
const simulatorHint = "to run Fulcrum without a Jetson, create a simulated board with " +
	"`fulcrumctl sim board --dir DIR --board agx-orin-64gb`, then pass `--root DIR`"

var moduleIDRe = regexp.MustCompile(`^p\d{4}-\d{4}`)

// Detect identifies the board whose filesystem is at root (usually "/"), from the
// device tree's model and compatible strings and /etc/nv_tegra_release. The module id
// in compatible (e.g. p3701-0005 in "nvidia,p3737-0000+p3701-0005") selects the catalog
// entry; when several entries share a module (Orin Nano and its Super configuration)
// the exact compatible strings, the preset names in /etc/nvpmodel.conf and the L4T
// release break the tie.
func Detect(root string, cat *Catalog) (*BoardSpec, BoardInfo, error) {
	var info BoardInfo
	model, err := readDTString(root, DTModelPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, info, fmt.Errorf("detect board under %q: %w: there is no %s (%s)", root, ErrNotJetson, DTModelPath, simulatorHint)
		}
		return nil, info, fmt.Errorf("detect board: %w", err)
	}
	info.Model = model
	compat, err := readDTList(root, DTCompatiblePath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, info, fmt.Errorf("detect board: %w", err)
	}
	nvidia := false
	for _, c := range compat {
		if v, ok := strings.CutPrefix(c, "nvidia,"); ok {
			nvidia = true
			if strings.HasPrefix(v, "tegra") && info.SoC == "" {
				info.SoC = v
			}
		}
	}
	if !nvidia {
		return nil, info, fmt.Errorf("detect board under %q: %w: model %q, compatible %q has no nvidia entry (%s)", root, ErrNotJetson, model, compat, simulatorHint)
	}
	info.L4T, err = ReadL4T(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, info, fmt.Errorf("detect board: %w", err)
	}
	ids := moduleIDs(compat)
	type cand struct {
		spec   *BoardSpec
		module string
		score  int
	}
	var cands []cand
	for _, n := range cat.names {
		spec := cat.boards[n]
		for _, id := range ids {
			if slices.Contains(spec.Modules, id) {
				cands = append(cands, cand{spec: spec, module: id})
				break
			}
		}
	}
	if len(cands) == 0 {
		return nil, info, fmt.Errorf("detect board under %q: %w: model %q, compatible %q, module ids %v; known boards are %s (add a configs/boards/*.yaml entry for this module)",
			root, ErrUnknownBoard, model, compat, ids, strings.Join(cat.names, ", "))
	}
	if len(cands) > 1 {
		confNames := nvpmodelNames(root)
		for i := range cands {
			s := cands[i].spec
			for _, c := range compat {
				if slices.Contains(s.Compatible, c) {
					cands[i].score += 10
				}
			}
			for _, p := range s.NVP.Presets {
				if confNames[p.Name] {
					cands[i].score += 3
				}
			}
			if info.L4T != "" && slices.Contains(s.L4T, info.L4T) {
				cands[i].score++
			}
		}
		// Stable: equal scores keep catalog (name) order.
		slices.SortStableFunc(cands, func(a, b cand) int { return b.score - a.score })
	}
	best := cands[0]
	info.Name = best.spec.Name
	info.Module = best.module
	if info.SoC == "" {
		info.SoC = best.spec.SoC
	}
	return best.spec, info, nil
}

// moduleIDs extracts module part numbers ("p3701-0005") from compatible entries such
// as "nvidia,p3737-0000+p3701-0005" or "nvidia,p3768-0000+p3767-0005-super", module
// ids after carrier ids, in order of appearance, without repeats.
func moduleIDs(compat []string) []string {
	var ids []string
	for _, c := range compat {
		v, ok := strings.CutPrefix(c, "nvidia,")
		if !ok {
			continue
		}
		parts := strings.Split(v, "+")
		// In "carrier+module" the module comes last: try it first.
		slices.Reverse(parts)
		for _, p := range parts {
			if id := moduleIDRe.FindString(p); id != "" && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// readDTString reads a device-tree string property: NUL-terminated.
func readDTString(root, abs string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(root, abs))
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(raw), "\x00\n"), nil
}

// readDTList reads a device-tree string-list property: NUL-separated, NUL-terminated.
func readDTList(root, abs string) ([]string, error) {
	s, err := readDTString(root, abs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range strings.Split(s, "\x00") {
		if v != "" {
			out = append(out, v)
		}
	}
	return out, nil
}

var tegraReleaseRe = regexp.MustCompile(`^#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([0-9.]+?)\s*,`)

// ReadL4T reads root's /etc/nv_tegra_release and returns the release as "R36.4.3".
// A missing file is returned as is (errors.Is fs.ErrNotExist).
func ReadL4T(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, TegraReleasePath))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if sc.Scan() {
		if m := tegraReleaseRe.FindStringSubmatch(sc.Text()); m != nil {
			return "R" + m[1] + "." + m[2], nil
		}
		return "", fmt.Errorf("%s: first line %q: want \"# R36 (release), REVISION: 4.3, ...\"", TegraReleasePath, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", TegraReleasePath, err)
	}
	return "", fmt.Errorf("%s is empty: want \"# R36 (release), REVISION: 4.3, ...\"", TegraReleasePath)
}

// nvpmodelNames returns the POWER_MODEL names in root's nvpmodel.conf (empty if it
// cannot be read: it is only a tie-breaker). The conf is usually an absolute symlink,
// resolved under root.
func nvpmodelNames(root string) map[string]bool {
	names := map[string]bool{}
	p := filepath.Join(root, nvpmodelConfPath)
	for range 8 {
		t, err := os.Readlink(p)
		if err != nil {
			break
		}
		if filepath.IsAbs(t) {
			p = filepath.Join(root, t)
		} else {
			p = filepath.Join(filepath.Dir(p), t)
		}
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return names
	}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "<") || !strings.Contains(line, "POWER_MODEL") {
			continue
		}
		for _, f := range strings.Fields(strings.Trim(line, "<>")) {
			if v, ok := strings.CutPrefix(f, "NAME="); ok {
				names[v] = true
			}
		}
	}
	return names
}
