package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/powermode"
	"github.com/fulcrum-edge/fulcrum/profiler/bundle"
	"github.com/fulcrum-edge/fulcrum/profiler/store"
)

func newBundleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Share profiles across a fleet: export a board model's profiles, import them on its twins",
		Long: `bundle moves the profiles and learned models of one board model between profile
stores: profile one board, export a bundle, import it on every other board of the same
model and L4T release (docs/fleet.md).

A bundle is a JSON file (gzip-compressed when its name ends in .gz) holding the board's
identity (catalog name, module, L4T release), every profile of that board, the learned
models whose key starts with "<board>/", a format version and a SHA-256 checksum.

The profile store allows one writer: stop fulcrumd (systemctl stop fulcrumd) before
import, and before export if it is running.`,
	}
	cmd.PersistentFlags().String("db", defaultProfileDB, "profile store file (bbolt)")
	cmd.AddCommand(newBundleExportCmd(), newBundleImportCmd(), newBundleInspectCmd())
	return cmd
}

// bundleIdentity is the identity of the board under root, or of the catalog board name
// with the given L4T release when name is set (exporting away from the board).
func bundleIdentity(root, name, l4t, module string) (bundle.Identity, error) {
	cat, err := powermode.LoadCatalog(configs.FS, "boards")
	if err != nil {
		return bundle.Identity{}, fmt.Errorf("load the board catalog: %w", err)
	}
	if name != "" {
		spec, err := cat.Board(name)
		if err != nil {
			return bundle.Identity{}, fmt.Errorf("--board %s: %w (known: %s)", name, err, strings.Join(cat.Names(), ", "))
		}
		if l4t == "" {
			return bundle.Identity{}, fmt.Errorf("--board %s needs --l4t, the L4T release the profiles were measured on (e.g. R36.4.3; on the board: head -1 /etc/nv_tegra_release)", name)
		}
		return bundle.Identity{Board: spec.Name, Model: spec.Model, Module: module, SoC: spec.SoC, L4T: l4t}, nil
	}
	_, info, err := powermode.Detect(root, cat)
	if err != nil {
		return bundle.Identity{}, fmt.Errorf("%w (or name the board with --board NAME --l4t RELEASE)", err)
	}
	return bundle.IdentityOf(info), nil
}

func newBundleExportCmd() *cobra.Command {
	var root, board, l4t, module, out string
	cmd := &cobra.Command{
		Use:   "export --out FILE[.gz] [--root DIR | --board NAME --l4t RELEASE]",
		Short: "Write this board model's profiles and learned models to a bundle file",
		Long: `export writes every profile of one board model in --db, and its learned models, to
--out (gzip-compressed when the name ends in .gz; "-" for standard output).

The board is the one detected under --root (default /: run it on the board that did the
profiling), or the catalog board --board with --l4t, when exporting a store copied off
the board.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required: the bundle file to write (e.g. agx-orin-64gb.json.gz)")
			}
			id, err := bundleIdentity(root, board, l4t, module)
			if err != nil {
				return err
			}
			db := dbFlag(cmd)
			if _, err := os.Stat(db); err != nil {
				return fmt.Errorf("profile store %s: %w (pass --db)", db, err)
			}
			models, err := bundle.ReadModels(db, bundle.ModelPrefix(id.Board), store.DefaultTimeout)
			if err != nil {
				return err
			}
			st, err := store.Open(db, store.Options{ReadOnly: true})
			if err != nil {
				return err
			}
			defer st.Close()
			b, err := bundle.Export(st, id, models, time.Now())
			if err != nil {
				return err
			}
			if err := writeBundle(cmd.OutOrStdout(), out, b); err != nil {
				return err
			}
			if out != "-" {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: board %s (%s, L4T %s), %d profiles, %d models, %s\n",
					out, shown(id.Board), orDash(id.Module), orDash(id.L4T), len(b.Profiles), len(b.Models), b.Checksum)
			}
			return nil
		},
	}
	f := cmd.Flags()
	boardRootFlag(cmd, &root)
	f.StringVar(&board, "board", "", "catalog board name instead of detecting it under --root (needs --l4t)")
	f.StringVar(&l4t, "l4t", "", "L4T release of the profiles with --board, e.g. R36.4.3")
	f.StringVar(&module, "module", "", "module part number with --board, e.g. p3701-0005 (informational)")
	f.StringVarP(&out, "out", "o", "", `bundle file to write (.gz: compressed; "-": stdout)`)
	return cmd
}

// writeBundle writes b to path atomically (a temporary file renamed into place), or to
// stdout for "-".
func writeBundle(stdout io.Writer, path string, b *bundle.Bundle) error {
	if path == "-" {
		return b.Write(stdout, false)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write bundle %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := b.Write(tmp, strings.HasSuffix(path, ".gz")); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write bundle %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write bundle %s: %w", path, err)
	}
	return nil
}

func readBundleFile(path string) (*bundle.Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open bundle: %w", err)
	}
	defer f.Close()
	b, err := bundle.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

func newBundleImportCmd() *cobra.Command {
	var root string
	var force, overwrite bool
	var outFmt *outputFlag
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Store a bundle's profiles and models, after checking it was made on this board model and L4T release",
		Long: `import checks FILE (format, version, checksum), then compares its board with the one
detected under --root (default /): the catalog board and the L4T release must be the
same, or the import is refused and nothing is written (--force imports anyway). A
stored profile or model that differs from the bundle's also refuses the import unless
--overwrite. The profiles are written in one transaction.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readBundleFile(args[0])
			if err != nil {
				return err
			}
			target, err := bundleIdentity(root, "", "", "")
			if err != nil {
				return fmt.Errorf("identify this board to check the bundle against: %w", err)
			}
			// Refuse before opening (and perhaps creating) the store; Import checks again.
			if err := bundle.Check(b, target); err != nil && !force {
				return fmt.Errorf("%s: %w (nothing was imported)", args[0], err)
			}
			st, err := store.Open(dbFlag(cmd), store.Options{})
			if err != nil {
				return err
			}
			defer st.Close()
			res, err := bundle.Import(st, b, target, bundle.ImportOptions{Force: force, Overwrite: overwrite})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if ok, err := outFmt.Print(w, res); ok {
				return err
			}
			if len(res.Forced) > 0 {
				fmt.Fprintf(w, "warning: imported despite a different %s (--force)\n", strings.Join(res.Forced, " and "))
			}
			fmt.Fprintf(w, "imported %s into %s: profiles %d added, %d unchanged, %d replaced; models %d added, %d unchanged, %d replaced\n",
				args[0], st.Path(), res.Profiles.Added, res.Profiles.Unchanged, res.Profiles.Replaced, res.Models.Added, res.Models.Unchanged, res.Models.Replaced)
			return nil
		},
	}
	boardRootFlag(cmd, &root)
	cmd.Flags().BoolVar(&force, "force", false, "import even if the board model or L4T release differs")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace stored profiles and models that differ from the bundle's")
	outFmt = addOutputFlag(cmd, "table", "json", "yaml")
	return cmd
}

