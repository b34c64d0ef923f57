"""Tests against a real fulcrumd (built by `make build`; FULCRUM_BIN is its directory)."""

import concurrent.futures
import json
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
        self.control = os.path.join(self.dir, "run", "control.sock")
        self.log = open(os.path.join(self.dir, "fulcrumd.log"), "w+")
        self.extra, self.env = list(extra), env
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [fulcrumd_path(), "--runtime-dir", os.path.join(self.dir, "run"),
             "--state-dir", os.path.join(self.dir, "state"), "--board", "none",
             "--log-level", "debug"] + self.extra,
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, **(self.env or {})))
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

    def restart(self, down_s):
        """SIGTERM fulcrumd, stay down down_s seconds, start it again on the same
        directories; returns how long the socket was unanswered."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)
        time.sleep(down_s)
        self.start()
        return time.monotonic() - t0

    def status(self):
        """GET /v1/status on the control socket."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.control)
        try:
            s.sendall(b"GET /v1/status HTTP/1.0\r\nHost: fulcrumd\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

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

    def test_many_long_arrivals_are_split_under_the_line_limit(self):
        # 4,096 requests with 100-byte ids are one ~520 KB line: fulcrumd discards a line
        # over 64 KiB as too_long, so the client must split by size as well as by count.
        c = self.client(role="infer", workload="yolo", batch=4, batch_sizes=[1, 2, 4])
        sent = []
        real_send = c._send

        def spy(msg, conn=None):
            sent.append(len(json.dumps(msg, separators=(",", ":"))) + 1)
            return real_send(msg, conn)

        c._send = spy
        c.arrivals([("r{:099d}".format(i), 0.0) for i in range(4096)])
        self.assertGreater(len(sent), 1)
        self.assertTrue(all(n <= 64 * 1024 for n in sent), sent)
        c.heartbeat()  # the connection survived: nothing was refused as too long
        g = c.acquire()
        self.assertEqual(g.kind, "infer")
        self.assertTrue(g.request_ids and all(len(r) == 100 for r in g.request_ids), g.request_ids)
        c.release(g, 1.0)

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
        # reconnect=False: the lost connection's error is raised, as before issue 27.
        c = self.client(role="train", workload="resnet18", batch=8, reconnect=False)
        with c.train_step():
            pass
        self.d.proc.send_signal(signal.SIGTERM)
        self.d.proc.wait(timeout=10)
        with self.assertRaises(FulcrumError) as cm:
            c.acquire()
        self.assertEqual(cm.exception.code, "shutting_down", str(cm.exception))

    def test_daemon_that_does_not_come_back(self):
        # A trainer waits for fulcrumd; reconnect_timeout bounds the wait.
        c = self.client(role="train", workload="resnet18", batch=8, reconnect_timeout=0.5)
        self.d.proc.send_signal(signal.SIGTERM)
        self.d.proc.wait(timeout=10)
        start = time.monotonic()
        with self.assertRaises(FulcrumError) as cm:
            with c.train_step():
                pass
        self.assertEqual(cm.exception.code, "closed")
        self.assertIn("did not come back", cm.exception.message)
        self.assertGreaterEqual(time.monotonic() - start, 0.4)
        self.assertFalse(c.connected)

    def test_control_socket_named(self):
        # Pointed at the control socket, the error says which socket it is (it was "a
        # line that is not JSON"). The control socket opens after the worker socket.
        deadline = time.monotonic() + 10
        while not os.path.exists(self.d.control) and time.monotonic() < deadline:
            time.sleep(0.02)
        with self.assertRaises(FulcrumError) as cm:
            Client(self.d.control, role="train", workload="resnet18", batch=8, reconnect=False)
        msg = str(cm.exception)
        self.assertIn("control socket", msg)
        self.assertIn("not its worker socket", msg)
        self.assertNotIn("not JSON", msg)

    def test_no_daemon(self):
        with self.assertRaises(FulcrumError) as cm:
            Client(os.path.join(self.d.dir, "nope.sock"))
        self.assertIn("is fulcrumd running", str(cm.exception))


class HoldLimitTest(unittest.TestCase):
    def test_turn_held_past_the_hold_limit(self):
        # fulcrumd takes the turn back, grants it to the other worker, and the holder's
        # next call raises turn_expired (docs/protocol.md), not a broken pipe.
        # A second of hold: the other worker must release its own turn within it, which a
        # loaded CI host may delay by a few hundred milliseconds.
        d = Daemon(env={"FULCRUM_WORKER_HOLD_MIN_MS": "1000", "FULCRUM_WORKER_HOLD_FACTOR": "1"})
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


class RestartTest(unittest.TestCase):
    """fulcrumd restarts under running workers (issue 27): none of them dies, no accepted
    request is lost, training resumes under the new fulcrumd."""

    def test_workers_survive_a_restart(self):
        d = Daemon("--latency", "300ms")
        self.addCleanup(d.stop)
        logging.getLogger("fulcrum_client").setLevel(logging.ERROR)
        self.addCleanup(logging.getLogger("fulcrum_client").setLevel, logging.NOTSET)
        waiter = Client(d.sock, role="train", workload="resnet18", batch=8, on_profile=lambda b: time.sleep(0.004))
        runner = Client(d.sock, role="train", workload="lstm", batch=8, train_while_away=True)
        inf = Client(d.sock, role="infer", workload="yolo", batch=4, batch_sizes=[1, 2, 4])
        for c in (waiter, runner, inf):
            self.addCleanup(c.close)
        stop = threading.Event()
        steps = {"waiter": [], "runner": []}  # (time, kind) per step
        errors = []

        def train(name, c):
            try:
                while not stop.is_set():
                    with c.train_step() as g:
                        time.sleep(0.004)
                    steps[name].append((time.monotonic(), g.kind))
            except Exception as e:  # a worker that dies fails the test
                errors.append((name, e))

        threads = [threading.Thread(target=train, args=(n, c)) for n, c in (("waiter", waiter), ("runner", runner))]
        for t in threads:
            t.start()
        futs = []
        with InferenceServer(inf, lambda ps: [p * 2 for p in ps]) as srv:
            def submit_for(seconds):
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    futs.append((len(futs), srv.submit(len(futs))))
                    time.sleep(0.02)

            submit_for(1.0)
            restarted = threading.Thread(target=lambda: setattr(self, "down_s", d.restart(1.0)))
            restarted.start()
            submit_for(1.5)  # through the restart: fulcrumd away about a second
            restarted.join(timeout=30)
            back = time.monotonic()
            submit_for(1.5)
            results = [(i, f.result(timeout=20)) for i, f in futs]
            unmanaged = srv.unmanaged_batches
        stop.set()
        for t in threads:
            t.join(timeout=20)
        self.assertEqual(errors, [])
        self.assertTrue(all(not t.is_alive() for t in threads))
        self.assertEqual([r for _, r in results], [2 * i for i, _ in results], "a request was lost or mixed up")
        print("\nfulcrumd down {:.2f} s; away (lost → registered again): waiting trainer {:.2f} s, trainer while "
              "away {:.2f} s, inference {:.2f} s; {} requests, {} inference batches served unmanaged".format(
                  self.down_s, waiter.last_gap_s or -1, runner.last_gap_s or -1, inf.last_gap_s or -1, len(results),
                  unmanaged), file=sys.stderr)
        for c in (waiter, runner, inf):
            self.assertEqual(c.reconnects, 1, c.worker_id)
        self.assertGreater(unmanaged, 0, "no request was served while fulcrumd was away")
        self.assertFalse(any(k == "unmanaged" for _, k in steps["waiter"]), "the waiting trainer ran without a turn")
        self.assertTrue(any(k == "unmanaged" for _, k in steps["runner"]), "train_while_away ran no step unmanaged")
        self.assertTrue(any(t > back and k == "train" for t, k in steps["waiter"]), "training did not resume")
        st = d.status()
        wl = {(w["role"], w["workload"]): w for w in st["workloads"]}
        self.assertGreater(wl[("train", "resnet18")]["minibatches"], 0)
        self.assertGreater(wl[("infer", "yolo")]["served"], 0)
        self.assertEqual(wl[("infer", "yolo")]["failed"], 0)


class StopTest(unittest.TestCase):
    def test_stop_releases_the_batch_being_served(self):
        """stop() right after a future resolved, while the server thread has not released
        the batch yet (here a done-callback that takes its time): the served request must
        not be counted as failed by fulcrumd (the batch's release comes before the close)."""
        d = Daemon()
        self.addCleanup(d.stop)
        inf = Client(d.sock, role="infer", workload="stopinfer", batch=4, batch_sizes=[1, 2, 4])
        self.addCleanup(inf.close)
        gate = threading.Event()

        def handler(ps):
            gate.wait(10)
            return [p * 2 for p in ps]

        srv = InferenceServer(inf, handler).start()
        self.addCleanup(srv.stop)
        f = srv.submit(21)
        f.add_done_callback(lambda _: time.sleep(0.3))  # runs on the server thread, before its release
        gate.set()
        self.assertEqual(f.result(timeout=10), 42)
        srv.stop()
        end = time.monotonic() + 10
        while True:  # fulcrumd handles the release and then the close: wait for the close
            wl = {(w["role"], w["workload"]): w for w in d.status()["workloads"]}[("infer", "stopinfer")]
            if wl["live_workers"] == 0 or time.monotonic() > end:
                break
            time.sleep(0.02)
        self.assertEqual(wl["live_workers"], 0, wl)
        self.assertEqual((wl["served"], wl["failed"]), (1, 0), wl)


class WarmupTest(unittest.TestCase):
    def test_warmup_runs_in_the_serving_thread_before_start_returns(self):
        """start(warmup) runs warmup in the thread that then calls the handler (CUDA keeps
        per-thread state: a warm-up elsewhere is paid again there), and returns after it."""
        d = Daemon()
        self.addCleanup(d.stop)
        inf = Client(d.sock, role="infer", workload="warminfer", batch=2, batch_sizes=[1, 2])
        self.addCleanup(inf.close)
        threads = {}

        def warmup():
            time.sleep(0.2)
            threads["warmup"] = threading.get_ident()

        def handler(ps):
            threads["handler"] = threading.get_ident()
            return [p + 1 for p in ps]

        srv = InferenceServer(inf, handler).start(warmup)
        self.addCleanup(srv.stop)
        self.assertIn("warmup", threads, "start() returned before the warm-up ran")
        self.assertNotEqual(threads["warmup"], threading.get_ident())
        self.assertEqual(srv.submit(1).result(timeout=10), 2)
        self.assertEqual(threads["handler"], threads["warmup"])

    def test_warmup_failure_is_raised_by_start(self):
        d = Daemon()
        self.addCleanup(d.stop)
        inf = Client(d.sock, role="infer", workload="warmfail", batch=1, batch_sizes=[1])
        self.addCleanup(inf.close)

        def warmup():
            raise RuntimeError("CUDA out of memory")

        with self.assertRaisesRegex(RuntimeError, "out of memory"):
            InferenceServer(inf, lambda ps: ps).start(warmup)


class ProfilesTest(unittest.TestCase):
    def test_no_on_profile_declines_profile_batches(self):
        d = Daemon()
        self.addCleanup(d.stop)
        bare = Client(d.sock, role="infer", workload="pyinfer", batch=4, batch_sizes=[1, 2, 4])
        self.addCleanup(bare.close)
        tr = Client(d.sock, role="train", workload="pytrain", batch=8)
        self.addCleanup(tr.close)

        def status_until(pred):
            end = time.monotonic() + 10
            while True:
                st = d.status()
                if pred(st) or time.monotonic() > end:
                    return st
                time.sleep(0.05)

        st = status_until(lambda st: "pyinfer" in st.get("profiling", "") and "pytrain" in st.get("profiling", ""))
        self.assertIn("on_profile", st.get("profiling", ""), st)
        workers = {w["workload"]: w for w in st["workers"]}
        self.assertTrue(workers["pyinfer"].get("no_profiles"), workers)
        # Setting on_profile after registering registers again at the next acquire, now
        # accepting profile batches.
        tr.on_profile = lambda b: time.sleep(0.001)
        first = tr.worker_id
        with tr.train_step():
            pass
        self.assertNotEqual(tr.worker_id, first)
        st = status_until(lambda st: "pytrain" not in st.get("profiling", ""))
        workers = {w["workload"]: w for w in st["workers"]}
        self.assertFalse(workers["pytrain"].get("no_profiles"), workers)
        self.assertIn("pyinfer", st.get("profiling", ""))
        self.assertNotIn("pytrain", st.get("profiling", ""))


if __name__ == "__main__":
    unittest.main()
