#!/usr/bin/env bash
# Real-GPU comparison (issue 7): PyTorch training + inference sharing one NVIDIA GPU,
#   (a) managed:  both under fulcrumd (--board none: it schedules minibatches and never
#                 touches the GPU's clocks or power limit)
#   (b) native:   the same two processes alone; the CUDA driver time-slices the GPU
# and prints, for both, inference p50/p99/max latency, training throughput and GPU power
# (nvidia-smi --query-gpu=power.draw, read only, every 200 ms).
#
# It never changes clocks, power limits or GPU modes.
#
#   make build && scripts/gpu/compare.sh
# Needs: an NVIDIA GPU and driver (nvidia-smi), python3 with torch + torchvision (CUDA
# build), bin/fulcrumd. Knobs (environment): BIN, GPU (index), DURATION_S, RATE, BATCH,
# TRAIN_BATCH, MODEL (mobilenet_v3_large|resnet50), LATENCY_MS, SEED, OUT (keep results).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
GPU=${GPU:-0}
DURATION_S=${DURATION_S:-60}
RATE=${RATE:-30}
BATCH=${BATCH:-8}
TRAIN_BATCH=${TRAIN_BATCH:-32}
MODEL=${MODEL:-mobilenet_v3_large}
LATENCY_MS=${LATENCY_MS:-100}
SEED=${SEED:-1}
REQUESTS=$(python3 -c "print(max(1, int(float('$RATE') * float('$DURATION_S'))))")

die() { echo "compare.sh: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs an NVIDIA GPU and driver (for a simulated board use examples/compare_sharing.sh)"
nvidia-smi -i "$GPU" --query-gpu=name --format=csv,noheader >/dev/null 2>&1 || die "nvidia-smi cannot see GPU $GPU (nvidia-smi -L lists them)"
python3 - <<'PY' || die "python3 with a CUDA build of torch and torchvision is needed (pip install torch torchvision)"
import sys
try:
    import torch, torchvision  # noqa: F401
except ImportError as e:
    sys.exit(str(e))
sys.exit(0 if torch.cuda.is_available() else "torch.cuda.is_available() is False")
PY
[ -x "$BIN/fulcrumd" ] || die "$BIN/fulcrumd not found: run make build (or set BIN)"

W=${OUT:-$(mktemp -d /tmp/fgpu.XXXXXX)}
mkdir -p "$W"
export PYTHONPATH="$PWD/clients/python${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_VISIBLE_DEVICES="$GPU"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${OUT:-}" ] || rm -rf "$W"
}
trap cleanup EXIT

wait_for() { # path, what, seconds
	local n=$(($3 * 20))
	for _ in $(seq 1 "$n"); do [ -e "$1" ] && return 0; sleep 0.05; done
	die "timed out waiting for $2 ($1)"
}

run_pair() { # name, extra workload.py args...
	local name=$1
	shift
	rm -f "$W/$name-train.ready"
	python3 scripts/gpu/workload.py train --batch "$TRAIN_BATCH" --ready-file "$W/$name-train.ready" "$@" \
		>"$W/$name-train.json" 2>"$W/$name-train.log" &
	local tp=$!
	pids+=("$tp")
	wait_for "$W/$name-train.ready" "the training loop's warm-up (see $W/$name-train.log)" 300
	# Power is sampled while both run; read only.
	nvidia-smi -i "$GPU" --query-gpu=power.draw --format=csv,noheader,nounits -lms 200 >"$W/$name-power.csv" 2>/dev/null &
	local pp=$!
	pids+=("$pp")
	python3 scripts/gpu/workload.py infer --model "$MODEL" --batch "$BATCH" --rate "$RATE" --requests "$REQUESTS" \
		--latency-ms "$LATENCY_MS" --seed "$SEED" "$@" >"$W/$name-infer.json" 2>"$W/$name-infer.log" ||
		die "$name inference failed (see $W/$name-infer.log)"
	kill -TERM "$pp" 2>/dev/null || true
	kill -TERM "$tp" 2>/dev/null || true
	wait "$tp" || die "$name training failed (see $W/$name-train.log)"
	wait "$pp" 2>/dev/null || true
}

echo "GPU: $(nvidia-smi -i "$GPU" --query-gpu=name,driver_version,power.limit --format=csv,noheader)" >&2
echo "(a) managed: fulcrumd --board none + resnet18 training + $MODEL inference ($RATE req/s, batch ≤ $BATCH, budget ${LATENCY_MS} ms, ${DURATION_S} s)" >&2
"$BIN/fulcrumd" --runtime-dir "$W/run" --state-dir "$W/state" --board none --latency "${LATENCY_MS}ms" \
	--log-level warn >"$W/fulcrumd.log" 2>&1 &
fpid=$!
pids+=("$fpid")
wait_for "$W/run/worker.sock" "fulcrumd's worker socket (see $W/fulcrumd.log)" 10
run_pair managed --socket "$W/run/worker.sock"
kill -TERM "$fpid"
wait "$fpid" || true

echo "(b) native: the same two processes sharing the GPU through the CUDA driver" >&2
run_pair native

python3 - "$W" "$LATENCY_MS" <<'PY'
import json, sys
w, budget = sys.argv[1], sys.argv[2]

def power(path):
    vals = []
    for line in open(path):
        try:
            vals.append(float(line.strip().split(",")[0]))
        except ValueError:  # "[N/A]" or a partial last line
            pass
    if not vals:
        return "n/a", "n/a"
    return "{:.1f}".format(sum(vals) / len(vals)), "{:.1f}".format(max(vals))

print(f"| sharing | served | p50 ms | p99 ms | max ms | misses (> {budget} ms) | training samples/s | GPU power mean W | max W |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for mode in ("managed", "native"):
    t = json.load(open(f"{w}/{mode}-train.json"))
    i = json.load(open(f"{w}/{mode}-infer.json"))
    pm, px = power(f"{w}/{mode}-power.csv")
    print(f"| {mode} | {i['served']}/{i['requests']} | {i['latency_p50_ms']:.1f} | {i['latency_p99_ms']:.1f} | "
          f"{i['latency_max_ms']:.1f} | {i['deadline_misses']} | {t['throughput_samples_per_s']:.1f} | {pm} | {px} |")
PY
[ -z "${OUT:-}" ] || echo "raw results in $W" >&2
