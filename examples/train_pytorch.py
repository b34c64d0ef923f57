"""A PyTorch training loop under fulcrumd.

Each minibatch runs inside `client.train_step()`: it waits for fulcrumd's grant, runs,
and releases with the measured time, so inference requests are never stuck behind
training kernels. fulcrumd may also ask for a profile batch (to time this workload at a
new power mode): `on_profile` runs one synthetic minibatch of the requested size.

    PYTHONPATH=clients/python python3 examples/train_pytorch.py --socket /run/fulcrum/worker.sock

On a machine without a GPU (`--device cpu`, the default there) it runs on the CPU; small
inputs keep it quick, as the end-to-end test does (scripts/pytorch/e2e.py):

    python3 examples/train_pytorch.py --device cpu --image-size 64 --batch 8 --data random --progress
`--socket none` trains without fulcrumd (the unmanaged baseline).

`--micro-batches 4,8,16` declares micro-batch sizes (divisors of --batch): beside a
latency budget shorter than a minibatch, fulcrumd then runs each minibatch as k shorter
turns of batch/k samples (gradient accumulation: the loss scaled by 1/k, one optimizer
step per minibatch), so training goes on where it would otherwise be paused. BatchNorm
layers compute their statistics per micro-batch, which at small micro-batches are noisier
than the whole minibatch's (issue 32, docs/runtime.md).

When fulcrumd restarts (an upgrade, a watchdog) the client reconnects and registers
again; meanwhile the loop waits for it (`--while-away wait`, the default) or keeps
training without turns (`--while-away train`).
"""

import argparse
import json
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from fulcrum_client import Client  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v3_small")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default="/run/fulcrum/worker.sock", help="fulcrumd's worker socket; none: no fulcrumd")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model", choices=MODELS, default="resnet18")
    ap.add_argument("--image-size", type=int, default=224, help="square input images of this many pixels a side")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1000, help="minibatches to run; 0: until stopped")
    ap.add_argument("--data", choices=("fakedata", "random"), default="fakedata",
                    help="fakedata: torchvision FakeData through a DataLoader; random: one random batch reused "
                         "(no loader: all the process's time is the model's)")
    ap.add_argument("--loader-workers", type=int, default=4)
    ap.add_argument("--workload", default=None, help="the name fulcrumd knows the workload by (default: the model)")
    ap.add_argument("--progress", action="store_true",
                    help="print one JSON line per minibatch: step, samples, ms, t (time.monotonic()), managed")
    ap.add_argument("--micro-batches", default="",
                    help="micro-batch sizes to declare, divisors of --batch, e.g. 4,8,16 (fulcrumd picks k per minibatch)")
    ap.add_argument("--while-away", choices=("wait", "train"), default="wait",
                    help="while fulcrumd is away (restarting): wait for it, or train without turns")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device; use --device cpu")
    if args.image_size < 32 or args.batch < 1 or args.steps < 0:
        ap.error("--image-size must be ≥ 32, --batch ≥ 1, --steps ≥ 0")
    micro = [int(v) for v in args.micro_batches.split(",") if v.strip()]
    if any(m < 1 or args.batch % m for m in micro):
        ap.error("--micro-batches must be divisors of --batch")

    dev = torch.device(args.device)
    model = getattr(torchvision.models, args.model)(num_classes=10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    shape = (3, args.image_size, args.image_size)

    def batches():
        if args.data == "random":
            x, y = torch.randn(args.batch, *shape), torch.randint(0, 10, (args.batch,))
            while True:
                yield x, y
        size = args.batch * (args.steps or 1000)
        while True:
            data = torchvision.datasets.FakeData(size=size, image_size=shape, num_classes=10,
                                                 transform=torchvision.transforms.ToTensor())
            yield from torch.utils.data.DataLoader(data, batch_size=args.batch, num_workers=args.loader_workers,
                                                   pin_memory=args.device == "cuda")

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if args.device == "cuda":
            # The turn ends when the GPU is done, not when the kernels are queued.
            torch.cuda.synchronize()
        return loss

    def on_profile(batch_size):
        x = torch.randn(batch_size, *shape, device=dev)
        y = torch.randint(0, 10, (batch_size,), device=dev)
        step(x, y)

    client = None
    if args.socket != "none":
        # on_profile: fulcrumd times this workload at new power modes with real batches.
        client = Client(args.socket, role="train", workload=args.workload or args.model, batch=args.batch,
                        on_profile=on_profile, train_while_away=args.while_away == "train",
                        micro_batches=micro or None)
    for i, (x, y) in enumerate(batches()):
        if args.steps and i >= args.steps:
            break
        # Copy the inputs before taking the turn: host work does not need the GPU turn.
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        managed = client is not None
        if client is not None and micro:
            # The minibatch as the turns fulcrumd grants (one, or k micro-batches):
            # gradients accumulate over the k turns, the optimizer steps after the last.
            start = time.monotonic()
            for mb in client.micro_steps():
                managed = mb.grant.kind != "unmanaged"
                loss = loss_fn(model(x[mb.start:mb.stop]), y[mb.start:mb.stop])
                (loss * mb.scale).backward()  # scale 1/k: the accumulated gradient is the minibatch's
                if mb.last:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if args.device == "cuda":
                    torch.cuda.synchronize()
            took = time.monotonic() - start
        elif client is not None:
            with client.train_step(samples=len(x)) as g:
                managed = g.kind != "unmanaged"  # fulcrumd away, --while-away train
                start = time.monotonic()
                loss = step(x, y)
                took = time.monotonic() - start
        else:
            start = time.monotonic()
            loss = step(x, y)
            took = time.monotonic() - start
        if args.progress:
            print(json.dumps({"step": i, "samples": len(x), "ms": round(took * 1000, 2), "t": time.monotonic(),
                              "managed": managed}), flush=True)
        elif i % 50 == 0:
            print("step", i, "loss", float(loss), flush=True)
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()
