#!/usr/bin/env python3
"""Fit the simulated workers' tail model (internal/tailmodel) to real-PyTorch turn times.

Reads the PREFIX.managed.json files `e2e.py --dump-turns PREFIX` writes (several seeds),
takes each time relative to its kind's median (inference batches: to their size's
median), and fits a lognormal body (σ from the interquartile range of ln r) with a
Pareto tail beyond r = e^(2σ) (its probability the excess over the body's own, α by
Hill's estimator). Prints the parameters as tailmodel.Model JSON and a table of
measured against model quantiles (docs/runtime.md "Heavy-tailed turn times").

    python3 scripts/pytorch/fit_tail.py /tmp/turns.s*.managed.json
"""
import json
import math
import random
import statistics
import sys


def quantile(v, q):
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(-(-q * len(v) // 1)) - 1))]


def ratios(files):
    train, infer = [], []
    for f in files:
        d = json.load(open(f))
        t = d["train_ms"]
        if t:
            m = statistics.median(t)
            train += [x / m for x in t]
        by = {}
        for size, ms in d["infer_batch_ms"]:
            by.setdefault(size, []).append(ms)
        for v in by.values():
            if len(v) >= 5:
                m = statistics.median(v)
                infer += [x / m for x in v]
    return train, infer


def fit(r):
    lr = [math.log(x) for x in r]
    sigma = (quantile(lr, 0.75) - quantile(lr, 0.25)) / 1.349
    start = math.exp(2 * sigma)
    tail = [x for x in r if x > start]
    # The body alone puts 2.3 % beyond 2σ: the tail is the excess.
    prob = max(len(tail) / len(r) - 0.0228, 0.0)
    alpha = len(tail) / sum(math.log(x / start) for x in tail) if tail else 0.0
    return {"sigma": round(sigma, 3), "tail_prob": round(prob, 4), "tail_start": round(start, 3),
            "tail_alpha": round(alpha, 2), "tail_max": round(max(r) * 1.5, 2)}


def draw(m, rng):
    if m["tail_prob"] > 0 and rng.random() < m["tail_prob"]:
        return min(m["tail_start"] * (1 - rng.random()) ** (-1 / m["tail_alpha"]), m["tail_max"])
    return math.exp(m["sigma"] * rng.gauss(0, 1))


def main():
    files = sys.argv[1:]
    if not files:
        sys.exit(__doc__)
    rng = random.Random(1)
    for kind, r in zip(("training minibatch", "inference batch"), ratios(files)):
        if len(r) < 20:
            print("{}: {} times, too few to fit".format(kind, len(r)))
            continue
        m = fit(r)
        sim = [draw(m, rng) for _ in range(200000)]
        print("### {} ({} times from {} runs)\n\n`{}`\n".format(kind, len(r), len(files), json.dumps(m)))
        print("| quantile (× median) | measured | model |\n| --- | --- | --- |")
        for q in (0.5, 0.75, 0.9, 0.95, 0.99, 0.999):
            print("| p{:g} | {:.2f} | {:.2f} |".format(q * 100, quantile(r, q), quantile(sim, q)))
        print()


if __name__ == "__main__":
    main()
