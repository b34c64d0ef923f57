#!/usr/bin/env python3
"""fulcrumd restarts under the real PyTorch examples (`make test-pytorch-restart`; issue 27).

Runs examples/train_pytorch.py and examples/serve_pytorch.py on the CPU under
`fulcrumd --board none`, sends a seeded Poisson stream of HTTP requests, and in the middle
of it stops fulcrumd (SIGTERM, as `systemctl try-restart` on a package upgrade does),
keeps it down for --down-s seconds and starts it again on the same directories. It fails
when a worker process exits, when a request is not answered 200, or when training does
not resume under the new fulcrumd. The gaps (the trainer's longest pause between
minibatches, fulcrumd's downtime) are printed, not judged.

    make build && python3 scripts/pytorch/restart.py --bin bin
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e import Proc, find_torch_python, fulcrumd_workloads, http_get, log, post, progress  # noqa: E402


def start_fulcrumd(a, d, name, cpu):
    run = os.path.join(d, "run")
    p = Proc(name, [os.path.join(a.bin, "fulcrumd"), "--runtime-dir", run, "--state-dir", os.path.join(d, "state"),
                    "--board", "none", "--latency", "{}ms".format(a.budget_ms), "--log-level", "info"], cpu, d)
    sock = os.path.join(run, "worker.sock")
    end = time.monotonic() + 15
    while not os.path.exists(sock):
        if p.p.poll() is not None or time.monotonic() > end:
            raise RuntimeError("fulcrumd did not open its socket; see " + p.err.name)
        time.sleep(0.02)
    return p, sock


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "bin"))
    ap.add_argument("--python", default=None, help="a Python that imports torch (default: found)")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--rate", type=float, default=10, help="requests/s (Poisson)")
    ap.add_argument("--before-s", type=float, default=4, help="seconds of requests before the restart")
    ap.add_argument("--after-s", type=float, default=6, help="seconds of requests after fulcrumd is back")
    ap.add_argument("--down-s", type=float, default=1.5, help="seconds fulcrumd stays down")
    ap.add_argument("--budget-ms", type=int, default=300)
    ap.add_argument("--while-away", choices=("wait", "train"), default="wait", help="the trainer's --while-away")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not os.access(os.path.join(a.bin, "fulcrumd"), os.X_OK):
        ap.error("{}/fulcrumd is not an executable: run make build".format(a.bin))
    py, why = (a.python, "") if a.python else find_torch_python()
    if py is None:
        print("SKIPPED the PyTorch restart test: " + why, flush=True)
        sys.exit(1 if os.environ.get("FULCRUM_REQUIRE_PYTORCH") == "1" else 0)

    cpus = sorted(os.sched_getaffinity(0))
    wcpu, dcpu = cpus[0], cpus[-1]
    d = tempfile.mkdtemp(prefix="fcrs", dir="/tmp")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs, failures = [], []
    try:
        fulcrumd, sock = start_fulcrumd(a, d, "fulcrumd", dcpu)
        procs.append(fulcrumd)
        trainer = Proc("trainer", [py, "examples/train_pytorch.py", "--socket", sock, "--device", "cpu",
                                   "--model", "resnet18", "--image-size", str(a.image_size), "--batch", "8",
                                   "--steps", "0", "--data", "random", "--progress", "--while-away", a.while_away],
                       wcpu, d, env)
        procs.append(trainer)
        server = Proc("server", [py, "examples/serve_pytorch.py", "--socket", sock, "--device", "cpu",
                                 "--model", "mobilenet_v3_small", "--image-size", str(a.image_size), "--batch", "4",
                                 "--port", "0", "--host", "127.0.0.1"], wcpu, d, env)
        procs.append(server)
        trainer.wait_line(lambda ln: ln.startswith('{"step": 2,'), 180, "third minibatch")
        port = int(server.wait_line(lambda ln: re.match(r"listening on (\d+)$", ln), 180, "'listening on PORT'").group(1))
        rng = random.Random(a.seed)
        body = bytes(rng.getrandbits(8) for _ in range(a.image_size * a.image_size * 3))
        futs = []
        restart = {}
        t0 = time.monotonic()
        at = t0
        with ThreadPoolExecutor(max_workers=64) as pool:
            while True:
                now = time.monotonic()
                if "stopped" not in restart and now - t0 >= a.before_s:
                    restart["stopped"] = time.monotonic()
                    fulcrumd.stop()  # SIGTERM: fulcrumd tells every worker shutting_down
                    procs.remove(fulcrumd)
                    time.sleep(a.down_s)
                    fulcrumd, _ = start_fulcrumd(a, d, "fulcrumd-2", dcpu)
                    procs.append(fulcrumd)
                    restart["back"] = time.monotonic()
                if "back" in restart and now - restart["back"] >= a.after_s:
                    break
                at += rng.expovariate(a.rate)
                time.sleep(max(0.0, at - time.monotonic()))
                futs.append((time.monotonic(), pool.submit(post, port, body)))
            res = [(t, f.result()) for t, f in futs]
        stats = http_get(port, "/stats")
        for p in (trainer, server):
            if p.p.poll() is not None:
                failures.append("{} exited ({}) across the restart; see {}".format(p.name, p.p.returncode, p.err.name))
        bad = [(round(t - t0, 2), status) for t, (status, _, _) in res if status != 200]
        if bad:
            failures.append("{} of {} requests not answered 200 (time, status): {}".format(len(bad), len(res), bad[:10]))
        steps = progress(trainer)
        after = [s for s in steps if s[0] > restart["back"]]
        wl = fulcrumd_workloads(os.path.join(d, "run", "control.sock"))
        if not after or wl.get("train", {}).get("minibatches", 0) == 0:
            failures.append("training did not resume under the new fulcrumd ({} minibatches after it was back; its count {})"
                            .format(len(after), wl.get("train", {}).get("minibatches")))
        if wl.get("infer", {}).get("served", 0) == 0:
            failures.append("the new fulcrumd scheduled no inference batch")
        times = [t for t, _, _ in steps]
        pause = max((b - a_ for a_, b in zip(times, times[1:]) if b > restart["stopped"] - 1), default=float("nan"))
        lat = sorted(ms for _, (status, ms, _) in res if status == 200)
        rep = {"requests": len(res), "answered_200": len(lat), "fulcrumd_down_s": round(restart["back"] - restart["stopped"], 2),
               "trainer_longest_pause_s": round(pause, 2), "trainer_while_away": a.while_away,
               "minibatches_after_restart": len(after), "server_unmanaged_batches": stats.get("unmanaged_batches"),
               "server_reconnects": stats.get("reconnects"), "p99_ms": round(lat[int(0.99 * (len(lat) - 1))]) if lat else None,
               "max_ms": round(lat[-1]) if lat else None, "loadavg": open("/proc/loadavg").read().split()[0]}
        print(json.dumps(rep), flush=True)
    finally:
        for p in reversed(procs):
            p.stop()
    if failures:
        for f in failures:
            log("FAIL:", f)
        log("logs kept in", d)
        sys.exit(1)
    shutil.rmtree(d, ignore_errors=True)
    log("PASS")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    main()
