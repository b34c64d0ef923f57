package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
)

// A board whose mode files cannot be read (a control file replaced by a directory, or
// holding garbage): status says the mode could not be read and why, in a degraded
// state, and GET /v1/mode answers 503 with what to check, not 500.
func TestUnreadableModeFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, file string)
	}{
		{"file replaced by a directory", func(t *testing.T, file string) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(file, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage in the file", func(t *testing.T, file string) {
			if err := os.WriteFile(file, []byte("garbage\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o, _, _ := openReliabilityBoard(t, dir, slog.New(slog.DiscardHandler))
			_, cl := startDaemon(t, o)
			ctx := context.Background()
			if st, err := cl.Status(ctx); err != nil || st.ModeError != "" || st.Mode.Cores == 0 {
				t.Fatalf("status before: mode %v, mode_error %q, %v", st.Mode, st.ModeError, err)
			}
			tc.damage(t, filepath.Join(o.BoardRoot, "sys", "class", "devfreq", "17000000.gpu", "max_freq"))
			st, err := cl.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(st.ModeError, "mode could not be read") || !strings.Contains(st.ModeError, "max_freq") || !st.Degraded ||
				!strings.Contains(st.DegradedReason, "mode could not be read") {
				t.Fatalf("status: mode_error %q, degraded %v (%q); want the unreadable mode named, degraded", st.ModeError, st.Degraded, st.DegradedReason)
			}
			_, err = cl.Mode(ctx)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "check that the board's mode files") {
				t.Fatalf("GET /v1/mode: %v; want 503 saying what to check", err)
			}
			t.Logf("GET /v1/mode: %d %s", ae.Status, ae.Message)
		})
	}
}
