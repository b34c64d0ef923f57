#!/usr/bin/env bash
# The main job on a simulated AGX Orin 64GB: the board layer, a profiling campaign, the
# searchers against the optimum, and fulcrumd interleaving a training and an inference
# worker (compared with the two sharing the GPU natively). Everything runs in a temp
# directory that is removed at the end; nothing outside it is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
CTL="$BIN/fulcrumctl"
D=$(mktemp -d /tmp/fulcrum-demo.XXXXXX)
BOARD=agx-orin-64gb
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$D"
}
trap cleanup EXIT INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*" | sed "s|$BIN/||g; s|$D|\$DEMO|g"; "$@"; }

say "1. A simulated $BOARD: the real sysfs layout in $D/board, kept live by a physics loop"
"$CTL" sim board --dir "$D/board" --board "$BOARD" >"$D/sim.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$D/board/run/fulcrum-sim/board.json" ] && break; sleep 0.1; done
sleep 0.3
echo "fulcrumctl reads it exactly as it reads a Jetson, through --root:"
run "$CTL" board info --root "$D/board"

say "2. Apply a power mode (8 cores at 1.73 GHz, GPU 612 MHz) and put the board back"
run "$CTL" board apply --root "$D/board" --state-dir "$D/state" --cores 8 --cpu-khz 1728000 --gpu-hz 612000000 --emc-hz 3199000000
run "$CTL" board restore --root "$D/board" --state-dir "$D/state"

say "3. Profile resnet18 training at the board's nvpmodel presets (stored in bbolt; rerunning resumes)"
run "$CTL" profile run --root "$D/board" --db "$D/profiles.db" --workload resnet18-train --modes presets --max-samples 8 --warmup-time 300ms
run "$CTL" profile ls --db "$D/profiles.db"

say "4. Which mode should the board run? Score the searchers against the exhaustive optimum"
echo "The simulator's noise-free truth over 7,656 modes, then every budget of a small sweep:"
run "$CTL" sim truth --board "$BOARD" --workloads resnet18-train,bert-small-train,mobilenetv3-infer,resnet50-infer --out "$D/truth.csv"
run "$CTL" bench --truth "$D/truth.csv" --rates 10,30 --latency 100ms,200ms --power 20W,30W,40W \
	--searchers oracle,gmd,als,preset,maxn,random-15
echo "within %: answers that meet both budgets on the true (noise-free) board; mean opt: training"
echo "throughput as a fraction of the best possible; profiles: power modes each searcher had to measure."
