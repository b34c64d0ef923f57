#!/usr/bin/env python3
"""How well does a per-mode fit from two training sizes predict the others? (issue 32)

Reads a ground-truth CSV with micro_batch rows (fulcrumctl sim truth --out FILE) and, for
every training workload and mode, fits the turn time and power from the minibatch B_T and
the smallest micro-batch (linear in the batch, and a power law), then compares the fit's
prediction at every intermediate micro-batch size with the table's value; and the live
profiler's prediction of a size from the line through the two next smaller sizes at the
same mode ("extrap").

    bin/fulcrumctl sim truth --board agx-orin-64gb --out /tmp/agx.csv
    python3 scripts/micro_fit_check.py /tmp/agx.csv
"""
import collections
import csv
import math
import sys


def main(path):
    d = collections.defaultdict(dict)
    for r in csv.DictReader(open(path)):
        if r["role"] != "train":
            continue
        key = (r["workload"], r["cores"], r["cpu_khz"], r["gpu_hz"], r["emc_hz"])
        size = int(r.get("micro_batch") or 0) or int(r["batch"])
        d[key][size] = (float(r["time_ms"]), float(r["power_mw"]))

    def lin(v, s, B, b):
        (tB, pB), (ts, ps) = v[B], v[s]
        return ts + (tB - ts) * (b - s) / (B - s), ps + (pB - ps) * (b - s) / (B - s)

    def loglog(v, s, B, b):
        (tB, pB), (ts, ps) = v[B], v[s]
        a = math.log(b / s) / math.log(B / s)
        return ts * (tB / ts) ** a, ps * (pB / ps) ** a

    def stats(xs):
        xs = sorted(xs)
        n = len(xs)
        return 100 * sum(xs) / n, 100 * xs[int(0.95 * n)], 100 * xs[-1]

    for name, f in (("linear", lin), ("log-log", loglog)):
        et, ep = collections.defaultdict(list), collections.defaultdict(list)
        for key, v in d.items():
            sizes = sorted(v)
            if len(sizes) < 3:
                continue
            B, s = sizes[-1], sizes[0]
            for b in sizes[1:-1]:
                t, p = f(v, s, B, b)
                for k in (key[0], "all"):
                    et[k].append(abs(t / v[b][0] - 1))
                    ep[k].append(abs(p / v[b][1] - 1))
        for k in sorted(et):
            print("%-8s %-18s time |err| mean %5.2f%% p95 %5.2f%% max %5.2f%%   power mean %5.2f%% p95 %5.2f%% max %5.2f%%"
                  % ((name, k) + stats(et[k]) + stats(ep[k])))

    # The live profiler's prediction (fulcrum/control/livemicro.go predictTurn): a size's
    # turn from the line through the two next smaller sizes measured at the same mode.
    # Used only to leave out a size over the latency budget's room (when the prediction
    # × 0.9 is over it), never claimed: what matters is that it seldom predicts above
    # the turn ("above >1/0.9": a size the rule could wrongly leave out).
    errs, above, below = collections.defaultdict(list), collections.Counter(), collections.Counter()
    for key, v in d.items():
        sizes = sorted(v)
        for a, b, c in zip(sizes, sizes[1:], sizes[2:]):
            pred = v[b][0] + (v[b][0] - v[a][0]) * (c - b) / (b - a)
            rel = pred / v[c][0] - 1
            for k in (key[0], "all"):
                errs[k].append(abs(rel))
                above[k] += 0.9 * (1 + rel) > 1
                below[k] += rel < -0.1
    for k in sorted(errs):
        n = len(errs[k])
        print("%-8s %-18s time |err| mean %5.2f%% p95 %5.2f%% max %5.2f%%   above >1/0.9: %.2f%%, below by >10%%: %.2f%% of %d"
              % (("extrap", k) + stats(errs[k]) + (100 * above[k] / n, 100 * below[k] / n, n)))

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/agx.csv")
