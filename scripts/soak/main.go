// Command soak is the load and soak harness of docs/reliability.md: a simulated board,
// a real fulcrumd, 10 inference workers (2,000 requests/s in total) and 2 training
// workers, all separate processes, for -minutes. Every -every it samples fulcrumd's RSS
// (/proc/PID/status), goroutines (go_goroutines on its metrics endpoint) and the recent
// inference latency p99 (control API status), and prints a table; at the end it checks
// that every request the workers sent was served (none lost or failed).
//
//	make build && go run ./scripts/soak -minutes 10 -bin bin
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fulcrum-edge/fulcrum/configs"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api"
	"github.com/fulcrum-edge/fulcrum/fulcrum/api/client"
	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon/simworker"
	"github.com/fulcrum-edge/fulcrum/internal/paths"
	"github.com/fulcrum-edge/fulcrum/scripts/internal/throwaway"
)

type options struct {
	minutes    float64
	every      time.Duration
	bin        string
	board      string
	inferN     int
	trainN     int
	totalRPS   float64
	batch      int
	infer      string
	train      string
	latencyMS  float64
	keep       bool
	metricsTCP string
}

func main() {
	var o options
	flag.Float64Var(&o.minutes, "minutes", 10, "how long to run the load")
	flag.DurationVar(&o.every, "every", 15*time.Second, "sampling period")
	flag.StringVar(&o.bin, "bin", "bin", "directory holding fulcrumd and fulcrumctl (make build)")
	flag.StringVar(&o.board, "board", "agx-orin-64gb", "catalog board to simulate")
	flag.IntVar(&o.inferN, "infer-workers", 10, "inference worker processes")
	flag.IntVar(&o.trainN, "train-workers", 2, "training worker processes")
	flag.Float64Var(&o.totalRPS, "rps", 2000, "total inference arrival rate, requests/s (split evenly)")
	flag.IntVar(&o.batch, "batch", 32, "inference batch size; at 200 req/s per worker a small batch cannot keep up")
	flag.StringVar(&o.infer, "infer-workload", "soak-infer", "inference workload model (soak-infer: see soakModel)")
	flag.StringVar(&o.train, "train-workload", "resnet18-train", "training workload model")
	flag.Float64Var(&o.latencyMS, "latency-ms", 250, "latency budget (ms, p99)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, trees)")
	flag.StringVar(&o.metricsTCP, "metrics", "127.0.0.1:0", "fulcrumd metrics address (port 0: pick a free one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func freePort(addr string) (string, error) {
	if !strings.HasSuffix(addr, ":0") {
		return addr, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func run(ctx context.Context, o options) error {
	fulcrumd, err := filepath.Abs(filepath.Join(o.bin, "fulcrumd"))
	if err != nil {
		return err
	}
	fulcrumctl := filepath.Join(filepath.Dir(fulcrumd), "fulcrumctl")
	for _, b := range []string{fulcrumd, fulcrumctl} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (run make build first, or pass -bin)", err)
		}
	}
	dir, err := os.MkdirTemp("", "fulcrum-soak-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("# work directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	boardDir, runDir, stateDir := filepath.Join(dir, "board"), filepath.Join(dir, "run"), filepath.Join(dir, "state")
	modelsDir := filepath.Join(dir, "models")
	if err := writeModels(modelsDir); err != nil {
		return err
	}
	logf := func(name string) *os.File {
		f, _ := os.Create(filepath.Join(dir, name+".log"))
		return f
	}
	var procs []*exec.Cmd
	defer func() { // whatever happens, leave no process behind
		for _, p := range procs {
			if p.ProcessState == nil {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
		}
	}()
	start := func(name string, stdout io.Writer, bin string, args ...string) (*exec.Cmd, error) {
		c := exec.Command(bin, args...)
		lf := logf(name)
		c.Stderr = lf
		c.Stdout = lf
		if stdout != nil {
			c.Stdout = stdout
		}
		if err := c.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		procs = append(procs, c)
		return c, nil
	}

	if _, err := start("board", nil, fulcrumctl, "sim", "board", "--dir", boardDir, "--board", o.board, "--models", modelsDir); err != nil {
		return err
	}
	if err := waitFor(ctx, 20*time.Second, func() bool { _, err := os.Stat(filepath.Join(boardDir, "sys")); return err == nil }); err != nil {
		return fmt.Errorf("simulated board tree never appeared in %s: %w", boardDir, err)
	}
	time.Sleep(500 * time.Millisecond)
	metricsAddr, err := freePort(o.metricsTCP)
	if err != nil {
		return err
	}
	d := exec.Command(fulcrumd, "--board", "sim:"+o.board, "--board-root", boardDir, "--runtime-dir", runDir,
		"--state-dir", stateDir, "--latency", strconv.FormatFloat(o.latencyMS, 'f', -1, 64)+"ms", "--rate", "auto")
	d.Env = append(os.Environ(), "FULCRUM_METRICS_LISTEN="+metricsAddr)
	d.Stderr, d.Stdout = logf("fulcrumd"), nil
	if err := d.Start(); err != nil {
		return fmt.Errorf("start fulcrumd: %w", err)
	}
	procs = append(procs, d)
	sock := filepath.Join(runDir, paths.WorkerSocketName)
	ctl := client.New(filepath.Join(runDir, api.SocketName))
	defer ctl.Close()
	if err := waitFor(ctx, 20*time.Second, func() bool { _, err := ctl.Status(ctx); return err == nil }); err != nil {
		return fmt.Errorf("fulcrumd never answered (see %s/fulcrumd.log): %w", dir, err)
	}

	dur := time.Duration(o.minutes * float64(time.Minute))
	type worker struct {
		cmd *exec.Cmd
		out *strings.Builder
	}
	var infer, train []worker
	perRPS := o.totalRPS / float64(o.inferN)
	for i := 0; i < o.inferN; i++ {
		var out strings.Builder
		c, err := start(fmt.Sprintf("infer%d", i), &out, fulcrumctl, "sim", "worker", "--role", "infer", "--workload", o.infer, "--models", modelsDir,
			"--root", boardDir, "--worker-socket", sock, "--rate", strconv.FormatFloat(perRPS, 'f', -1, 64), "--batch", strconv.Itoa(o.batch),
			"--requests", strconv.Itoa(int(perRPS*dur.Seconds())), "--latency", time.Duration(o.latencyMS*float64(time.Millisecond)).String(), "--seed", strconv.Itoa(100+i))
		if err != nil {
			return err
		}
		infer = append(infer, worker{c, &out})
	}
	for i := 0; i < o.trainN; i++ {
		var out strings.Builder
		c, err := start(fmt.Sprintf("train%d", i), &out, fulcrumctl, "sim", "worker", "--role", "train", "--workload", o.train, "--models", modelsDir,
			"--root", boardDir, "--worker-socket", sock, "--duration", dur.String(), "--seed", strconv.Itoa(200+i))
		if err != nil {
			return err
		}
		train = append(train, worker{c, &out})
	}
	fmt.Printf("# soak: %d inference workers (%s, batch %d) at %.0f req/s total, %d training (%s), %v, board %s\n",
		o.inferN, o.infer, o.batch, o.totalRPS, o.trainN, o.train, dur, o.board)
	fmt.Printf("%8s %9s %11s %9s %9s %9s %8s %10s %8s\n", "t_s", "rss_mib", "goroutines", "requests", "served", "failed", "p99_ms", "train_mb", "workers")
	begin := time.Now()
	var firstRSS, lastRSS float64
	var firstG, lastG, maxG int
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	sample := func() error {
		rss, err := throwaway.RSSMiB(d.Process.Pid)
		if err != nil {
			return fmt.Errorf("read fulcrumd's RSS: %w (did it exit?)", err)
		}
		g, err := goroutines(ctx, metricsAddr)
		if err != nil {
			return err
		}
		st, err := ctl.Status(ctx)
		if err != nil {
			return fmt.Errorf("fulcrumd status: %w", err)
		}
		var req, served, failed, mb uint64
		var p99 float64
		for _, w := range st.Workloads {
			req += w.Requests
			served += w.Served
			failed += w.Failed
			mb += w.Minibatches
			p99 = max(p99, w.LatencyRecent.P99MS)
		}
		fmt.Printf("%8.0f %9.1f %11d %9d %9d %9d %8.1f %10d %8d\n", time.Since(begin).Seconds(), rss, g, req, served, failed, p99, mb, len(st.Workers))
		if firstG == 0 {
			firstRSS, firstG = rss, g
		}
		lastRSS, lastG, maxG = rss, g, max(maxG, g)
		return nil
	}
	if err := sample(); err != nil {
		return err
	}
	deadline := time.After(dur + 5*time.Second)
	for running := true; running; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			running = false
		case <-tick.C:
			if err := sample(); err != nil {
				return err
			}
			if time.Since(begin) > dur+5*time.Second {
				running = false
			}
		}
	}
	// Inference workers stop after rate × duration requests, once every one is answered
	// (a worker stopped by --duration would leave its queue unserved); training workers
	// stop after -minutes. Each prints its report.
	var sent, got, unserved, misses int
	var worstP99 float64
	var problems []string
	for i, w := range append(infer, train...) {
		err := waitExit(w.cmd, 60*time.Second)
		if err != nil {
			problems = append(problems, fmt.Sprintf("worker %d: %v (see %s)", i, err, dir))
			continue
		}
		var r simworker.Report
		if err := json.Unmarshal([]byte(lastJSON(w.out.String())), &r); err != nil {
			problems = append(problems, fmt.Sprintf("worker %d report: %v", i, err))
			continue
		}
		if r.Role == "infer" {
			sent += r.Requests
			got += r.Served
			unserved += r.Unserved
			misses += r.DeadlineMisses
			worstP99 = max(worstP99, r.LatencyP99MS)
		}
	}
	time.Sleep(time.Second) // let fulcrumd see the last disconnects
	_ = sample()
	st, err := ctl.Status(ctx)
	if err != nil {
		return err
	}
	var dFailed uint64
	for _, w := range st.Workloads {
		dFailed += w.Failed
	}
	fmt.Printf("\n# workers: %d requests sent, %d served, %d unserved, %d deadline misses, worst worker p99 %.1f ms\n", sent, got, unserved, misses, worstP99)
	fmt.Printf("# fulcrumd: %d failed requests; RSS %.1f -> %.1f MiB; goroutines %d -> %d (max %d)\n", dFailed, firstRSS, lastRSS, firstG, lastG, maxG)
	d.Process.Signal(syscall.SIGTERM)
	if err := waitExit(d, 20*time.Second); err != nil {
		problems = append(problems, fmt.Sprintf("fulcrumd shutdown: %v", err))
	}
	if sent == 0 || got != sent || unserved != 0 || dFailed != 0 {
		problems = append(problems, fmt.Sprintf("lost requests: %d sent, %d served, %d unserved, %d failed", sent, got, unserved, dFailed))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("# PASS: zero lost requests")
	return nil
}

// soakModel is a light inference model (MobileNetV3-Small-sized, frames decoded and
// resized by data-loader workers) added to the built-in ones: at 2,000 requests/s the
// built-in mobilenetv3-infer, whose 0.35 ms per frame of inline CPU preprocessing
// alone caps one GPU at about 1,100 requests/s, cannot keep up on any simulated board,
// and the soak tests fulcrumd, not the model.
const soakModel = `name: soak-infer
role: infer
description: MobileNetV3-Small-sized, 224x224, FP16, prefetched input (soak harness)
character: launch-bound
batches: [1, 2, 4, 8, 16, 32, 48, 64]
gpu:
  gflop_fixed: 0.0
  gflop_per_sample: 0.12
  efficiency: 0.16
  mb_fixed: 5
  mb_per_sample: 8
  activity: 0.7
host:
  kernels: 120
  launch_us: 20
  serial_ms: 0.4
  data_ms_per_sample: 0.35
  prefetch: true
noise_sigma: 0.03
power_noise_sigma: 0.01
`

// writeModels writes the built-in workload models and soakModel into dir (fulcrumctl
// sim --models takes a directory that replaces the built-in set).
func writeModels(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := fs.ReadDir(configs.FS, "workloads")
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := fs.ReadFile(configs.FS, "workloads/"+e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "soak-infer.yaml"), []byte(soakModel), 0o644)
}

func waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	end := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(end) {
			return fmt.Errorf("gave up after %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func waitExit(c *exec.Cmd, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		_ = c.Process.Kill()
		<-done
		return fmt.Errorf("still running after %v; killed", limit)
	}
}

func lastJSON(s string) string {
	i := strings.LastIndex(s, "\n{")
	if i < 0 {
		return strings.TrimSpace(s)
	}
	return strings.TrimSpace(s[i:])
}

func goroutines(ctx context.Context, addr string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("fulcrumd metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no go_goroutines on fulcrumd's /metrics")
}
