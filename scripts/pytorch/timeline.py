#!/usr/bin/env python3
"""Where late requests spent their time: reads the timelines `e2e.py --timeline PREFIX`
writes (PREFIX.managed.json, PREFIX.unmanaged.json) and prints, per file,

- the late requests (over the budget) grouped into episodes (late requests sent less than
  a second apart), with what ran during each: server batches (how many, the longest),
  training minibatches (how many, the longest);
- for all late requests together, how their waiting time divides: inside a server batch,
  inside a training minibatch and no batch (the GPU, or the core, busy with training),
  or inside neither (a stall outside both workers' timed work: a cold shape's set-up
  before the batch's clock starts, the HTTP server, the GIL, the scheduler's grant);
- the longest server batches and training minibatches.

Usage: python3 scripts/pytorch/timeline.py FILE.json [FILE.json ...]
Standard library only.
"""
import json
import sys


def covered(intervals, lo, hi):
    """Seconds of [lo, hi] inside the union of intervals (sorted (start, end) pairs)."""
    total, cur = 0.0, lo
    for s, e in intervals:
        if e <= cur:
            continue
        if s >= hi:
            break
        s = max(s, cur)
        e = min(e, hi)
        if e > s:
            total += e - s
            cur = e
    return total


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def intersect(a, b):
    """The overlaps of two sorted, disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def quantile(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(-(-q * len(v) // 1)) - 1))]


def summarise(d):
    budget = d["budget_ms"]
    reqs = sorted(d["requests"])
    batches = [(s, s + ms / 1000, n, ms) for s, n, ms in d["batches"]]
    train = [(s, s + ms / 1000, ms) for s, ms in d["train"]]
    serve_u = union([(s, e) for s, e, _, _ in batches])
    train_u = union([(s, e) for s, e, _ in train])
    lat = [ms for _, ms, st in reqs if st == 200]
    late = [(t, ms) for t, ms, st in reqs if st != 200 or ms > budget]
    out = ["{} on {} (seed {}): {} requests, {} late (> {} ms, {:.1%}); p50 {:.0f} ms, p99 {:.0f} ms, max {:.0f} ms"
           .format(d["mode"], d.get("device", "?"), d.get("seed"), len(reqs), len(late), budget, len(late) / max(1, len(reqs)),
                   quantile(lat, 0.5), quantile(lat, 0.99), max(lat or [float("nan")]))]
    out.append("  server batches: {} (ms p50 {:.1f}, p99 {:.1f}, max {:.1f}); training minibatches: {} (ms p50 {:.1f}, "
               "p99 {:.1f}, max {:.1f})".format(
                   len(batches), quantile([b[3] for b in batches], 0.5), quantile([b[3] for b in batches], 0.99),
                   max([b[3] for b in batches] or [float("nan")]), len(train), quantile([x[2] for x in train], 0.5),
                   quantile([x[2] for x in train], 0.99), max([x[2] for x in train] or [float("nan")])))
    if late:
        wait = in_batch = in_train = 0.0
        both_u = union(intersect(serve_u, train_u))
        for t, ms in late:
            hi = t + ms / 1000
            b = covered(serve_u, t, hi)
            tr_only = covered(train_u, t, hi) - covered(both_u, t, hi)  # training with no server batch
            wait += hi - t
            in_batch += b
            in_train += tr_only
        out.append("  late requests' waiting: {:.0%} inside server batches, {:.0%} inside training with no batch, "
                   "{:.0%} inside neither".format(in_batch / wait, in_train / wait, max(0.0, 1 - (in_batch + in_train) / wait)))
        episodes = []
        for t, ms in late:
            if episodes and t - episodes[-1]["last"] < 1.0:
                e = episodes[-1]
                e["last"], e["n"], e["max"], e["end"] = t, e["n"] + 1, max(e["max"], ms), max(e["end"], t + ms / 1000)
            else:
                episodes.append({"first": t, "last": t, "n": 1, "max": ms, "end": t + ms / 1000})
        out.append("  {} episode(s) of late requests:".format(len(episodes)))
        for e in episodes[:12]:
            lo, hi = e["first"], e["end"]
            bs = [b for b in batches if b[1] > lo and b[0] < hi]
            ts = [x for x in train if x[1] > lo and x[0] < hi]
            idle = hi - lo - covered(union(serve_u + train_u), lo, hi)
            out.append("    t {:7.2f}–{:7.2f} s: {:3d} late, max {:6.0f} ms; {} batches (longest {:.0f} ms, sizes {}), "
                       "{} minibatches (longest {:.0f} ms), {:.0f} ms with neither running".format(
                           lo, hi, e["n"], e["max"], len(bs), max([b[3] for b in bs] or [0]),
                           sorted({b[2] for b in bs}), len(ts), max([x[2] for x in ts] or [0]), idle * 1000))
        if len(episodes) > 12:
            out.append("    … {} more".format(len(episodes) - 12))
    for name, rows in (("server batches", sorted(batches, key=lambda b: -b[3])[:5]),
                       ("training minibatches", sorted(train, key=lambda x: -x[2])[:5])):
        out.append("  longest {}: {}".format(name, ", ".join(
            "{:.0f} ms at t {:.2f} s{}".format(r[-1], r[0], " (size {})".format(r[2]) if len(r) == 4 else "")
            for r in rows)))
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        with open(p) as f:
            print(summarise(json.load(f)))


if __name__ == "__main__":
    main()
