"""A PyTorch inference server under fulcrumd.

Requests (here: HTTP POSTs of a raw SIZExSIZE RGB image, uint8) are submitted to an
InferenceServer; fulcrumd decides when to run a batch (full, or early when the oldest
request's deadline would otherwise be missed) and the handler runs it.

    PYTHONPATH=clients/python python3 examples/serve_pytorch.py --socket /run/fulcrum/worker.sock --port 8080
    curl --data-binary @image.rgb http://localhost:8080/

On a machine without a GPU (`--device cpu`, the default there) it runs on the CPU; small
inputs keep it quick, as the end-to-end test does (scripts/pytorch/e2e.py):

    python3 examples/serve_pytorch.py --device cpu --model mobilenet_v3_small --image-size 64 --batch 4 --port 0

`--socket none` serves without fulcrumd: a thread runs whatever is queued (up to --batch)
as soon as the previous batch is done (the unmanaged baseline). `--port 0` picks a free
port. Once the model is loaded and warmed up the server prints `listening on PORT`.
GET /stats returns {"batches", "requests", "busy_s"} (time spent in the model), "batch_ms"
(the latest 2,000 batches as [size, ms]), "batch_log" (the latest 4,000 as [start,
size, ms], start being time.monotonic(), the same clock in every process), and
under fulcrumd "unmanaged_batches" and "reconnects". When fulcrumd restarts the server
keeps answering: it serves the queued requests itself until it is registered again.
"""

import argparse
import concurrent.futures
import http.server
import json
import os
import queue
import sys
import threading
import time

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from fulcrum_client import Client, InferenceServer  # noqa: E402

MODELS = ("resnet50", "resnet18", "mobilenet_v3_small")


class LocalBatcher:
    """Serves submitted payloads without fulcrumd: whatever is queued, up to batch, as
    soon as the previous batch is done (what an application does on its own)."""

    def __init__(self, handler, batch, warmup=None):
        self.handler, self.batch = handler, batch
        self.q = queue.Queue()
        ready = threading.Event()

        def run():
            try:
                if warmup is not None:
                    warmup()  # in the serving thread (see main)
            finally:
                ready.set()
            self._loop()

        threading.Thread(target=run, name="local-batcher", daemon=True).start()
        ready.wait()

    def submit(self, payload):
        fut = concurrent.futures.Future()
        self.q.put((payload, fut))
        return fut

    def _loop(self):
        while True:
            items = [self.q.get()]
            while len(items) < self.batch:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            try:
                outs = self.handler([p for p, _ in items])
                for (_, fut), out in zip(items, outs):
                    fut.set_result(out)
            except Exception as e:  # the whole batch fails, as under fulcrumd
                for _, fut in items:
                    fut.set_exception(e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default="/run/fulcrum/worker.sock", help="fulcrumd's worker socket; none: no fulcrumd")
    ap.add_argument("--port", type=int, default=8080, help="HTTP port; 0 picks a free one")
    ap.add_argument("--host", default="")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model", choices=MODELS, default="resnet50")
    ap.add_argument("--image-size", type=int, default=224, help="requests carry SIZExSIZE RGB images")
    ap.add_argument("--batch", type=int, default=8, help="largest batch; fulcrumd picks among powers of two up to it")
    ap.add_argument("--workload", default=None, help="the name fulcrumd knows the workload by (default: the model)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device; use --device cpu")
    if args.image_size < 32 or args.batch < 1:
        ap.error("--image-size must be ≥ 32 and --batch ≥ 1")

    dev = torch.device(args.device)
    model = getattr(torchvision.models, args.model)().eval().to(dev)
    sizes = [b for b in (1, 2, 4, 8, 16, 32) if b <= args.batch]
    side = args.image_size
    stats = {"batches": 0, "requests": 0, "busy_s": 0.0, "batch_ms": [], "batch_log": []}
    stats_lock = threading.Lock()

    @torch.inference_mode()
    def handler(payloads):
        start = time.monotonic()
        x = torch.stack([torch.from_numpy(p) for p in payloads]).to(dev).permute(0, 3, 1, 2).float() / 255
        out = model(x).argmax(dim=1)
        if args.device == "cuda":
            torch.cuda.synchronize()
        res = [int(c) for c in out.cpu()]
        with stats_lock:
            stats["batches"] += 1
            stats["requests"] += len(payloads)
            stats["busy_s"] += time.monotonic() - start
            # The latest batch times (ms, with their sizes), bounded: what the e2e test
            # fits the simulated workers' tail model to (docs/runtime.md).
            stats["batch_ms"].append([len(payloads), round((time.monotonic() - start) * 1000, 2)])
            del stats["batch_ms"][:-2000]
            # When each batch ran (time.monotonic() at its start, size, ms), bounded: a
            # per-request timeline (scripts/pytorch/timeline.py) lines stalls up with it.
            stats["batch_log"].append([round(start, 4), len(payloads), round((time.monotonic() - start) * 1000, 2)])
            del stats["batch_log"][:-4000]
        return res

    def on_profile(batch_size):
        handler([np.zeros((side, side, 3), dtype=np.uint8)] * batch_size)

    # Warm up before taking requests (lazy initialisation, allocator): the first batches
    # of a fresh model are several times slower. Every size up to --batch, not only the
    # declared ones (a deadline dispatches partial batches of any size, and on a GPU each
    # new input shape loads kernels the first time), in the thread that will serve: CUDA
    # libraries keep per-thread state, and a new thread pays each shape's set-up again
    # (InferenceServer.start's note has the H200 numbers).
    def warmup():
        for b in range(1, args.batch + 1):
            on_profile(b)
        with stats_lock:
            stats.update(batches=0, requests=0, busy_s=0.0, batch_ms=[], batch_log=[])

    if args.socket == "none":
        server = LocalBatcher(handler, args.batch, warmup)
    else:
        # on_profile: fulcrumd times this workload at new power modes with real batches.
        client = Client(args.socket, role="infer", workload=args.workload or args.model, batch=args.batch,
                        batch_sizes=sizes, on_profile=on_profile)
        server = InferenceServer(client, handler).start(warmup)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # one line per request would cost the shared core
            pass

        def reply(self, code, body):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path != "/stats":
                self.reply(404, b"POST an image to /, or GET /stats\n")
                return
            with stats_lock:
                out = dict(stats, batch_ms=list(stats["batch_ms"]), batch_log=list(stats["batch_log"]))
            if args.socket != "none":
                out.update(unmanaged_batches=server.unmanaged_batches, reconnects=client.reconnects)
            self.reply(200, json.dumps(out).encode())

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if len(body) != side * side * 3:
                self.reply(400, "want {0}x{0}x3 bytes (raw RGB), got {1}\n".format(side, len(body)).encode())
                return
            img = np.frombuffer(bytearray(body), dtype=np.uint8).reshape(side, side, 3)
            try:
                label = server.submit(img).result(timeout=10)
                code, reply = 200, str(label).encode()
            except Exception as e:  # failed or timed out: tell the caller
                code, reply = 503, str(e).encode()
            self.reply(code, reply)

    class Server(http.server.ThreadingHTTPServer):
        # The listen backlog: socketserver's 5 overflowed when a burst of clients connected
        # while this process was busy (scripts/pytorch/restart.py sends from 64 threads; two
        # connections were reset in a CI run at load 12), and a reset request is a lost one.
        request_queue_size = 128

    httpd = Server((args.host, args.port), Handler)
    print("listening on", httpd.server_address[1], flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
