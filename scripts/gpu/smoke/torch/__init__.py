# Stand-in for the few torch calls scripts/gpu/workload.py makes, for scripts/gpu/smoke/run.sh only:
# "GPU" work is a sleep, and nothing is shared or contended. It checks plumbing, not performance.
import time, types
uint8 = "uint8"
class Tensor:
    def __init__(self, n): self.n = n
    def to(self, *a, **k): return self
    def permute(self, *a): return self
    def float(self): return self
    def __truediv__(self, o): return self
    def argmax(self, dim=None): return Tensor(self.n)
    def cpu(self): return [0] * self.n
    def backward(self): pass
    def __len__(self): return self.n
def device(*a): return "cuda"
def randn(n, *a, **k): return Tensor(n)
def randint(lo, hi, shape, **k): return Tensor(shape[0] if len(shape) == 1 else 1)
def stack(xs): return Tensor(len(xs))
def inference_mode():
    return lambda f: f
cuda = types.SimpleNamespace(is_available=lambda: True, synchronize=lambda: None)
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(benchmark=False))
class _SGD:
    def __init__(self, *a, **k): pass
    def zero_grad(self, **k): pass
    def step(self): pass
optim = types.SimpleNamespace(SGD=_SGD)
class _Loss:
    def __call__(self, out, y): return out
nn = types.SimpleNamespace(CrossEntropyLoss=_Loss)
