"""A PyTorch inference server under fulcrumd (not run in CI: needs torch and a GPU).

Requests (here: HTTP POSTs of a raw 224x224 RGB image) are submitted to an
InferenceServer; fulcrumd decides when to run a batch (full, or early when the oldest
request's deadline would otherwise be missed) and the handler runs it.

    PYTHONPATH=clients/python python3 examples/serve_pytorch.py --socket /run/fulcrum/worker.sock --port 8080
    curl --data-binary @image.rgb http://localhost:8080/
"""

import argparse
import http.server

import numpy as np
import torch
import torchvision
from fulcrum_client import Client, InferenceServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default="/run/fulcrum/worker.sock")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()

    dev = torch.device("cuda")
    model = torchvision.models.resnet50().eval().to(dev)
    sizes = [b for b in (1, 2, 4, 8, 16, 32) if b <= args.batch]

    @torch.inference_mode()
    def handler(payloads):
        x = torch.stack([torch.from_numpy(p) for p in payloads]).to(dev).permute(0, 3, 1, 2).float() / 255
        out = model(x).argmax(dim=1)
        torch.cuda.synchronize()
        return [int(c) for c in out.cpu()]

    def on_profile(batch_size):
        handler([np.zeros((224, 224, 3), dtype=np.uint8)] * batch_size)

    client = Client(args.socket, role="infer", workload="resnet50", batch=args.batch, batch_sizes=sizes)
    server = InferenceServer(client, handler, on_profile=on_profile).start()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            img = np.frombuffer(body, dtype=np.uint8).reshape(224, 224, 3)
            try:
                label = server.submit(img).result(timeout=10)
                code, reply = 200, str(label).encode()
            except Exception as e:  # failed or timed out: tell the caller
                code, reply = 503, str(e).encode()
            self.send_response(code)
            self.end_headers()
            self.wfile.write(reply)

    http.server.ThreadingHTTPServer(("", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
