#!/bin/sh
# The real-PyTorch end-to-end test's managed mode over several seeds (make
# test-pytorch-seeds; not in CI: ~1 min a seed). Prints one line per seed — p99 against
# the budget, the fraction of late requests against the 1 % the p99 allows, training
# against its target — and keeps each run's turn times in $OUT (fit_tail.py reads them).
# Usage: seeds.sh BIN "1 2 3" ROOM_MAX_FRAC [OUT]
set -eu
bin=$1 seeds=$2 room=$3 out=${4:-$(mktemp -d /tmp/fulcrum-seeds.XXXXXX)}
mkdir -p "$out"
for s in $seeds; do
	python3 scripts/pytorch/e2e.py --bin "$bin" --modes managed --seed "$s" --room-max-frac "$room" \
		--dump-turns "$out/turns.s$s" >"$out/report.s$s.md" 2>"$out/log.s$s.txt" || echo "seed $s: e2e failed (see $out/log.s$s.txt)"
	grep -h '^| managed' "$out/report.s$s.md" | sed "s/^/seed $s /" || true
done
echo "reports and turn times in $out"
