package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/internal/testboard"
	"github.com/fulcrum-edge/fulcrum/powermode/sim"
)

func TestSimWorkerCommand(t *testing.T) {
	root := filepath.Join(t.TempDir(), "board")
	testboard.Sim(t, root, testboard.Spec(t, testboard.AGXOrin), sim.Options{})
	trace := filepath.Join(t.TempDir(), "trace.txt")
	if err := os.WriteFile(trace, []byte("0\n0.001\n0.05\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--role", "train", "--workload", "lstm-train", "--root", root, "--steps", "2"},
		{"--role", "infer", "--workload", "mobilenetv3-infer", "--root", root, "--trace", trace, "--batch", "2"},
	} {
		cmd := newSimWorkerCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var rep simworker.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v: report %q: %v", args, out.String(), err)
		}
		if rep.Managed || (rep.Role == "train" && rep.Batches != 2) || (rep.Role == "infer" && rep.Served != 3) {
			t.Fatalf("%v: report %+v", args, rep)
		}
	}
	cmd := newSimWorkerCmd()
	cmd.SetArgs([]string{"--role", "infer", "--workload", "nope", "--root", root, "--rate", "1"})
	if err := cmd.ExecuteContext(context.Background()); err == nil {
		t.Fatal("unknown workload accepted")
	}
}
