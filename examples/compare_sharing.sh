#!/usr/bin/env bash
# Managed vs unmanaged GPU sharing on a simulated AGX Orin (docs/runtime.md).
#
# Runs the same training + inference pair twice on a simulated board, as real processes:
#   managed:   both workers under fulcrumd (one minibatch at a time, deadline-aware)
#   unmanaged: the workers alone; the simulator time-slices the GPU between them as the
#              CUDA driver does between two processes
# and prints each worker's report side by side.
#
#   make build && examples/compare_sharing.sh
# Knobs (environment): BIN, BOARD, TRAIN, INFER, RATE, REQUESTS, BATCH, LATENCY_MS, SEED.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
BOARD=${BOARD:-agx-orin-64gb}
TRAIN=${TRAIN:-resnet18-train}
INFER=${INFER:-resnet50-infer}
RATE=${RATE:-25}
REQUESTS=${REQUESTS:-300}
BATCH=${BATCH:-4}
LATENCY_MS=${LATENCY_MS:-250}
SEED=${SEED:-1}

W=$(mktemp -d /tmp/fcmp.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT

wait_for() { # path, what
	for _ in $(seq 1 200); do [ -e "$1" ] && return 0; sleep 0.05; done
	echo "timed out waiting for $2 ($1)" >&2
	exit 1
}

"$BIN/fulcrumctl" sim board --dir "$W/board" --board "$BOARD" >"$W/board.log" 2>&1 &
pids+=($!)
wait_for "$W/board/run/fulcrum-sim/board.json" "the simulated board"
sleep 0.3

run_pair() { # name, extra worker args...
	local name=$1
	shift
	"$BIN/fulcrumctl" sim worker --role train --workload "$TRAIN" --root "$W/board" --seed "$SEED" "$@" \
		>"$W/$name-train.json" 2>"$W/$name-train.log" &
	local tp=$!
	"$BIN/fulcrumctl" sim worker --role infer --workload "$INFER" --root "$W/board" --batch "$BATCH" \
		--rate "$RATE" --requests "$REQUESTS" --latency "${LATENCY_MS}ms" --seed "$((SEED + 1))" "$@" \
		>"$W/$name-infer.json" 2>"$W/$name-infer.log"
	kill -INT "$tp"
	wait "$tp" || true
}

echo "managed: fulcrumd + $TRAIN + $INFER (batch $BATCH, $RATE req/s, budget ${LATENCY_MS} ms)" >&2
# --board none: fulcrumd schedules the GPU but leaves the clocks alone. With the board
# (sim:$BOARD) its controller would first search power modes live (pausing training
# while it measures each one, ~10 s) and then change the clocks, so the comparison would
# measure the search, not the sharing.
"$BIN/fulcrumd" --runtime-dir "$W/run" --state-dir "$W/state" --board none \
	--latency "${LATENCY_MS}ms" --log-level warn >"$W/fulcrumd.log" 2>&1 &
fpid=$!
pids+=($fpid)
wait_for "$W/run/worker.sock" "fulcrumd's socket"
run_pair managed --worker-socket "$W/run/worker.sock"
kill -TERM "$fpid"
wait "$fpid" || true

echo "unmanaged: the same workers time-sliced by the (simulated) driver" >&2
run_pair unmanaged

python3 - "$W" "$LATENCY_MS" <<'PY'
import json, sys
w, budget = sys.argv[1], sys.argv[2]
rows = []
for mode in ("managed", "unmanaged"):
    t = json.load(open(f"{w}/{mode}-train.json"))
    i = json.load(open(f"{w}/{mode}-infer.json"))
    rows.append((mode, i["served"], i["requests"], i.get("latency_p50_ms", 0), i.get("latency_p99_ms", 0),
                 i.get("latency_max_ms", 0), i.get("deadline_misses", 0), t["throughput_samples_per_s"]))
print(f"| sharing | served | p50 ms | p99 ms | max ms | misses (> {budget} ms) | training samples/s |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for m, s, n, p50, p99, mx, miss, thr in rows:
    print(f"| {m} | {s}/{n} | {p50:.1f} | {p99:.1f} | {mx:.1f} | {miss} | {thr:.1f} |")
PY
