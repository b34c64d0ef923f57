#!/usr/bin/env bash
# Every GPU-only check in one run, for a machine with an NVIDIA GPU that is lent for a few
# minutes: the gpu-tagged tests of cuda/ and powermode/nvml/, fulcrumctl gpu info,
# fulcrumd on the NVML backend (read-only) for a few seconds, the Go GPU workers managed and
# unmanaged, scripts/gpu/compare.sh (PyTorch, managed vs native) and the real-PyTorch e2e
# on CUDA. Each step has its own time limit and its own log; one failing does not stop the
# others. Read-only: nothing here changes clocks, power limits or GPU modes (nvidia-smi's
# clocks and power limit are recorded before and after to show it).
#
# Build the binaries where Go is (the GPU machine may have none):
#   make build
#   go test -c -tags gpu -o .devrun/cuda.test ./cuda/
#   go test -c -tags gpu -o .devrun/nvml.test ./powermode/nvml/
# (.devrun/ is ignored by git: with the device tool, carry it, or the test binaries stay behind)
# then, on the GPU machine:
#   scripts/gpu/check-all.sh OUTDIR        (about 5 minutes; DURATION_S sets compare.sh's)
# STEPS="cuda-test e2e-cuda" runs only the steps named (default: all); MANAGED_BOARD=nvml
# runs the managed Go workers under fulcrumd's read-only NVML board instead of --board none.
# The CUDA e2e writes a per-request timeline (OUTDIR/timeline.MODE.json) and its summary
# (scripts/pytorch/timeline.py) to OUTDIR/timeline.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${1:?usage: scripts/gpu/check-all.sh OUTDIR}
mkdir -p "$OUTDIR"
T=${T:-.devrun}
BIN=${BIN:-bin}
export BIN
DURATION_S=${DURATION_S:-40}
export PYTHONPATH="$PWD/clients/python${PYTHONPATH:+:$PYTHONPATH}"
summary="$OUTDIR/summary.txt"
: >"$summary"

step() { # name, limit_s, command...
	local name=$1 limit=$2
	shift 2
	if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
		return 0
	fi
	local t0=$SECONDS
	timeout --kill-after=10 "$limit" "$@" >"$OUTDIR/$name.txt" 2>&1
	local rc=$?
	printf '%-14s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$summary"
}

gpu_state() {
	timeout 20 nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.mem,clocks.applications.graphics,power.draw,power.limit,temperature.gpu --format=csv
}

step env 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem --format=csv; python3 -c "import torch, torchvision; print(torch.__version__, torchvision.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))"; nproc; uname -r'
gpu_state >"$OUTDIR/gpu-before.csv" 2>&1
step cuda-test 180 "$T/cuda.test" -test.v -test.count=1
step nvml-test 120 "$T/nvml.test" -test.v -test.count=1 -test.run RealGPU
step gpu-info 60 "$BIN"/fulcrumctl gpu info

# fulcrumd on the NVML backend, read-only (the default): status, then a clean stop.
nvml_daemon() {
	local w
	w=$(mktemp -d /tmp/fcheck.XXXXXX)
	"$BIN"/fulcrumd --board nvml --runtime-dir "$w/run" --state-dir "$w/state" --latency 50ms --log-level info >"$w/fulcrumd.log" 2>&1 &
	local pid=$!
	for _ in $(seq 1 100); do [ -S "$w/run/control.sock" ] && break; sleep 0.1; done
	sleep 3
	"$BIN"/fulcrumctl status --socket "$w/run/control.sock" -o json
	kill -TERM "$pid"
	wait "$pid"
	echo "fulcrumd exit: $?"
	cat "$w/fulcrumd.log"
	rm -rf "$w"
}
export -f nvml_daemon
step nvml-daemon 60 bash -c nvml_daemon

# The Go GPU workers (real kernels): managed by fulcrumd --board none, then unmanaged.
go_workers() {
	local w sock
	w=$(mktemp -d /tmp/fcheck.XXXXXX)
	echo "== managed (fulcrumd --board ${MANAGED_BOARD:-none})"
	"$BIN"/fulcrumd --board "${MANAGED_BOARD:-none}" --runtime-dir "$w/run" --state-dir "$w/state" --latency 50ms --log-level info >"$w/fulcrumd.log" 2>&1 &
	local pid=$!
	sock="$w/run/worker.sock"
	for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
	"$BIN"/fulcrumctl gpu worker --role train --worker-socket "$sock" --kernel compute --train-ms 30 --duration 25s >"$w/train-m.json" 2>"$w/train-m.log" &
	local tp=$!
	sleep 2
	"$BIN"/fulcrumctl gpu worker --role infer --worker-socket "$sock" --kernel memory --rate 50 --requests 1000 --batch 8 \
		--infer-ms 2 --infer-ms-per-sample 0.5 --latency 50ms >"$w/infer-m.json" 2>"$w/infer-m.log"
	echo "infer rc $?"
	"$BIN"/fulcrumctl status --socket "$w/run/control.sock"
	"$BIN"/fulcrumctl events --socket "$w/run/control.sock" | tail -n 30
	kill -TERM "$tp" 2>/dev/null
	wait "$tp"
	echo "train rc $?"
	cat "$w/infer-m.json" "$w/train-m.json"
	tail -n 5 "$w/infer-m.log" "$w/train-m.log"
	kill -TERM "$pid"
	wait "$pid"
	echo "fulcrumd exit: $?"
	tail -20 "$w/fulcrumd.log"
	echo "== unmanaged"
	"$BIN"/fulcrumctl gpu worker --role train --kernel compute --train-ms 30 --duration 25s >"$w/train-u.json" 2>"$w/train-u.log" &
	tp=$!
	sleep 2
	"$BIN"/fulcrumctl gpu worker --role infer --kernel memory --rate 50 --requests 1000 --batch 8 \
		--infer-ms 2 --infer-ms-per-sample 0.5 --latency 50ms >"$w/infer-u.json" 2>"$w/infer-u.log"
	echo "infer rc $?"
	kill -TERM "$tp" 2>/dev/null
	wait "$tp"
	echo "train rc $?"
	cat "$w/infer-u.json" "$w/train-u.json"
	tail -n 5 "$w/infer-u.log" "$w/train-u.log"
	rm -rf "$w"
}
export -f go_workers
step go-workers 120 bash -c go_workers

step compare 400 env DURATION_S="$DURATION_S" OUT="$OUTDIR/compare" scripts/gpu/compare.sh
step e2e-cuda 240 python3 scripts/pytorch/e2e.py --bin "$BIN" --device cuda --modes managed,unmanaged --seed 1 --requests 400 --rate 20 --keep --timeline "$OUTDIR/timeline"
step timeline 30 bash -c "python3 scripts/pytorch/timeline.py $OUTDIR/timeline.*.json | tee $OUTDIR/timeline-summary.txt"

gpu_state >"$OUTDIR/gpu-after.csv" 2>&1
echo "clocks and power limit before/after:" | tee -a "$summary"
cat "$OUTDIR/gpu-before.csv" "$OUTDIR/gpu-after.csv" | tee -a "$summary"
