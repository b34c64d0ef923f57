package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTool is the go command on PATH (go test puts the go that runs it first there), else
// $GOROOT/bin/go.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p, err := exec.LookPath(filepath.Join(root, "bin", "go")); err == nil {
			return p
		}
	}
	t.Skip("no go tool on PATH or in $GOROOT/bin: cannot list the packages' dependencies (run the test with go test)")
	return ""
}

// deps lists every package pkg links (go list -deps -json), pkg included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-deps", "-json=ImportPath", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	var paths []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -deps %s: decode: %v", pkg, err)
		}
		paths = append(paths, p.ImportPath)
	}
	if len(paths) == 0 {
		t.Fatalf("go list -deps %s listed nothing", pkg)
	}
	return paths
}

const module = "github.com/fulcrum-edge/fulcrum/"

// The wire types and the Go client are a leaf: a program that only talks to fulcrumd
// links neither the scheduler, the profile store (bbolt) nor the planner's numerics
// (gonum) — as tailscale's deptest holds its packages. docs/api.md "Go client".
func TestWireAndClientAreLeaves(t *testing.T) {
	forbidden := []string{
		module + "fulcrum/sched",
		module + "profiler/store",
		module + "fulcrum/plan",
		module + "fulcrum/control",
		module + "fulcrum/api/server",
		"go.etcd.io/bbolt",
		"gonum.org/",
	}
	for _, pkg := range []string{module + "fulcrum/api", module + "fulcrum/api/client"} {
		ds := deps(t, pkg)
		for _, f := range forbidden {
			for _, d := range ds {
				if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
					t.Errorf("%s links %s (%d packages in all): keep the wire and the client free of fulcrumd's internals (move what needs it to fulcrum/api/server)", pkg, d, len(ds))
					break
				}
			}
		}
	}
}

// The dependency points from the API server to the controller, never back: the
// controller names nothing of the control API.
func TestControlImportsNoAPI(t *testing.T) {
	for _, d := range deps(t, module+"fulcrum/control") {
		if d == module+"fulcrum/api" || strings.HasPrefix(d, module+"fulcrum/api/") {
			t.Errorf("fulcrum/control links %s: the API server adapts the controller, not the other way round", d)
		}
	}
}
