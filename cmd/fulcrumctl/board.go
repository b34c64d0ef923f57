package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/internal/units"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/powermode/nvpmodel"
	"github.com/fulcrum-edge/fulcrum/powermode/tegra"
)

// defaultStateDir holds the board snapshot (and, for fulcrumd, its other state).
const defaultStateDir = paths.StateDir

func newBoardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "board",
		Short: "Inspect this Jetson's power modes, apply one, restore the original state",
		Long: `board reads the Jetson under --root (default /; a simulated board's directory works
the same): which board it is, its power-mode space, the mode it is in, power and
temperatures. "board apply" sets a mode (cores, CPU, GPU and EMC frequencies) after
saving the board's original state in --state-dir; "board restore" puts it back.
Writing needs root on a real board. docs/board-layer.md has the details.`,
	}
	cmd.AddCommand(newBoardInfoCmd(), newBoardModesCmd(), newBoardApplyCmd(), newBoardRestoreCmd())
	return cmd
}

// openBoard detects the board under root and opens its sysfs backend.
func openBoard(ctx context.Context, root string) (*tegra.Backend, *powermode.BoardSpec, error) {
	cat, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return nil, nil, err
	}
	spec, info, err := powermode.Detect(root, cat)
	if err != nil {
		return nil, nil, err
	}
	be, err := tegra.Open(ctx, root, spec, info)
	if err != nil {
		return nil, nil, err
	}
	return be, spec, nil
}

// lockBoard takes the board lock (powermode.LockBoard) before a command changes the
// board or its snapshot: a fulcrumd driving the board owns both.
func lockBoard(be *tegra.Backend) (*powermode.BoardLock, error) {
	l, err := powermode.LockBoard(be.LockPath())
	if err != nil {
		return nil, fmt.Errorf("%w; while fulcrumd runs, change the mode through it (fulcrumctl mode apply)", err)
	}
	return l, nil
}

// boardInfoJSON is `board info --json`.
type boardInfoJSON struct {
	Board struct {
		Name    string `json:"name"`
		Display string `json:"display"`
		Model   string `json:"model"`
		Module  string `json:"module"`
		SoC     string `json:"soc"`
		L4T     string `json:"l4t"`
	} `json:"board"`
	Root      string                  `json:"root"`
	Cores     int                     `json:"cores"`
	GPUNode   string                  `json:"gpu_node"`
	Levels    powermode.Levels        `json:"levels"`
	SpaceSize int                     `json:"space_size"`
	Current   powermode.Mode          `json:"current"`
	Power     *powermode.PowerReading `json:"power"`
	Thermal   []powermode.ThermalZone `json:"thermal"`
	Nvpmodel  *nvpmodelJSON           `json:"nvpmodel"`
	// Errors lists what could not be read (power, thermal) without failing the command.
	Errors []string `json:"errors,omitempty"`
}

// nvpmodelJSON is the board's nvpmodel presets in `board info --json`: where they came
// from (the live /etc/nvpmodel.conf or the catalog) and which need a reboot.
type nvpmodelJSON struct {
	Source  string       `json:"source"` // live-conf or catalog
	Running *int         `json:"running_id"`
	Notes   []string     `json:"notes,omitempty"`
	Presets []presetJSON `json:"presets"`
}

type presetJSON struct {
	ID          int            `json:"id"`
	Name        string         `json:"name"`
	Source      string         `json:"source"`
	Default     bool           `json:"default"`
	Running     bool           `json:"running"`
	TPCPGMask   int            `json:"tpc_pg_mask"`
	NeedsReboot bool           `json:"needs_reboot"`
	Caps        powermode.Mode `json:"caps"` // as the conf writes them; 0 = no cap
	Mode        powermode.Mode `json:"mode"` // the caps snapped at or below on the board's levels
}

