#!/usr/bin/env python3
"""Real-PyTorch end-to-end test (`make test-pytorch`, part of `make test`; docs/runtime.md).

Runs examples/train_pytorch.py and examples/serve_pytorch.py for real — on the CPU by
default, with small inputs — twice:
  managed:   under `fulcrumd --board none` (it schedules the turns, leaves clocks alone)
  unmanaged: the same two processes alone; the OS time-slices the core between them
Trainer and server are pinned to one core (the stand-in for one shared GPU), fulcrumd and
this driver to another. Each run: the trainer starts alone (its alone throughput is
measured), then the server starts (its start-up slows the trainer: the slow phase of
issue 16), then a bounded, seeded Poisson stream of HTTP requests is sent.

The managed run must answer every request and make training progress; its p99 against
the budget is reported with a loud line when over, and asserted only with
FULCRUM_PYTORCH_STRICT=1 (a dedicated runner): on a host shared with other jobs the
times spread several-fold and no timing is asserted (the project's rule). Both runs' rows
go to $FULCRUM_REPORT_DIR/pytorch-e2e.md (CI prints it) and stdout.

Needs a Python that imports torch and torchvision (Debian's python3-torch and
python3-torchvision; /usr/bin/python3 is tried first, FULCRUM_TORCH_PYTHON overrides). When
none does and this runs as root with apt-get, they are installed; elsewhere the test is
skipped with a loud message (FULCRUM_REQUIRE_PYTORCH=1 makes that a failure).

    make build && python3 scripts/pytorch/e2e.py --bin bin
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROBE = "import torch, torchvision, numpy"


def log(*a):
    print("[pytorch-e2e]", *a, file=sys.stderr, flush=True)


def imports_torch(py):
    if not py or not os.access(py, os.X_OK):
        return False
    try:
        return subprocess.run([py, "-c", PROBE], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=180).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_torch_python():
    """A Python that imports torch; installs Debian's packages as root when none does."""
    cands = [os.environ.get("FULCRUM_TORCH_PYTHON"), "/usr/bin/python3", sys.executable, shutil.which("python3")]
    cands = [c for i, c in enumerate(cands) if c and c not in cands[:i]]
    for py in cands:
        if imports_torch(py):
            return py, ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, ("no Python here imports torch and torchvision (tried {}), and installing them needs root and "
                      "apt-get: run `sudo apt-get install -y python3-torch python3-torchvision`, or set "
                      "FULCRUM_TORCH_PYTHON to a Python that has them".format(", ".join(cands)))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "--no-install-recommends", "python3-torch", "python3-torchvision"]
    log("no Python imports torch: installing Debian's python3-torch python3-torchvision (apt-get, as root)")
    if subprocess.run(install, env=env).returncode != 0:
        log("apt-get install failed: updating the package lists and trying again")
        subprocess.run(["apt-get", "update"], env=env)
        if subprocess.run(install, env=env).returncode != 0:
            return None, "apt-get install python3-torch python3-torchvision failed (see the output above)"
    if imports_torch("/usr/bin/python3"):
        return "/usr/bin/python3", ""
    return None, "python3-torch is installed but /usr/bin/python3 still cannot import torch and torchvision"


def pin(cpu, nice=0):
    def f():
        os.sched_setaffinity(0, {cpu})
        if nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    return f


class Proc:
    """A child process whose stdout lines are collected by a thread."""

    def __init__(self, name, argv, cpu, logdir, env=None, nice=0):
        self.name = name
        self.lines = []
        self.cond = threading.Condition()
        self.err = open(os.path.join(logdir, name + ".log"), "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, text=True, cwd=ROOT,
                                  preexec_fn=pin(cpu, nice), env=env)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        with open(self.err.name[:-len(".log")] + ".out", "w") as out:
            for line in self.p.stdout:
                out.write(line)
                with self.cond:
                    self.lines.append(line.rstrip("\n"))
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_line(self, pred, timeout, what):
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for ln in self.lines:
                    m = pred(ln)
                    if m:
                        return m
                if self.p.poll() is not None:
                    raise RuntimeError("{} exited ({}) before {}; see {}".format(
                        self.name, self.p.returncode, what, self.err.name))
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError("{}: no {} within {:.0f} s; see {}".format(self.name, what, timeout, self.err.name))
                self.cond.wait(min(left, 0.5))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()


