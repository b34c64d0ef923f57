#!/usr/bin/env bash
# bench-golden.sh BIN OUTDIR — a small fixed set of one-shot benches whose outputs a
# refactor of the model, the decision, the searchers or the bench must leave byte-identical.
#
# BIN is a fulcrumctl binary; OUTDIR receives the truth table and one JSON file per bench
# (wall times masked). Run it with the binary before and after a change and compare:
#
#   git stash; go build -o /tmp/before/ ./cmd/fulcrumctl; git stash pop
#   go build -o /tmp/after/ ./cmd/fulcrumctl
#   scripts/bench-golden.sh /tmp/before/fulcrumctl /tmp/golden-before
#   scripts/bench-golden.sh /tmp/after/fulcrumctl /tmp/golden-after
#   diff -r /tmp/golden-before /tmp/golden-after   # must print nothing
#
# The set: the pair, --streams 2 and --jobs 2, each with and without --micro, seeds 1
# and 2, on a small agx-orin-64gb table (one core level, 2 training + 3 inference
# workloads) with searchers oracle, oracle-m3, gmd and als. It takes a few minutes on
# two busy cores.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BIN OUTDIR  (BIN: a fulcrumctl binary; OUTDIR: where the outputs go)" >&2
	exit 2
fi
bin=$1
out=$2
if [ ! -x "$bin" ]; then
	echo "$0: $bin is not an executable: build one with go build -o DIR/ ./cmd/fulcrumctl" >&2
	exit 2
fi
mkdir -p "$out"

truth=$out/truth.csv
"$bin" sim truth --board agx-orin-64gb --cores 12 \
	--workloads resnet18-train,lstm-train,mobilenetv3-infer,resnet50-infer,yolov8n-infer \
	--out "$truth"

# Results depend only on --seed, not on --parallel (docs/benchmarks.md); wall times are
# the only figures that move from run to run, so they are masked.
mask() { sed -E 's/"wall_s": *[-0-9.eE+]+/"wall_s": "masked"/g'; }

for shape in pair streams2 jobs2; do
	case $shape in
	pair) flags=() ;;
	streams2) flags=(--streams 2) ;;
	jobs2) flags=(--jobs 2) ;;
	esac
	for micro in true false; do
		for seed in 1 2; do
			name=$shape-micro_$micro-seed$seed
			"$bin" bench --truth "$truth" "${flags[@]}" --micro="$micro" --seed "$seed" \
				--rates 5,30 --latency 40ms,300ms --power 12W,40W \
				--searchers oracle,oracle-m3,gmd,als --quiet -o json |
				mask >"$out/$name.json"
			echo "$name: $(wc -c <"$out/$name.json") bytes" >&2
		done
	done
done