func boardNvpmodel(bp *nvpmodel.BoardPresets) *nvpmodelJSON {
	out := &nvpmodelJSON{Source: bp.Source, Notes: bp.Notes, Presets: []presetJSON{}}
	if bp.CurrentKnown {
		id := bp.Current
		out.Running = &id
	}
	for _, p := range bp.Presets {
		out.Presets = append(out.Presets, presetJSON{ID: p.ID, Name: p.Name, Source: p.Source, Default: p.Default,
			Running: bp.CurrentKnown && p.ID == bp.Current, TPCPGMask: p.TPCPGMask, NeedsReboot: p.NeedsReboot, Caps: p.Caps, Mode: p.Mode})
	}
	return out
}

func newBoardInfoCmd() *cobra.Command {
	var root string
	var outFmt *outputFlag
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show the board, its mode space, the current mode, power and temperatures",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			be, spec, err := openBoard(ctx, root)
			if err != nil {
				return err
			}
			var out boardInfoJSON
			info := be.Info()
			out.Board.Name, out.Board.Display, out.Board.Model = info.Name, spec.Display, info.Model
			out.Board.Module, out.Board.SoC, out.Board.L4T = info.Module, info.SoC, info.L4T
			out.Root, out.Cores, out.GPUNode = root, be.Cores(), be.GPUNode()
			out.Levels, out.SpaceSize = be.Space().Levels(), be.Space().Size()
			if out.Current, err = be.Current(ctx); err != nil {
				return err
			}
			if p, err := be.Power(ctx); err != nil {
				out.Errors = append(out.Errors, err.Error())
			} else {
				out.Power = &p
			}
			if out.Thermal, err = be.Thermal(ctx); err != nil {
				out.Errors = append(out.Errors, err.Error())
			}
			if bp, err := nvpmodel.ForBoard(root, spec); err != nil {
				out.Errors = append(out.Errors, err.Error())
			} else {
				out.Nvpmodel = boardNvpmodel(bp)
			}
			if ok, err := outFmt.Print(cmd.OutOrStdout(), out); ok {
				return err
			}
			return printBoardInfo(cmd.OutOrStdout(), &out)
		},
	}
	boardRootFlag(cmd, &root)
	outFmt = addOutputFlag(cmd, "table", "json", "yaml")
	return cmd
}