def progress(trainer):
    """(t, samples, ms) of every minibatch the trainer reported."""
    out = []
    with trainer.cond:
        lines = list(trainer.lines)
    for ln in lines:
        if ln.startswith("{"):
            d = json.loads(ln)
            out.append((d["t"], d["samples"], d["ms"]))
    return out


def samples_between(steps, t0, t1):
    return sum(n for t, n, _ in steps if t0 <= t < t1)


def http_get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        return json.loads(c.getresponse().read())
    finally:
        c.close()


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


def fulcrumd_workloads(control_sock):
    """fulcrumd's own measurements (GET /v1/status on the control socket), by role."""
    c = UnixHTTPConnection(control_sock)
    try:
        c.request("GET", "/v1/status")
        st = json.loads(c.getresponse().read())
    finally:
        c.close()
    return {w["role"]: w for w in st.get("workloads") or []}


def fulcrumd_micro_batch(control_sock):
    """The micro-batch size fulcrumd runs the training worker's minibatches at (0: none)."""
    c = UnixHTTPConnection(control_sock)
    try:
        c.request("GET", "/v1/status")
        st = json.loads(c.getresponse().read())
    except (OSError, ValueError):
        return 0
    finally:
        c.close()
    for w in st.get("workers") or []:
        if w.get("role") == "train":
            return w.get("micro_batch") or 0
    return 0


def post(port, body):
    start = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/", body=body, headers={"Content-Type": "application/octet-stream"})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status, (time.monotonic() - start) * 1000, start
    except OSError as e:
        log("request failed:", e)
        return 0, (time.monotonic() - start) * 1000, start


