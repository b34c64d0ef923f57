#!/usr/bin/env python3
"""Per-sample cost of a training micro-batch on the CPU (issue 32).

Runs ResNet-18 (torchvision, 10 classes, 32x32 inputs: the simulator's resnet18-train)
on one CPU thread, one minibatch of 32 samples as k micro-batches of 32/k with gradient
accumulation (loss scaled by 1/k, one optimizer step per minibatch), for k = 1, 2, 4, 8.
Prints, per micro-batch size, the median time of one micro-batch turn (forward + backward;
the optimizer step counted in the last turn), the per-sample cost and its ratio to batch
32's. Times are the thread's CPU time (time.thread_time: with one intra-op thread every
kernel runs on the calling thread), so a host shared with other work slows the wall clock
but not the numbers much; the wall-clock medians are printed beside them. docs/simulator.md "Micro-batches" compares these ratios with the simulator's.

    /usr/bin/python3 scripts/pytorch/microbatch_cost.py --reps 5
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="minibatches timed per size (after one warm-up)")
    ap.add_argument("--minibatch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.minibatch, 3, 32, 32)
    y = torch.randint(0, 10, (a.minibatch,))
    sizes = [m for m in (32, 16, 8, 4) if a.minibatch % m == 0]
    turns = {m: [] for m in sizes}
    minibatches = {m: [] for m in sizes}
    walls = {m: [] for m in sizes}
    # The sizes take turns within every repetition, so that a busy spell on a shared
    # host hits them alike; medians, so that one preempted turn does not move them.
    for rep in range(a.reps + 1):
        for micro in sizes:
            k = a.minibatch // micro
            opt.zero_grad(set_to_none=True)
            t_mb = time.thread_time()
            w_mb = time.perf_counter()
            mb_turns = []
            for i in range(k):
                t0 = time.thread_time()
                xb, yb = x[i * micro:(i + 1) * micro], y[i * micro:(i + 1) * micro]
                loss = loss_fn(model(xb), yb) / k
                loss.backward()
                if i == k - 1:
                    opt.step()
                    loss.item()
                mb_turns.append(time.thread_time() - t0)
            if rep:  # the first round warms up
                turns[micro].extend(mb_turns)
                minibatches[micro].append(time.thread_time() - t_mb)
                walls[micro].append(time.perf_counter() - w_mb)
    out = []
    for micro in sizes:
        turn_ms = 1e3 * statistics.median(turns[micro])
        out.append({"micro_batch": micro, "k": a.minibatch // micro, "turn_ms": turn_ms, "per_sample_ms": turn_ms / micro,
                    "minibatch_ms": 1e3 * statistics.median(minibatches[micro]),
                    "minibatch_wall_ms": 1e3 * statistics.median(walls[micro]),
                    "turn_min_ms": 1e3 * min(turns[micro]),
                    "turn_sd_ms": 1e3 * statistics.stdev(turns[micro]) if len(turns[micro]) > 1 else 0.0})
    base = out[0]["per_sample_ms"]
    base_min = out[0]["turn_min_ms"] / out[0]["micro_batch"]
    for r in out:
        r["per_sample_ratio"] = r["per_sample_ms"] / base
        # The fastest turn: on a busy host, waiting only adds, so the minimum is the
        # least disturbed estimate.
        r["per_sample_ratio_min"] = r["turn_min_ms"] / r["micro_batch"] / base_min
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print("micro_batch k turn_cpu_ms per_sample_ms ratio_to_32 turn_min_ms ratio_min minibatch_cpu_ms minibatch_wall_ms")
    for r in out:
        print(f'{r["micro_batch"]:>11} {r["k"]:>1} {r["turn_ms"]:11.1f} {r["per_sample_ms"]:13.2f} {r["per_sample_ratio"]:11.3f} {r["turn_min_ms"]:11.1f} {r["per_sample_ratio_min"]:9.3f} {r["minibatch_ms"]:16.1f} {r["minibatch_wall_ms"]:17.1f}')


if __name__ == "__main__":
    main()
