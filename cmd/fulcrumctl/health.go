package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
)

// --- health --------------------------------------------------------------------------

func newHealthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check fulcrumd's health (GET /v1/healthz); exit 1 when not ready, for probes",
		Long: `Ask fulcrumd whether it is ready: the board answers, the profile store answers and the
control loop goes round. Optional parts (metrics) that failed are shown as degraded and
do not fail the check. Exits 0 when ready, 1 when not (or when fulcrumd does not answer),
so it serves as a Kubernetes exec probe or a monitoring check.

--live checks only that fulcrumd answers and its control loop goes round (a liveness
probe: a board or store failure is a reason not to be ready, not to be restarted).`,
		Example: `  fulcrumctl health
  fulcrumctl health --live --timeout 5s --socket ` + paths.ControlSocket,
		Args: cobra.NoArgs,
	}
	client := addSocketFlag(cmd)
	live := cmd.Flags().Bool("live", false, "only require the control loop (liveness), not the board and store")
	timeout := cmd.Flags().Duration("timeout", 10*time.Second, "give up after this long (a stuck fulcrumd is not healthy)")
	outFmt := addOutputFlag(cmd, "table", "json", "yaml")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		c := client()
		defer c.Close()
		h, err := c.Health(ctx)
		if err != nil {
			return fmt.Errorf("health: %w", err)
		}
		if ok, err := outFmt.Print(cmd.OutOrStdout(), h); !ok {
			writeHealth(cmd.OutOrStdout(), h)
		} else if err != nil {
			return err
		}
		ok := h.Ready
		if *live {
			ok = false
			for _, ch := range h.Checks {
				if ch.Name == "control_loop" {
					ok = ch.OK
				}
			}
		}
		if !ok {
			var failed []string
			for _, ch := range h.Checks {
				if !ch.OK && !ch.Optional {
					failed = append(failed, shown(ch.Name))
				}
			}
			return fmt.Errorf("fulcrumd is not healthy: %s failed (details above; fulcrumctl events and journalctl -u fulcrumd say more)", strings.Join(failed, ", "))
		}
		return nil
	}
	return cmd
}

func writeHealth(w interface{ Write([]byte) (int, error) }, h api.Health) {
	state := "READY"
	switch {
	case !h.Ready:
		state = "NOT READY"
	case h.Degraded:
		state = "READY (DEGRADED)"
	}
	fmt.Fprintln(w, state)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range h.Checks {
		res := "ok"
		if !c.OK {
			res = "FAILED"
		}
		if c.Optional {
			res += " (optional)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", shown(c.Name), res, shown(c.Detail))
	}
	tw.Flush()
}