def quantile(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(-(-q * len(v) // 1)) - 1))]


def run_pair(a, py, mode, cpus, work):
    """One managed or unmanaged run; returns its row (a dict)."""
    wcpu, scpu, dcpu = cpus
    d = os.path.join(work, mode)
    os.makedirs(d)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs = []
    try:
        sock = "none"
        fulcrumd = None
        if mode == "managed":
            sock = os.path.join(d, "run", "worker.sock")
            fulcrumd = Proc("fulcrumd", [os.path.join(a.bin, "fulcrumd"), "--runtime-dir", os.path.join(d, "run"),
                                         "--state-dir", os.path.join(d, "state"), "--board", "none",
                                         "--latency", f"{a.budget_ms}ms", "--log-level", "info"], dcpu, d,
                            dict(os.environ, FULCRUM_SCHEDULER_MARGIN_MS=str(a.margin_ms),
                                 **({} if a.room_max_frac is None else
                                    dict(FULCRUM_SCHEDULER_ROOM_MAX_FRAC=str(a.room_max_frac)))), a.nice)
            procs.append(fulcrumd)
            end = time.monotonic() + 15
            while not os.path.exists(sock):
                if fulcrumd.p.poll() is not None or time.monotonic() > end:
                    raise RuntimeError("fulcrumd did not open its socket; see " + fulcrumd.err.name)
                time.sleep(0.05)
        trainer = Proc("trainer", [py, "examples/train_pytorch.py", "--socket", sock, "--device", a.device,
                                   "--model", a.train_model, "--image-size", str(a.image_size), "--batch",
                                   str(a.train_batch), "--steps", "0", "--data", "random", "--progress"] +
                       (["--micro-batches", a.micro_batches] if a.micro_batches and mode == "managed" else []),
                       wcpu, d, env, a.nice)
        procs.append(trainer)
        trainer.wait_line(lambda ln: ln.startswith('{"step": 2,'), 180, "third minibatch")
        t_alone = time.monotonic()
        time.sleep(a.alone_s)
        alone_steps = progress(trainer)
        alone = samples_between(alone_steps, t_alone, time.monotonic()) / (time.monotonic() - t_alone)
        # The minibatch time alone: with --micro-batches the budget is meant to be below it.
        alone_ms = quantile([ms for t, _, ms in alone_steps if t >= t_alone], 0.5)

        server = Proc("server", [py, "examples/serve_pytorch.py", "--socket", sock, "--device", a.device,
                                 "--model", a.infer_model, "--image-size", str(a.image_size), "--batch",
                                 str(a.infer_batch), "--port", "0", "--host", "127.0.0.1"], scpu, d, env, a.nice)
        procs.append(server)
        m = server.wait_line(lambda ln: re.match(r"listening on (\d+)$", ln), 180, "'listening on PORT'")
        port = int(m.group(1))

        rng = random.Random(a.seed)
        body = bytes(rng.getrandbits(8) for _ in range(a.image_size * a.image_size * 3))
        before = http_get(port, "/stats")
        t0 = time.monotonic()
        futs = []
        at = t0
        with ThreadPoolExecutor(max_workers=64) as pool:
            for _ in range(a.requests):
                at += rng.expovariate(a.rate)
                time.sleep(max(0.0, at - time.monotonic()))
                futs.append(pool.submit(post, port, body))
            res = [f.result() for f in futs]
        t1 = time.monotonic()
        after = http_get(port, "/stats")
        steps = progress(trainer)
        lat = [ms for status, ms, _ in res if status == 200]
        share = (after["busy_s"] - before["busy_s"]) / (t1 - t0)
        train = samples_between(steps, t0, t1) / (t1 - t0)
        target = alone * (1 - share)
        row = {
            "mode": mode, "requests": a.requests, "served": len(lat),
            "p50_ms": quantile(lat, 0.5), "p99_ms": quantile(lat, 0.99), "max_ms": max(lat or [float("nan")]),
            "misses": sum(1 for x in lat if x > a.budget_ms),
            # p99 ≤ L promises at most 1 % late: unanswered requests count as late.
            "late_frac": (sum(1 for x in lat if x > a.budget_ms) + a.requests - len(lat)) / a.requests,
            "late_allowed": 0.01,
            "train_sps": train, "alone_sps": alone, "infer_share": share, "target_sps": target,
            "ratio": train / target if target > 0 else float("nan"),
            "minibatches": sum(1 for t, _, _ in steps if t0 <= t < t1), "window_s": t1 - t0,
            "step_ms_p50": quantile([ms for t, _, ms in steps if t0 <= t < t1], 0.5),
            "alone_step_ms": alone_ms,
            # Other jobs on the host change every figure: say how busy it was.
            "loadavg": open("/proc/loadavg").read().split()[0],
        }
        if a.dump_turns:
            # The turn times the simulated workers' tail model is fitted to
            # (scripts/pytorch/fit_tail.py, docs/runtime.md "Heavy-tailed turn times").
            with open("{}.{}.json".format(a.dump_turns, mode), "w") as f:
                json.dump({"seed": a.seed, "mode": mode, "budget_ms": a.budget_ms,
                           "train_ms": [ms for t, _, ms in steps if t0 <= t < t1],
                           "infer_batch_ms": after.get("batch_ms", []), "latency_ms": lat}, f)
        if a.timeline:
            # Every request, server batch and training minibatch on one clock (seconds from
            # the first request): what scripts/pytorch/timeline.py reads to tell a stall
            # (nothing served while requests wait) from contention.
            with open("{}.{}.json".format(a.timeline, mode), "w") as f:
                json.dump({"seed": a.seed, "mode": mode, "device": a.device, "budget_ms": a.budget_ms,
                           "requests": [[round(s - t0, 4), round(ms, 2), st] for st, ms, s in res],
                           "batches": [[round(s - t0, 4), n, ms] for s, n, ms in after.get("batch_log", [])
                                       if s >= t0 - 1],
                           "train": [[round(t - ms / 1000 - t0, 4), ms] for t, _, ms in steps if t >= t0 - 1]}, f)
        if fulcrumd is not None:
            wl = fulcrumd_workloads(os.path.join(d, "run", "control.sock"))
            inf, tr = wl.get("infer", {}), wl.get("train", {})
            row["fulcrumd"] = {"p99_ms": round((inf.get("latency") or {}).get("p99_ms") or 0),
                               "admission_room_ms": inf.get("admission_room_ms"),
                               "deadline_misses": inf.get("deadline_misses"),
                               "starved_admits": tr.get("starved_admits", 0),
                               "expected_minibatch_ms": round(tr.get("expected_minibatch_ms") or 0),
                               "expected_micro_batch_ms": {k: round(v) for k, v in
                                                           (tr.get("expected_micro_batch_ms") or {}).items()},
                               "micro_batch": fulcrumd_micro_batch(os.path.join(d, "run", "control.sock"))}
        return row
    finally:
        for p in reversed(procs):
            p.stop()


def calibrate(a, py, wcpu, work):
    """The trainer's minibatch time alone (ms, median of steps 3–8), unmanaged: what
    --budget-frac scales the budget from."""
    d = os.path.join(work, "calibrate")
    os.makedirs(d)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    trainer = Proc("trainer", [py, "examples/train_pytorch.py", "--socket", "none", "--device", a.device,
                               "--model", a.train_model, "--image-size", str(a.image_size), "--batch",
                               str(a.train_batch), "--steps", "9", "--data", "random", "--progress"], wcpu, d, env, a.nice)
    try:
        trainer.wait_line(lambda ln: ln.startswith('{"step": 8,'), 300, "ninth minibatch")
        return quantile([ms for _, _, ms in progress(trainer)[3:]], 0.5)
    finally:
        trainer.stop()


def table(rows, a):
    out = ["| sharing | served | p50 ms | p99 ms | max ms | misses (> {} ms) | late (allowed 1 %) | training samples/s | "
           "alone samples/s | inference share | managed ÷ target |".format(a.budget_ms),
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append("| {mode} | {served}/{requests} | {p50_ms:.0f} | {p99_ms:.0f} | {max_ms:.0f} | {misses} | "
                   "{late_frac:.1%} | {train_sps:.1f} | {alone_sps:.1f} | {infer_share:.0%} | {ratio:.0%} |".format(**r))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin"), help="directory holding fulcrumd (make build)")
    ap.add_argument("--python", default=None, help="a Python that imports torch (default: found)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--train-model", default="resnet18")
    ap.add_argument("--infer-model", default="mobilenet_v3_small")
    ap.add_argument("--image-size", type=int, default=None,
                    help="square input images (default 32; 64 with --micro, where 32×32 turns are per-layer overhead)")
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--infer-batch", type=int, default=4)
    ap.add_argument("--rate", type=float, default=10, help="requests/s (Poisson)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--budget-ms", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    # 20, not fulcrumd's 5: on this CPU stand-in the server's HTTP threads and the client
    # library share the contested core with the trainer, so a hand-over costs more than on
    # a GPU, where they run on other cores.
    ap.add_argument("--margin-ms", type=int, default=20,
                    help="fulcrumd's scheduler.margin_ms: time kept free before each deadline")
    ap.add_argument("--room-max-frac", type=float, default=None,
                    help="fulcrumd's scheduler.room_max_frac: the learned admission room's bound as a fraction of the "
                         "budget (0: off; unset: fulcrumd's default, 0.5; docs/runtime.md)")
    ap.add_argument("--micro-batches", default="",
                    help="managed run: the trainer declares these micro-batch sizes (divisors of --train-batch, e.g. "
                         "4,8,16; issue 32): with --budget-ms below one minibatch, fulcrumd runs it as k shorter turns")
    ap.add_argument("--budget-frac", type=float, default=0,
                    help="set --budget-ms to this fraction of the trainer's minibatch time alone, measured first "
                         "(unmanaged, 9 minibatches); e.g. 0.8: a budget below one training minibatch")
    ap.add_argument("--micro", action="store_true",
                    help="issue 32's target: --train-batch 32 --micro-batches 4,8,16 --budget-frac 0.8 --image-size 64 (a budget "
                         "below one training minibatch; the managed trainer runs it as micro-batch turns)")
    ap.add_argument("--alone-s", type=float, default=4, help="seconds the trainer runs alone before the server starts")
    ap.add_argument("--modes", default="managed,unmanaged")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of fulcrumd and the workers (negative needs root): on a host shared with other "
                         "jobs, -10 keeps the pinned cores mostly theirs, as a GPU would be")
    ap.add_argument("--report-dir", default=os.environ.get("FULCRUM_REPORT_DIR"))
    ap.add_argument("--keep", action="store_true", help="keep the logs directory")
    ap.add_argument("--dump-turns", default=None, metavar="PREFIX",
                    help="write PREFIX.MODE.json: the window's training minibatch times, inference batch times and "
                         "request latencies (ms)")
    ap.add_argument("--timeline", default=None, metavar="PREFIX",
                    help="write PREFIX.MODE.json: each request's send time, latency and status, each server batch's "
                         "start, size and ms, each training minibatch's start and ms, on one clock; "
                         "scripts/pytorch/timeline.py summarises it")
    a = ap.parse_args()
    if a.micro:
        a.train_batch, a.micro_batches, a.budget_frac = 32, a.micro_batches or "4,8,16", a.budget_frac or 0.8
    if a.image_size is None:
        # On a CPU, resnet18's turns on 32×32 images are mostly per-layer overhead: a turn of 4
        # samples took 0.75–0.96 of a whole minibatch of 32 on a quiet host, so no micro-batch
        # fits a budget below one minibatch. 64×64 turns are compute-bound, as a GPU's are.
        a.image_size = 64 if a.micro else 32
    if not os.access(os.path.join(a.bin, "fulcrumd"), os.X_OK):
        ap.error("{}/fulcrumd is not an executable: run make build".format(a.bin))

    py, why = (a.python, "") if a.python else find_torch_python()
    if py is None:
        banner = "!" * 78
        msg = "SKIPPED the real-PyTorch end-to-end test: " + why
        for out in (sys.stdout, sys.stderr):
            print("\n".join([banner, msg, banner]), file=out, flush=True)
        if a.report_dir:
            with open(os.path.join(a.report_dir, "pytorch-e2e.md"), "w") as f:
                f.write("## Real PyTorch end-to-end: SKIPPED\n\n" + why + "\n")
        sys.exit(1 if os.environ.get("FULCRUM_REQUIRE_PYTORCH") == "1" else 0)

    cpus = sorted(os.sched_getaffinity(0))
    wcpu, dcpu = cpus[0], cpus[1] if len(cpus) > 1 else cpus[0]
    if len(cpus) < 2:
        log("only one core: fulcrumd shares it with the workers")
    # On the CPU the one contested core stands in for the one GPU. On a GPU the GPU is the
    # shared device and each process drives it from its own core, as on a Jetson (6–12
    # cores): pinning both to one core made the CPU, not the GPU, the contended resource
    # (measured on an H100: managed p99 1.57 s, unmanaged 6.5 s, against 300 ms).
    scpu = wcpu
    if a.device == "cuda" and len(cpus) >= 3:
        scpu = cpus[2]
    os.sched_setaffinity(0, {dcpu})
    work = tempfile.mkdtemp(prefix="fcpt", dir="/tmp")
    log("python {}, device {}, trainer on core {}, server on core {}, fulcrumd on core {}, logs in {}".format(
        py, a.device, wcpu, scpu, dcpu, work))
    rows, failures, warnings = [], [], []
    if a.budget_frac > 0:
        alone_ms = calibrate(a, py, wcpu, work)
        a.budget_ms = max(1, int(a.budget_frac * alone_ms))
        log("trainer alone: minibatch {:.0f} ms; budget {} ms ({:g} × it)".format(alone_ms, a.budget_ms, a.budget_frac))
    # Timing is reported, not asserted, unless asked: on a host whose cores other jobs
    # share, minibatch and batch times spread several-fold and the p99 says more about
    # the host than about fulcrumd (docs/runtime.md).
    strict = os.environ.get("FULCRUM_PYTORCH_STRICT") == "1"
    ok = False
    try:
        for mode in a.modes.split(","):
            log(mode + ": starting")
            r = run_pair(a, py, mode, (wcpu, scpu, dcpu), work)
            log("{}: {}".format(mode, json.dumps(r)))
            rows.append(r)
            if r["served"] != r["requests"]:
                failures.append("{}: {} of {} requests answered".format(mode, r["served"], r["requests"]))
            if mode == "managed":
                if not r["p99_ms"] <= a.budget_ms:
                    msg = "managed: p99 {:.0f} ms over the {} ms budget (load average {})".format(
                        r["p99_ms"], a.budget_ms, open("/proc/loadavg").read().split()[0])
                    if strict:
                        failures.append(msg)
                    else:
                        warnings.append(msg)
                if r["minibatches"] < 1:
                    failures.append("managed: no training minibatch while requests were served")
                if a.micro_batches and not r["ratio"] >= 0.5:
                    msg = "managed: training {:.1f} samples/s is {:.0%} of alone × (1 − inference share), under issue 32's 50 %".format(
                        r["train_sps"], r["ratio"])
                    (failures if strict else warnings).append(msg)
        ok = not failures
    finally:
        if rows:
            desc = ("{} on {} (batch {}, {}×{} images) + {} inference (batch sizes up to {}), Poisson {:g} req/s × {} "
                    "(seed {}), budget {} ms, margin {} ms, learned room up to {:g} × budget; {}, fulcrumd --board none on another"
                    ).format(a.train_model, a.device, a.train_batch, a.image_size, a.image_size, a.infer_model,
                             a.infer_batch, a.rate, a.requests, a.seed, a.budget_ms, a.margin_ms, 0.5 if a.room_max_frac is None else a.room_max_frac,
                             "both pinned to one core" if scpu == wcpu else "trainer and server each on a core of its own")
            if a.micro_batches:
                desc += "; the managed trainer declares micro-batches {} (gradient accumulation)".format(a.micro_batches)
            extra = "".join("\n- {}: p99 {} the budget; {} training minibatches in {:.1f} s (median {:.0f} ms, {:.0f} ms "
                            "alone); host load average {} at the end{}".format(
                r["mode"], "within" if r["p99_ms"] <= a.budget_ms else "OVER", r["minibatches"], r["window_s"],
                r["step_ms_p50"], r["alone_step_ms"], r["loadavg"],
                "; fulcrumd's own view (arrival reported → release): p99 {p99_ms} ms, {deadline_misses} deadline "
                "misses, {starved_admits} starved admits, expected minibatch {expected_minibatch_ms} ms, micro-batch "
                "{micro_batch} (expected turn ms by size {expected_micro_batch_ms}), admission room "
                "{admission_room_ms} ms at the end"
                .format(**r["fulcrumd"]) if "fulcrumd" in r else "") for r in rows)
            rep = ("## Real PyTorch end-to-end (`make test-pytorch`)\n\n" + desc + ".\n\n" + table(rows, a) +
                   "\n\ntarget = alone × (1 − inference share); managed ÷ target is issue 16's figure (goal ≥ 80 %)." +
                   extra + "\n")
            print(rep)
            if a.report_dir:
                with open(os.path.join(a.report_dir, "pytorch-e2e.md"), "w") as f:
                    f.write(rep)
        if ok and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log("logs kept in", work)
    for w in warnings:
        banner = "!" * 78
        print("\n".join([banner, "NOT ASSERTED (set FULCRUM_PYTORCH_STRICT=1 to fail on it): " + w, banner]),
              file=sys.stderr, flush=True)
    if failures:
        for f in failures:
            log("FAIL:", f)
        sys.exit(1)
    log("PASS")


if __name__ == "__main__":
    main()
