package daemon

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fulcrum-edge/fulcrum/powermode"
)

// The board's own tools (jetson_clocks, nvpmodel) and fulcrumd: what the controller asks
// of the board when another tool changes it, and the nvpmodel presets by name.

// LeaveAsIs forgets the state saved before fulcrumd's first mode change, and its file in
// the state directory: another tool (jetson_clocks, nvpmodel -m) has set the board since,
// and "the board is left as it was found" means fulcrumd undoes its own changes only —
// putting its snapshot back at exit would undo that tool's. The next Apply (fulcrumd
// taking the board back) snapshots the board afresh, so a clean stop then returns it to
// the other tool's settings.
func (b *Board) LeaveAsIs(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.snap == nil {
		return
	}
	b.snap = nil
	if b.stateDir != "" {
		if err := powermode.RemoveSnapshot(b.stateDir); err != nil {
			b.log.Error("forget the board snapshot (another tool set the board)", "err", err)
			return
		}
	}
	b.log.Info("board snapshot forgotten: at exit the board is left as the other tool set it", "reason", reason)
}

// NvpmodelMode is the nvpmodel mode the board runs now (its status file read again, so
// an nvpmodel -m since start shows), ok false where the board has none or it is unknown.
func (b *Board) NvpmodelMode() (id int, name string, ok bool) {
	if b.NVP == nil {
		return 0, "", false
	}
	return b.NVP.Now()
}

// Preset resolves an nvpmodel preset by name (case-insensitive) or id to its mode in the
// board's space. A preset with another TPC mask than the running one is refused: it
// needs a reboot, which fulcrumd never does.
func (b *Board) Preset(nameOrID string) (powermode.Mode, string, error) {
	if b.Backend == nil || b.NVP == nil {
		return powermode.Mode{}, "", fmt.Errorf("this board has no nvpmodel presets; apply a mode by its clocks (fulcrumctl mode apply --gpu-hz …)")
	}
	id, idErr := strconv.Atoi(nameOrID)
	var live []string
	for _, p := range b.NVP.Live() {
		live = append(live, fmt.Sprintf("%d %s", p.ID, p.Name))
	}
	for _, p := range b.NVP.Presets {
		if !strings.EqualFold(p.Name, nameOrID) && (idErr != nil || p.ID != id) {
			continue
		}
		if p.NeedsReboot {
			return powermode.Mode{}, "", fmt.Errorf("nvpmodel preset %d %s has TPC mask %d and the GPU runs mask %d: switching needs a reboot (sudo nvpmodel -m %d, then reboot), which fulcrumd never does; live presets: %s",
				p.ID, p.Name, p.TPCPGMask, b.NVP.TPCMask, p.ID, strings.Join(live, ", "))
		}
		m := p.Mode
		if sp := b.Backend.Space(); sp != nil {
			m = sp.Snap(m)
		}
		return m, p.Name, nil
	}
	return powermode.Mode{}, "", fmt.Errorf("no nvpmodel preset %q on this board; live presets: %s (fulcrumctl board info lists them all)", nameOrID, strings.Join(live, ", "))
}

var _ interface {
	NvpmodelMode() (int, string, bool)
} = (*Board)(nil)
