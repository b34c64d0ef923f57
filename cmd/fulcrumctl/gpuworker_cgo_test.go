//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-edge/fulcrum/cuda"
	"github.com/fulcrum-edge/fulcrum/cuda/cudatest"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
)

func TestGPUCommandsWithoutLibcuda(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	for _, args := range [][]string{
		{"info", "--libcuda", missing},
		{"worker", "--role", "train", "--steps", "1", "--libcuda", missing},
	} {
		cmd := newGPUCmd()
		cmd.SetArgs(args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "sim worker") {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

// TestGPUCommandsOnFakeDriver runs the commands end to end on a gcc-built fake
// libcuda (package cudatest): load, init, properties, context, PTX module, calibration
// and launches all go through the real loader.
func TestGPUCommandsOnFakeDriver(t *testing.T) {
	lib := cudatest.Build(t, cudatest.Source)
	run := func(args ...string) (string, error) {
		cmd := newGPUCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append(args, "--libcuda", lib))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		DriverCUDAVersion int                `json:"driver_cuda_version"`
		Devices           []cuda.DeviceProps `json:"devices"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.DriverCUDAVersion != 12060 || len(info.Devices) != 1 ||
		!info.Devices[0].Integrated || info.Devices[0].SM() != "sm_87" {
		t.Fatalf("info %q: %+v %v", out, info, err)
	}
	for _, k := range []string{"compute", "memory"} {
		out, err = run("worker", "--role", "train", "--steps", "3", "--train-ms", "2", "--kernel", k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		var rep simworker.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Batches != 3 || rep.Samples != 96 || rep.Workload != "gpu-"+k+"-train" {
			t.Fatalf("%s: report %q: %+v %v", k, out, rep, err)
		}
	}
	if _, err := run("worker", "--role", "train", "--steps", "1", "--device", "2"); err == nil || !strings.Contains(err.Error(), "device 2 does not exist") {
		t.Fatalf("missing device: %v", err)
	}
	noDev := cudatest.Build(t, cudatest.Source, "-DNO_DEVICE")
	cmd := newGPUCmd()
	cmd.SetArgs([]string{"info", "--libcuda", noDev})
	cmd.SetOut(&bytes.Buffer{})
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
		t.Fatalf("no device: %v", err)
	}
}
