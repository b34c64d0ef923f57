"""Tests against a real fulcrumd (built by `make build`; FULCRUM_BIN is its directory)."""

import concurrent.futures
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fulcrum_client import Client, FulcrumError, InferenceServer  # noqa: E402


def fulcrumd_path():
    d = os.environ.get("FULCRUM_BIN")
    if not d:
        raise RuntimeError("set FULCRUM_BIN to the directory holding fulcrumd (make test-python does)")
    p = os.path.join(d, "fulcrumd")
    if not os.access(p, os.X_OK):
        raise RuntimeError("{} is not an executable; run make build".format(p))
    return p


class Daemon:
    """A real fulcrumd in a temporary runtime directory."""

    def __init__(self, *extra, env=None):
        # Unix socket paths are limited to ~108 bytes: keep the directory short.
        self.dir = tempfile.mkdtemp(prefix="fc", dir="/tmp")
        self.sock = os.path.join(self.dir, "run", "worker.sock")
        self.log = open(os.path.join(self.dir, "fulcrumd.log"), "w+")
        self.proc = subprocess.Popen(
            [fulcrumd_path(), "--runtime-dir", os.path.join(self.dir, "run"),
             "--state-dir", os.path.join(self.dir, "state"), "--board", "none",
             "--log-level", "debug"] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("fulcrumd exited: " + self.output())
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sock)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("fulcrumd did not open its socket: " + self.output())
                time.sleep(0.02)
            finally:
                s.close()

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.d = Daemon("--latency", "200ms")
        self.addCleanup(self.d.stop)

    def client(self, **kw):
        c = Client(self.d.sock, **kw)
        self.addCleanup(c.close)
        return c

    def test_train_steps(self):
        c = self.client(role="train", workload="resnet18", batch=32)
        self.assertTrue(c.worker_id.startswith("train-"))
        self.assertEqual(c.latency_budget_ms, 200)
        ids = []
        for _ in range(5):
            with c.train_step() as g:
                self.assertEqual(g.kind, "train")
                self.assertEqual(g.batch, 32)
                self.assertGreater(g.deadline_ms, 0)
                ids.append(g.id)
                time.sleep(0.002)
        self.assertEqual(len(set(ids)), 5)
        c.heartbeat()

    def test_release_happens_when_the_step_raises(self):
        c = self.client(role="train", workload="resnet18", batch=8)
        with self.assertRaises(ZeroDivisionError):
            with c.train_step():
                1 / 0
        # The turn was released: the next step is granted.
        with c.train_step() as g:
            self.assertEqual(g.kind, "train")

    def test_inference_round_trips(self):
        c = self.client(role="infer", workload="yolo", batch=4, batch_sizes=[1, 2, 4])
        batches = []

        def handler(payloads):
            batches.append(len(payloads))
            return [p * 2 for p in payloads]

        with InferenceServer(c, handler) as srv:
            futs = []
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                futs = list(ex.map(srv.submit, range(40)))
            results = [f.result(timeout=10) for f in futs]
        self.assertEqual(results, [2 * i for i in range(40)])
        self.assertTrue(all(1 <= b <= 4 for b in batches), batches)
        self.assertEqual(sum(batches), 40)

    def test_failed_requests_are_reported(self):
        c = self.client(role="infer", workload="yolo", batch=2)

        def handler(payloads):
            return [ValueError("bad input") if p == "bad" else p.upper() for p in payloads]

        with InferenceServer(c, handler) as srv:
            ok, bad = srv.submit("good"), srv.submit("bad")
            self.assertEqual(ok.result(timeout=10), "GOOD")
            with self.assertRaises(ValueError):
                bad.result(timeout=10)

    def test_handler_exception_fails_the_batch(self):
        c = self.client(role="infer", workload="yolo", batch=1)

        def handler(payloads):
            raise RuntimeError("model crashed")

        logging.getLogger("fulcrum_client").setLevel(logging.CRITICAL)
        self.addCleanup(logging.getLogger("fulcrum_client").setLevel, logging.NOTSET)

        with InferenceServer(c, handler) as srv:
            with self.assertRaises(RuntimeError):
                srv.submit(1).result(timeout=10)
            # The server keeps serving after a failed batch.
            with self.assertRaises(RuntimeError):
                srv.submit(2).result(timeout=10)

    def test_training_and_inference_together(self):
        tr = self.client(role="train", workload="resnet18", batch=16)
        inf = self.client(role="infer", workload="yolo", batch=2, batch_sizes=[1, 2])
        stop = threading.Event()
        steps = []

        def train():
            while not stop.is_set():
                with tr.train_step():
                    time.sleep(0.005)
                steps.append(1)

        t = threading.Thread(target=train)
        t.start()
        try:
            with InferenceServer(inf, lambda ps: [p + 1 for p in ps]) as srv:
                futs = []
                for i in range(30):
                    futs.append(srv.submit(i))
                    time.sleep(0.003)
                self.assertEqual([f.result(timeout=10) for f in futs], [i + 1 for i in range(30)])
        finally:
            stop.set()
            t.join(timeout=10)
        self.assertGreater(len(steps), 0)

    def test_registration_errors(self):
        with self.assertRaises(FulcrumError) as cm:
            self.client(role="infer", workload="yolo", batch=3, batch_sizes=[1, 2, 4])
        self.assertEqual(cm.exception.code, "invalid")
        c = self.client()
        with self.assertRaises(FulcrumError) as cm:
            c.acquire()
        self.assertEqual(cm.exception.code, "not_registered")

    def test_release_error_surfaces_at_next_acquire(self):
        c = self.client(role="train", workload="resnet18", batch=8)
        g = c.acquire()
        c.release(g.id + 100, 1.0)  # not the held grant
        c.heartbeat()  # a round trip: the release's error reply has arrived
        with self.assertRaises(FulcrumError) as cm:
            c.acquire()
        self.assertEqual(cm.exception.code, "out_of_order")
        c.release(g, 1.0)
        with c.train_step():
            pass

    def test_heartbeat_while_another_thread_waits_for_a_grant(self):
        # The waiting acquire reads the socket; the heartbeat's echo it reads must reach
        # the heartbeat's thread, and the grant must still reach the acquire.
        c = self.client(role="infer", workload="resnet50", batch_sizes=[1, 2, 4])
        got = []
        t = threading.Thread(target=lambda: got.append(c.acquire()))
        t.start()
        time.sleep(0.1)  # the acquire is blocked: no requests yet
        for _ in range(3):
            c.heartbeat(timeout=5)
        self.assertTrue(t.is_alive())
        c.arrivals([("q1", 0.0)])
        t.join(timeout=10)
        self.assertFalse(t.is_alive())
        self.assertEqual(got[0].kind, "infer")
        self.assertEqual(got[0].request_ids, ["q1"])
        c.release(got[0], 1.0, results=[("q1", True)])

    def test_close_ends_a_waiting_acquire(self):
        c = self.client(role="infer", workload="resnet50", batch_sizes=[1, 2, 4])
        errs = []

        def wait():
            try:
                c.acquire()
            except FulcrumError as e:
                errs.append(e)
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)
        c.close()
        t.join(timeout=10)
        self.assertFalse(t.is_alive())
        self.assertEqual(errs[0].code, "closed")

    def test_daemon_shutdown_is_reported(self):
        c = self.client(role="train", workload="resnet18", batch=8)
        with c.train_step():
            pass
        self.d.proc.send_signal(signal.SIGTERM)
        self.d.proc.wait(timeout=10)
        with self.assertRaises(FulcrumError):
            c.acquire()

    def test_no_daemon(self):
        with self.assertRaises(FulcrumError) as cm:
            Client(os.path.join(self.d.dir, "nope.sock"))
        self.assertIn("is fulcrumd running", str(cm.exception))