func printBoardInfo(w io.Writer, in *boardInfoJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	name := in.Board.Display
	if name == "" {
		name = in.Board.Model
	}
	fmt.Fprintf(tw, "board\t%s (%s, module %s, L4T %s)\n", name, in.Board.Name, orDash(in.Board.Module), orDash(in.Board.L4T))
	lv := in.Levels
	fmt.Fprintf(tw, "levels\tcores 1..%d, cpu %d levels %s, gpu %d levels %s, emc %d levels %s\n", in.Cores,
		len(lv.CPUKHz), boardSpan(lv.CPUKHz, 1000), len(lv.GPUHz), boardSpan(lv.GPUHz, 1), len(lv.EMCHz), boardSpan(lv.EMCHz, 1))
	fmt.Fprintf(tw, "space\t%d modes\n", in.SpaceSize)
	fmt.Fprintf(tw, "current\t%s\t(%s)\n", in.Current.Human(), in.Current)
	if in.Power != nil {
		fmt.Fprintf(tw, "power\t%s total\n", units.Watts(in.Power.TotalMW)) // W, as status and budgets print it
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if in.Nvpmodel != nil {
		fmt.Fprintf(w, "\nnvpmodel presets (%s)\n", in.Nvpmodel.Source)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tTPC_PG_MASK\tMODE")
		for _, p := range in.Nvpmodel.Presets {
			var flags []string
			if p.Running {
				flags = append(flags, "running")
			}
			if p.Default {
				flags = append(flags, "default")
			}
			if p.NeedsReboot {
				flags = append(flags, "needs reboot: not used")
			}
			note := ""
			if len(flags) > 0 {
				note = "  (" + strings.Join(flags, ", ") + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s%s\n", p.ID, p.Name, p.TPCPGMask, p.Mode, note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, n := range in.Nvpmodel.Notes {
			fmt.Fprintln(w, "note:", n)
		}
	}
	if in.Power != nil {
		fmt.Fprintln(w)
		width := len("RAIL")
		for _, r := range in.Power.Rails {
			width = max(width, len(shown(r.Name)))
		}
		// W, V and A as status and budgets print power (issue 34); --json keeps the
		// sensors' own mW, mV and mA.
		fmt.Fprintf(w, "%-*s  %8s  %7s  %7s\n", width, "RAIL", "W", "V", "A")
		for _, r := range in.Power.Rails {
			fmt.Fprintf(w, "%-*s  %8.3f  %7.3f  %7.3f\n", width, shown(r.Name), r.PowerMW/1000, r.VoltageMV/1000, r.CurrentMA/1000)
		}
	}
	if len(in.Thermal) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ZONE\t°C")
		for _, z := range in.Thermal {
			if z.Err != "" {
				fmt.Fprintf(tw, "%s\t-\t(%s)\n", z.Zone, z.Err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%.1f\n", z.Zone, z.Celsius)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, e := range in.Errors {
		fmt.Fprintln(w, "warning:", e)
	}
	return nil
}

// boardSpan is "lo–hi MHz" of an ascending level list; mul converts a level to Hz
// (1000 for kHz).
func boardSpan(v []int64, mul int64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s–%s MHz", trimMHz(v[0]*mul), trimMHz(v[len(v)-1]*mul))
}

func trimMHz(hz int64) string {
	s := fmt.Sprintf("%.2f", float64(hz)/1e6)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return shown(s)
}

func newBoardModesCmd() *cobra.Command {
	var root string
	var count bool
	var outFmt *outputFlag
	cmd := &cobra.Command{
		Use:   "modes",
		Short: "List every power mode of the board (or, with --count, how many there are)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			be, spec, err := openBoard(cmd.Context(), root)
			if err != nil {
				return err
			}
			sp := be.Space()
			w := cmd.OutOrStdout()
			format, err := outFmt.Format()
			if err != nil {
				return err
			}
			asJSON := format != "table"
			encode := func(v any) error {
				if format == "yaml" {
					return printYAML(w, v)
				}
				return json.NewEncoder(w).Encode(v) // compact: one line per answer
			}
			switch {
			case count && asJSON:
				return encode(map[string]int{"space_size": sp.Size()})
			case count:
				_, err := fmt.Fprintln(w, sp.Size())
				return err
			case asJSON:
				// Presets: only those reachable without a reboot (board info lists all).
				type preset struct {
					Name string         `json:"name"`
					Mode powermode.Mode `json:"mode"`
				}
				presets := []preset{}
				if bp, err := nvpmodel.ForBoard(root, spec); err == nil {
					ms, ns := bp.LiveModes()
					for i := range ms {
						presets = append(presets, preset{ns[i], sp.Snap(ms[i])})
					}
				}
				return encode(struct {
					Levels    powermode.Levels `json:"levels"`
					SpaceSize int              `json:"space_size"`
					Modes     []powermode.Mode `json:"modes"`
					Presets   []preset         `json:"presets"`
				}{sp.Levels(), sp.Size(), sp.Modes(), presets})
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "CORES\tCPU_KHZ\tGPU_HZ\tEMC_HZ\t")
			for _, m := range sp.All() {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\n", m.Cores, m.CPUKHz, m.GPUHz, m.EMCHz)
			}
			return tw.Flush()
		},
	}
	boardRootFlag(cmd, &root)
	outFmt = addOutputFlag(cmd, "table", "json", "yaml") // json, yaml: levels, space_size, every mode and the nvpmodel presets reachable without a reboot
	cmd.Flags().BoolVar(&count, "count", false, "print only the number of modes")
	return cmd
}

func newBoardApplyCmd() *cobra.Command {
	var root, stateDir string
	var m powermode.Mode
	cmd := &cobra.Command{
		Use:   "apply --cores N --cpu-khz F --gpu-hz F --emc-hz F",
		Short: "Set the board to a power mode (saving its original state first)",
		Long: `apply sets the number of online cores and pins the CPU, GPU and EMC frequencies.
Every value must be one of the board's levels ("fulcrumctl board modes" lists them); a
value that is not is an error naming the nearest allowed levels, and nothing changes.

Before its first change apply saves the board's state in --state-dir; later applies
keep that first snapshot, so "fulcrumctl board restore" always returns to the state
the board had before Fulcrum touched it. If a write fails, the board is rolled back to
the mode it had before this apply.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			be, _, err := openBoard(ctx, root)
			if err != nil {
				return err
			}
			if err := be.Check(m); err != nil {
				return err
			}
			lock, err := lockBoard(be)
			if err != nil {
				return err
			}
			defer lock.Close()
			snap, err := be.Snapshot(ctx)
			if err != nil {
				return err
			}
			kept, err := powermode.SaveSnapshotKeep(stateDir, snap)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			file := filepath.Join(stateDir, powermode.SnapshotFile)
			if kept {
				fmt.Fprintf(w, "keeping the earlier snapshot %s (the state before Fulcrum's first change)\n", file)
			} else {
				fmt.Fprintf(w, "saved the board's state to %s\n", file)
			}
			if err := be.Apply(ctx, m); err != nil {
				return err
			}
			fmt.Fprintf(w, "applied %s (%s); `fulcrumctl board restore` puts the saved state back\n", m.Human(), m)
			return nil
		},
	}
	boardRootFlag(cmd, &root)
	boardStateFlag(cmd, &stateDir)
	cmd.Flags().IntVar(&m.Cores, "cores", 0, "online CPU cores (cpu0..N-1)")
	cmd.Flags().Int64Var(&m.CPUKHz, "cpu-khz", 0, "CPU frequency, kHz (one of scaling_available_frequencies)")
	cmd.Flags().Int64Var(&m.GPUHz, "gpu-hz", 0, "GPU frequency, Hz (one of the GPU's available_frequencies)")
	cmd.Flags().Int64Var(&m.EMCHz, "emc-hz", 0, "memory (EMC) frequency, Hz (one of possible_rates)")
	for _, f := range []string{"cores", "cpu-khz", "gpu-hz", "emc-hz"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func newBoardRestoreCmd() *cobra.Command {
	var root, stateDir string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Put back the board state saved by the first apply, and remove the snapshot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			w := cmd.OutOrStdout()
			snap, err := powermode.LoadSnapshot(stateDir)
			if errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(w, "nothing to restore: no snapshot in %s (fulcrumctl board apply saves one before its first change)\n", stateDir)
				return nil
			}
			if err != nil {
				return err
			}
			be, _, err := openBoard(ctx, root)
			if err != nil {
				return err
			}
			lock, err := lockBoard(be)
			if err != nil {
				return fmt.Errorf("%w (the snapshot stays in %s)", err, stateDir)
			}
			defer lock.Close()
			if err := be.Restore(ctx, snap); err != nil {
				return fmt.Errorf("%w (the snapshot stays in %s; fix the cause and run restore again)", err, stateDir)
			}
			if err := powermode.RemoveSnapshot(stateDir); err != nil {
				return err
			}
			m, err := be.Current(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "restored the state saved at %s; the board is in %s (%s)\n", snap.TakenAt.Format("2006-01-02 15:04:05 MST"), m.Human(), m)
			return nil
		},
	}
	boardRootFlag(cmd, &root)
	boardStateFlag(cmd, &stateDir)
	return cmd
}

func boardRootFlag(cmd *cobra.Command, root *string) {
	cmd.Flags().StringVar(root, "root", "/", "filesystem root under which /sys, /proc and /etc are read (a simulated board's directory)")
}

func boardStateFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "state-dir", defaultStateDir, "directory for the board snapshot ("+powermode.SnapshotFile+")")
}
