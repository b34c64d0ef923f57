# Stand-in torchvision for scripts/gpu/smoke/run.sh: models sleep ms + per-sample ms per call.
import time, types
class _Model:
    def __init__(self, ms, per): self.ms, self.per = ms, per
    def to(self, d): return self
    def eval(self): return self
    def parameters(self): return []
    def __call__(self, x):
        time.sleep((self.ms + self.per * x.n) / 1000.0)
        return x
models = types.SimpleNamespace(resnet18=lambda **k: _Model(20, 0), mobilenet_v3_large=lambda **k: _Model(2, 1),
                               resnet50=lambda **k: _Model(5, 2))
