#!/usr/bin/env bash
# Plumbing check of scripts/gpu/compare.sh on a machine without a GPU: runs it with
# stand-ins for nvidia-smi, torch and torchvision (models that sleep) and a freshly built
# fulcrumd, and checks both table rows come out with every request served. The numbers
# it prints mean nothing (no GPU, no contention); it checks that the script, workload.py,
# the Python client and fulcrumd --board none fit together.
#
#   scripts/gpu/smoke/run.sh        (about 20 s)
set -euo pipefail
cd "$(dirname "$0")/../../.."
S=scripts/gpu/smoke
T=$(mktemp -d /tmp/fgpu-smoke.XXXXXX)
trap 'rm -rf "$T"' EXIT
go build -o "$T/bin/fulcrumd" ./cmd/fulcrumd
out=$(PATH="$PWD/$S/bin:$PATH" PYTHONPATH="$PWD/$S" PYTHONDONTWRITEBYTECODE=1 BIN="$T/bin" DURATION_S=4 RATE=20 \
	timeout 300 scripts/gpu/compare.sh)
echo "$out"
for mode in managed native; do
	echo "$out" | grep -q "^| $mode | 80/80 |" || { echo "smoke: the $mode row is missing or did not serve 80/80" >&2; exit 1; }
done
echo "smoke: ok (plumbing only; the numbers above are not measurements)" >&2
