package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/apitest"
)

// Every command that prints data takes --output (and -o where -o is not its file) with
// json; the older --json stays wherever it was. Before, profile export, bundle inspect
// and profile check had no --json and none had -o.
func TestEveryDataCommandHasOutput(t *testing.T) {
	var walk func(c *cobra.Command)
	want := map[string]bool{"fulcrumctl profile export": false, "fulcrumctl bundle inspect": false, "fulcrumctl profile check": false, "fulcrumctl status": false}
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if _, ok := want[c.CommandPath()]; ok {
			want[c.CommandPath()] = c.Flags().Lookup("output") != nil
		}
		if c.Flags().Lookup("json") == nil {
			return
		}
		if c.CommandPath() == "fulcrumctl daemon profiles export" {
			return // -o and --output are its file (--out) already: --json and --format only
		}
		o := c.Flags().Lookup("output")
		if o == nil {
			t.Errorf("%s has --json but no --output", c.CommandPath())
			return
		}
		if o.Shorthand != "o" {
			t.Errorf("%s: --output has no -o", c.CommandPath())
		}
	}
	walk(newRootCmd())
	for path, ok := range want {
		if !ok {
			t.Errorf("%s has no --output", path)
		}
	}
}

// -o json, -o yaml and the old --json print the same data; contradicting flags and a bad
// -o are refused before anything changes.
func TestOutputFormats(t *testing.T) {
	fake := apitest.NewOrin(t, 0)
	sock := apitest.Serve(t, allowAll, fake)
	var a, b api.Budgets
	if err := json.Unmarshal([]byte(mustRun(t, "budget", "get", "--socket", sock, "-o", "json")), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(mustRun(t, "budget", "get", "--socket", sock, "--json")), &b); err != nil {
		t.Fatal(err)
	}
	if a.LatencyMS != 100 || a.LatencyMS != b.LatencyMS || a.PowerMW != b.PowerMW {
		t.Fatalf("-o json %+v, --json %+v", a, b)
	}
	var y map[string]any
	out := mustRun(t, "budget", "get", "--socket", sock, "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &y); err != nil || y["latency_ms"] != 100 || y["power_mw"] != 30000 {
		t.Fatalf("-o yaml: %v %v\n%s", y, err, out)
	}
	for _, args := range [][]string{{"-o", "xml"}, {"-o", "yaml", "--json"}} {
		_, _, err := fulcrumctl(context.Background(), append([]string{"budget", "set", "--socket", sock, "--latency", "55ms"}, args...)...)
		if err == nil {
			t.Errorf("budget set %v accepted", args)
		}
	}
	if bb, _ := fake.Budgets(context.Background()); bb.LatencyMS != 100 {
		t.Fatalf("a refused -o changed the budgets: %+v", bb)
	}
}

// profile check, profile export and bundle inspect print JSON on request.
func TestOutputOnStoreAndBundleCommands(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "p.db")
	seedStore(t, db)
	out, _, err := runProfile(t, "check", "--db", db, "-o", "json")
	var chk struct {
		OK       bool `json:"ok"`
		Profiles int  `json:"profiles"`
	}
	if err != nil || json.Unmarshal([]byte(out), &chk) != nil || !chk.OK || chk.Profiles != 4 {
		t.Fatalf("profile check -o json: %v %+v\n%s", err, chk, out)
	}
	out, _, err = runProfile(t, "export", "--db", db, "-o", "json")
	if err != nil || !json.Valid([]byte(out)) || strings.Count(out, `"workload"`) != 4 {
		t.Fatalf("profile export -o json: %v\n%s", err, out)
	}
	if out2, _, err := runProfile(t, "export", "--db", db, "--json"); err != nil || out2 != out {
		t.Fatalf("profile export --json differs from -o json: %v", err)
	}
	file := filepath.Join(dir, "b.json.gz")
	if _, _, err := runBundle(t, "export", "--db", db, "--root", orinTree(t, "R36.4.3"), "--out", file); err != nil {
		t.Fatal(err)
	}
	out, _, err = runBundle(t, "inspect", file, "-o", "json")
	var bs struct {
		Profiles int    `json:"profiles"`
		Checksum string `json:"checksum"`
	}
	if err != nil || json.Unmarshal([]byte(out), &bs) != nil || bs.Profiles != 4 || bs.Checksum == "" {
		t.Fatalf("bundle inspect -o json: %v %+v\n%s", err, bs, out)
	}
	if !strings.Contains(out, `"profiles_by_workload"`) {
		t.Fatalf("bundle inspect -o json lacks the per-workload counts:\n%s", out)
	}
}
