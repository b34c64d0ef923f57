#!/usr/bin/env python3
"""One side of the real-GPU comparison (scripts/gpu/compare.sh): a PyTorch training loop
(ResNet-18, synthetic data) or a PyTorch inference server (MobileNetV3 or ResNet-50,
Poisson arrivals), either under fulcrumd (--socket, through clients/python's
fulcrum_client, as examples/train_pytorch.py and examples/serve_pytorch.py do) or alone
(native: the CUDA driver time-slices the GPU between the processes).

It prints one JSON report on stdout. It never touches clocks, power limits or GPU modes.

    PYTHONPATH=clients/python python3 scripts/gpu/workload.py train --socket /run/fulcrum/worker.sock
    PYTHONPATH=clients/python python3 scripts/gpu/workload.py infer --rate 30 --requests 1800
"""

import argparse
import json
import queue
import random
import signal
import sys
import threading
import time


class Stop(Exception):
    """Raised by the SIGTERM/SIGINT handler to end an open-ended run."""


def on_signal(signum, frame):
    raise Stop()


def need_torch():
    try:
        import torch
        import torchvision
    except ImportError as e:
        sys.exit("workload.py: PyTorch and torchvision are needed (pip install torch torchvision): {}".format(e))
    if not torch.cuda.is_available():
        sys.exit("workload.py: PyTorch sees no CUDA GPU (torch.cuda.is_available() is False): "
                 "check nvidia-smi, CUDA_VISIBLE_DEVICES and that torch is a CUDA build")
    return torch, torchvision


def need_client():
    try:
        from fulcrum_client import Client, InferenceServer
    except ImportError as e:
        sys.exit("workload.py: fulcrum_client not found: run with PYTHONPATH=clients/python ({})".format(e))
    return Client, InferenceServer


def quantile(sorted_values, q):
    """Nearest-rank q-quantile of an ascending list (as fulcrumctl's reports)."""
    if not sorted_values:
        return 0.0
    i = max(0, min(len(sorted_values) - 1, int(q * len(sorted_values) + 0.999999) - 1))
    return sorted_values[i]