class HoldLimitTest(unittest.TestCase):
    def test_turn_held_past_the_hold_limit(self):
        # fulcrumd takes the turn back, grants it to the other worker, and the holder's
        # next call raises turn_expired (docs/protocol.md), not a broken pipe.
        d = Daemon(env={"FULCRUM_WORKER_HOLD_MIN_MS": "300", "FULCRUM_WORKER_HOLD_FACTOR": "1"})
        self.addCleanup(d.stop)
        hog = Client(d.sock, role="train", workload="resnet18", batch=8)
        self.addCleanup(hog.close)
        other = Client(d.sock, role="train", workload="resnet18", batch=8)
        self.addCleanup(other.close)
        g = hog.acquire()
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            og = ex.submit(other.acquire).result(timeout=10)
        other.release(og, 1.0)
        err = None
        for _ in range(3):  # the first send after the close may still be taken by the kernel
            try:
                hog.release(g, 1.0)
                hog.acquire()
            except FulcrumError as e:
                err = e
                break
        self.assertIsNotNone(err)
        self.assertEqual(err.code, "turn_expired", str(err))
        self.assertIn("hold limit", err.message)


class SecondDaemonTest(unittest.TestCase):
    def test_second_daemon_refuses_to_start(self):
        d = Daemon()
        self.addCleanup(d.stop)
        p = subprocess.run([fulcrumd_path(), "--runtime-dir", os.path.join(d.dir, "run"),
                            "--state-dir", os.path.join(d.dir, "state2"), "--board", "none"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"another fulcrumd is running (pid %d)" % d.proc.pid, p.stdout)


if __name__ == "__main__":
    unittest.main()
