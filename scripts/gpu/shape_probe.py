# First-call cost of each inference batch shape, in the main thread and in a new thread
# (docs/gpu.md "First runs on a GPU"). Needs a CUDA GPU and torch/torchvision:
#   python3 scripts/gpu/shape_probe.py
import threading
import time

import torch
import torchvision
dev = torch.device("cuda")
for name, bench in (("mobilenet_v3_small", False), ("mobilenet_v3_large", True)):
    torch.backends.cudnn.benchmark = bench
    m = getattr(torchvision.models, name)().eval().to(dev)
    def run(b, side=32 if not bench else 224):
        x = torch.rand(b, 3, side, side, device=dev)
        t = time.monotonic()
        with torch.inference_mode():
            m(x).argmax(1); torch.cuda.synchronize()
        return (time.monotonic() - t) * 1000
    res = {"first": {}, "again": {}}
    for b in (1, 2, 4):
        res["first"][b] = round(run(b), 1)
    for b in (3, 1, 2, 4):
        res["again" if b != 3 else "first"][b] = round(run(b), 1)
    out = {}
    th = threading.Thread(target=lambda: out.update({b: round(run(b), 1) for b in (1, 2, 4, 3)}))
    th.start(); th.join()
    print(name, "cudnn.benchmark", bench, "main thread ms", res, "new thread ms", out, flush=True)