def train(args):
    torch, tv = need_torch()
    dev = torch.device("cuda", args.device)
    torch.backends.cudnn.benchmark = True
    model = tv.models.resnet18(num_classes=10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    # Synthetic data already on the GPU: the comparison is about GPU sharing, not input
    # pipelines.
    x = torch.randn(args.batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()  # the turn ends when the GPU is done

    for _ in range(args.warmup):  # before registering: no turn is held for it
        step(x, y)
    client = None
    if args.socket:
        Client, _ = need_client()
        client = Client(args.socket, role="train", workload="resnet18-train", batch=args.batch)
        client.on_profile = lambda b: step(torch.randn(b, 3, 224, 224, device=dev),
                                           torch.randint(0, 10, (b,), device=dev))
    if args.ready_file:
        open(args.ready_file, "w").close()
    steps, start = 0, time.monotonic()
    try:
        while (args.steps == 0 or steps < args.steps) and (args.duration == 0 or time.monotonic() - start < args.duration):
            if client is not None:
                with client.train_step(samples=args.batch):
                    step(x, y)
            else:
                step(x, y)
            steps += 1
    except Stop:
        pass
    elapsed = time.monotonic() - start
    if client is not None:
        client.close()
    return {"role": "train", "model": "resnet18", "managed": client is not None, "batch": args.batch,
            "steps": steps, "samples": steps * args.batch, "elapsed_s": elapsed,
            "throughput_samples_per_s": steps * args.batch / elapsed if elapsed > 0 else 0.0}


def infer(args):
    torch, tv = need_torch()
    dev = torch.device("cuda", args.device)
    ctor = {"mobilenet_v3_large": tv.models.mobilenet_v3_large, "resnet50": tv.models.resnet50}.get(args.model)
    if ctor is None:
        sys.exit("workload.py: --model must be mobilenet_v3_large or resnet50")
    model = ctor().eval().to(dev)

    @torch.inference_mode()
    def handler(payloads):
        # As examples/serve_pytorch.py: HWC uint8 images copied in, NCHW float out.
        xb = torch.stack(payloads).to(dev).permute(0, 3, 1, 2).float() / 255
        out = model(xb).argmax(dim=1)
        torch.cuda.synchronize()
        return [int(c) for c in out.cpu()]

    img = torch.randint(0, 256, (224, 224, 3), dtype=torch.uint8)
    sizes = [b for b in (1, 2, 4, 8, 16, 32) if b <= args.batch] or [args.batch]
    # Warm-up (cuDNN autotuning, lazy module loading) before registering, at every size up
    # to --batch, in the thread that serves: a deadline dispatches partial batches of any
    # size, each new shape autotunes the first time a thread sees it (780–880 ms for
    # MobileNetV3-Large on an H200, also in a second thread after the first had run it),
    # and stalls like that put the p99 at 3.1–3.5 s against 100 ms.
    def warmup():
        for b in range(1, args.batch + 1):
            handler([img] * b)

    lock = threading.Lock()
    lat_ms, failed = [], [0]
    done = threading.Semaphore(0)

    def finish(t_arrival, ok):
        with lock:
            if ok:
                lat_ms.append((time.monotonic() - t_arrival) * 1000.0)
            else:
                failed[0] += 1
        done.release()

    server, q, serving = None, None, None
    if args.socket:
        Client, InferenceServer = need_client()
        client = Client(args.socket, role="infer", workload=args.model + "-infer", batch=args.batch, batch_sizes=sizes)
        server = InferenceServer(client, handler, on_profile=lambda b: handler([img] * b)).start(warmup)

        def submit(t_arrival):
            fut = server.submit(img)
            fut.add_done_callback(lambda f: finish(t_arrival, f.exception() is None))
    else:
        q = queue.Queue()

        warmed = threading.Event()

        def serve():  # native: serve what is queued, up to the batch size, back to back
            try:
                warmup()
            finally:
                warmed.set()
            while True:
                first = q.get()
                if first is None:
                    return
                items = [first]
                while len(items) < args.batch:
                    try:
                        nxt = q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        q.put(None)
                        break
                    items.append(nxt)
                try:
                    handler([img] * len(items))
                    ok = True
                except Exception:  # a failed batch fails its requests; keep serving
                    ok = False
                for t in items:
                    finish(t, ok)

        serving = threading.Thread(target=serve, daemon=True)
        serving.start()
        warmed.wait()

        def submit(t_arrival):
            q.put(t_arrival)

    if args.ready_file:
        open(args.ready_file, "w").close()
    rng = random.Random(args.seed)
    start = time.monotonic()
    nxt, sent = start, 0
    try:
        while sent < args.requests:
            nxt += rng.expovariate(args.rate)
            pause = nxt - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            submit(time.monotonic())
            sent += 1
        deadline = time.monotonic() + args.drain_s
        for _ in range(sent):
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
    except Stop:
        pass
    elapsed = time.monotonic() - start
    if server is not None:
        server.stop()
    if q is not None:
        q.put(None)
        # Join the serving thread before the interpreter exits: leaving it to die with the
        # process aborted the native run on an H200 ("terminate called without an active
        # exception", a C++ thread of torch's still joinable), before the buffered report
        # reached the file.
        serving.join(timeout=30)
    with lock:
        lat = sorted(lat_ms)
        nfail = failed[0]
    return {"role": "infer", "model": args.model, "managed": server is not None, "batch": args.batch,
            "rate": args.rate, "requests": sent, "served": len(lat), "failed": nfail,
            "unserved": sent - len(lat) - nfail, "elapsed_s": elapsed,
            "latency_p50_ms": quantile(lat, 0.50), "latency_p99_ms": quantile(lat, 0.99),
            "latency_max_ms": lat[-1] if lat else 0.0,
            "deadline_misses": sum(1 for v in lat if v > args.latency_ms)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=("train", "infer"))
    ap.add_argument("--socket", default="", help="fulcrumd's worker socket; empty runs natively (no fulcrumd)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index")
    ap.add_argument("--batch", type=int, default=0, help="train: minibatch (default 32); infer: max batch (default 8)")
    ap.add_argument("--warmup", type=int, default=5, help="train: warm-up steps before measuring")
    ap.add_argument("--steps", type=int, default=0, help="train: stop after this many steps (0: until SIGTERM)")
    ap.add_argument("--duration", type=float, default=0, help="train: stop after this many seconds (0: until SIGTERM)")
    ap.add_argument("--model", default="mobilenet_v3_large", help="infer: mobilenet_v3_large or resnet50")
    ap.add_argument("--rate", type=float, default=30.0, help="infer: Poisson arrival rate, requests/s")
    ap.add_argument("--requests", type=int, default=1800, help="infer: requests to send")
    ap.add_argument("--latency-ms", type=float, default=100.0, help="infer: budget for counting deadline misses")
    ap.add_argument("--drain-s", type=float, default=30.0, help="infer: how long to wait for the last answers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ready-file", default="", help="touch this file once warmed up")
    args = ap.parse_args()
    if args.batch <= 0:
        args.batch = 32 if args.role == "train" else 8
    if args.role == "infer" and (args.rate <= 0 or args.requests <= 0):
        ap.error("--rate and --requests must be positive")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rep = train(args) if args.role == "train" else infer(args)
    json.dump(rep, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()  # the report is written even if torch's teardown aborts the exit


if __name__ == "__main__":
    main()
