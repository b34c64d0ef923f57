"""Round-trip cost of the Python client: an empty `with client.train_step():` against a
running fulcrumd (acquire → grant → release), with nobody else waiting.

    python3 examples/bench_python_roundtrip.py --socket /tmp/x/run/worker.sock [--n 20000]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from fulcrum_client import Client  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    c = Client(args.socket, role="train", workload="bench", batch=32)
    lat = []
    for _ in range(args.n):
        t0 = time.perf_counter()
        with c.train_step():
            pass
        lat.append(time.perf_counter() - t0)
    c.close()
    lat.sort()
    q = lambda p: lat[min(int(p * len(lat)), len(lat) - 1)] * 1e6  # noqa: E731
    print("n={} p50={:.0f}us p99={:.0f}us mean={:.0f}us".format(len(lat), q(0.5), q(0.99), sum(lat) / len(lat) * 1e6))


if __name__ == "__main__":
    main()
