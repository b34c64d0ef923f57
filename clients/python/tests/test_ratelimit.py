"""rate_limited against a real fulcrumd: refused requests fail, the server carries on."""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # test_client, when run alone

from fulcrum_client import Client, InferenceServer, RateLimited  # noqa: E402
from test_client import Daemon  # noqa: E402


class RateLimitedTest(unittest.TestCase):
    def setUp(self):
        self.d = Daemon("--latency", "100ms")
        self.addCleanup(self.d.stop)

    def server(self, workload, batch):
        c = Client(self.d.sock, role="infer", workload=workload, batch=batch, batch_sizes=[batch])
        self.addCleanup(c.close)

        def handler(payloads):  # 1 ms + 1 ms a request
            time.sleep(0.001 * (1 + len(payloads)))
            return [p * 2 for p in payloads]

        srv = InferenceServer(c, handler).start()
        self.addCleanup(srv.stop)
        return srv

    def test_flooding_stream_gets_its_excess_refused_and_serves_the_rest(self):
        """Two inference streams: a steady one (40 requests at 40 req/s) and a flood
        (3,000 requests at about 2,000 req/s, about twice the GPU with 1 ms a request).
        fulcrumd refuses part of the flood with rate_limited: exactly those futures fail
        with RateLimited naming the request and the stream, every other flood request is
        answered, the flood's server keeps serving afterwards, and the steady stream has
        every request answered. Before the client handled rate_limited, the server's next
        acquire raised it and the server failed every pending request and stopped."""
        steady = self.server("steady", 8)
        # Alone, a stream is never limited: the steady one's batch times are measured
        # before the flood comes, so that its cost is its own, not the default estimate.
        for i in range(10):
            self.assertEqual(steady.submit(i).result(timeout=10), 2 * i)
        flood = self.server("flood", 16)
        steady_futs = []

        def steady_load():
            for i in range(40):
                steady_futs.append((i, steady.submit(i)))
                time.sleep(0.025)

        t = threading.Thread(target=steady_load)
        t.start()
        time.sleep(0.05)  # the steady stream has requests: admission applies
        flood_futs = []
        start = time.monotonic()
        for i in range(3000):
            flood_futs.append((i, flood.submit(i)))
            if i % 20 == 19:  # 20 every 10 ms
                time.sleep(max(0.0, start + (i + 1) / 2000.0 - time.monotonic()))
        t.join()
        refused, answered = [], 0
        for i, f in flood_futs:
            try:
                self.assertEqual(f.result(timeout=30), 2 * i)
                answered += 1
            except RateLimited as e:
                refused.append(e)
        self.assertTrue(refused, "no flood request was refused; fulcrumd's log:\n" + self.d.output()[-3000:])
        self.assertGreater(answered, 0)
        self.assertEqual(answered + len(refused), 3000)
        self.assertEqual(flood.refused, len(refused))
        e = refused[0]
        self.assertEqual(e.code, "rate_limited")
        self.assertEqual(e.workload, "flood")
        self.assertTrue(e.request_id.startswith("r"))
        self.assertIn("flood", str(e))
        self.assertIn("rate", str(e))
        self.assertEqual(len({r.request_id for r in refused}), len(refused))
        # The flood's server is still registered and serving.
        self.assertTrue(flood.client.connected)
        self.assertEqual(flood.submit(21).result(timeout=10), 42)
        for i, f in steady_futs:
            self.assertEqual(f.result(timeout=10), 2 * i)
        self.assertEqual(steady.refused, 0)
        st = self.d.status()
        print("flood: {} of 3000 refused, {} answered".format(len(refused), answered), file=sys.stderr)
        self.assertIsNotNone(st)


if __name__ == "__main__":
    unittest.main()