func newBundleInspectCmd() *cobra.Command {
	var outFmt *outputFlag
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Check a bundle file and print its board, counts and checksum",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readBundleFile(args[0])
			if err != nil {
				return err
			}
			workloads := map[string]int{}
			for _, p := range b.Profiles {
				workloads[p.Workload+" "+string(p.Role)]++
			}
			w := cmd.OutOrStdout()
			summary := bundleSummary{File: args[0], FormatVersion: b.FormatVersion, Checksum: b.Checksum, CreatedAt: b.CreatedAt,
				Identity: b.Identity, Profiles: len(b.Profiles), ByWorkload: workloads, Models: slices.Sorted(maps.Keys(b.Models))}
			if summary.Models == nil {
				summary.Models = []string{}
			}
			if ok, err := outFmt.Print(w, summary); ok {
				return err
			}
			fmt.Fprintf(w, "bundle    %s (format %d, checksum ok: %s)\n", args[0], b.FormatVersion, b.Checksum)
			fmt.Fprintf(w, "created   %s\n", b.CreatedAt.Format(time.RFC3339))
			fmt.Fprintf(w, "board     %s — %s, module %s, %s, L4T %s\n", shown(b.Identity.Board), orDash(b.Identity.Model), orDash(b.Identity.Module), orDash(b.Identity.SoC), orDash(b.Identity.L4T))
			fmt.Fprintf(w, "profiles  %d\n", len(b.Profiles))
			for _, k := range slices.Sorted(maps.Keys(workloads)) {
				fmt.Fprintf(w, "  %-30s %d\n", shown(k), workloads[k])
			}
			fmt.Fprintf(w, "models    %d\n", len(b.Models))
			for _, k := range slices.Sorted(maps.Keys(b.Models)) {
				fmt.Fprintf(w, "  %s\n", shown(k))
			}
			return nil
		},
	}
	outFmt = addOutputFlag(cmd, "table", "json", "yaml")
	return cmd
}

// bundleSummary is what bundle inspect prints with -o json or yaml (the checksum was
// verified on reading).
type bundleSummary struct {
	File          string         `json:"file"`
	FormatVersion int            `json:"format_version"`
	Checksum      string         `json:"checksum"`
	CreatedAt     time.Time      `json:"created_at"`
	Identity      any            `json:"identity"`
	Profiles      int            `json:"profiles"`
	ByWorkload    map[string]int `json:"profiles_by_workload"`
	Models        []string       `json:"models"`
}
