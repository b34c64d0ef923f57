"""The worker client: one registered connection to fulcrumd."""

import collections
import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import select
import socket
import threading
import time

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 64 * 1024

log = logging.getLogger("fulcrum_client")


class FulcrumError(Exception):
    """An error reply from fulcrumd (code, message, ref) or a lost connection."""

    def __init__(self, code, message, ref=""):
        super().__init__("{}: {}".format(code, message))
        self.code = code
        self.message = message
        self.ref = ref


Grant = collections.namedtuple("Grant", "id kind batch request_ids deadline_ms")
Grant.__doc__ = """A turn on the GPU: kind is "train", "infer" or "profile"; batch the
minibatch size to run; request_ids the inference requests to serve; deadline_ms how long
fulcrumd expects the turn to take at most."""


class Client:
    """A worker connection to fulcrumd's worker socket.

    Pass role ("train" or "infer") and workload to register at once, or call register()
    later. A connection acts only for the registration made on it. Methods may be called
    from several threads; acquire() from one at a time.
    """

    def __init__(self, socket_path=None, role=None, workload=None, batch=None,
                 batch_sizes=None, connect_timeout=10.0):
        if socket_path is None:
            socket_path = os.environ.get("FULCRUM_WORKER_SOCKET", "/run/fulcrum/worker.sock")
        self.socket_path = socket_path
        self.worker_id = None
        self.token = None
        self.latency_budget_ms = None
        self.role = None
        self.batch = None
        self.on_profile = None  # callable(batch_size): run a dummy batch of that size
        self._seq = itertools.count(1)
        self._wlock = threading.Lock()
        # There is no reader thread: a call waiting for a reply reads the socket itself,
        # one call at a time (_reading), and leaves what it reads for others in _grants,
        # _replies and _errors. Handing every grant over from a reader thread cost a
        # thread switch on each turn (docs/runtime.md, protocol round trip).
        self._cond = threading.Condition()
        self._reading = False
        self._buf = b""
        self._grants = collections.deque()  # grants (or the acquire's own error) not yet taken
        self._errors = collections.deque()
        self._replies = {}
        self._closed = False
        self._close_reason = None
        self._acquire_seq = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(connect_timeout)
        try:
            self._sock.connect(socket_path)
        except OSError as e:
            self._sock.close()
            raise FulcrumError("connect", "cannot connect to fulcrumd at {}: {} (is fulcrumd running? "
                               "check runtime_dir)".format(socket_path, e)) from e
        self._sock.settimeout(None)
        if role is not None:
            try:
                self.register(role, workload, batch=batch, batch_sizes=batch_sizes)
            except BaseException:
                self.close()
                raise

    # -- wire -----------------------------------------------------------------------
    def _send(self, msg):
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self._wlock:
            if self._closed:
                reason = self._take_closing_error()
                if reason is not None:
                    raise reason
                raise FulcrumError("closed", "the connection to fulcrumd is closed: {}".format(self._close_reason))
            try:
                self._sock.sendall(data)
            except OSError as e:
                reason = self._close_reason_error()
                if reason is not None:
                    raise reason from e
                raise FulcrumError("closed", "send {} to fulcrumd: {}".format(msg.get("type"), e)) from e

    # Errors fulcrumd sends just before it closes a connection (docs/protocol.md).
    _CLOSING_CODES = ("turn_expired", "idle_timeout", "shutting_down", "busy")

    def _close_reason_error(self):
        """After a send failed: read what fulcrumd sent before closing the connection and
        return the error that ended it (e.g. turn_expired), or None."""
        with self._cond:
            if self._reading:
                return None  # the reading call will raise it
            self._reading = True
        try:
            deadline = time.monotonic() + 0.2
            while not self._closed and time.monotonic() < deadline:
                self._read_some(max(0.0, deadline - time.monotonic()))
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()
        return self._take_closing_error()

    def _take_closing_error(self):
        with self._cond:
            for err in reversed(self._errors):
                if err.code in self._CLOSING_CODES:
                    self._errors.remove(err)
                    return err
        return None

    def _read_some(self, timeout):
        """Read what the socket has (waiting up to timeout seconds; None: until something
        comes) and dispatch every whole line. Only the thread that set _reading calls it."""
        try:
            if timeout is not None:
                ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout))
                if not ready:
                    return
            chunk = self._sock.recv(65536)
        except (OSError, ValueError) as e:  # ValueError: select on a socket closed meanwhile
            self._mark_closed(str(e))
            return
        if not chunk:
            self._mark_closed("fulcrumd closed the connection")
            return
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except ValueError as e:
                self._mark_closed("fulcrumd sent a line that is not JSON: {}".format(e))
                return
            if isinstance(m, dict):
                self._dispatch(m)
        if len(self._buf) > MAX_LINE_BYTES:
            self._mark_closed("fulcrumd sent an oversized line")

    def _mark_closed(self, reason):
        with self._cond:
            self._closed = True
            self._close_reason = self._close_reason or reason
            self._cond.notify_all()

    def _wait(self, ready, deadline, what):
        """Return ready()'s first non-None value (checked under _cond), reading the socket
        meanwhile whenever no other thread is. deadline: time.monotonic() value or None."""
        while True:
            with self._cond:
                while True:
                    v = ready()
                    if v is not None:
                        return v
                    if self._closed:
                        reason = self._take_closing_error()  # _cond is reentrant
                        if reason is not None:
                            raise reason
                        raise FulcrumError("closed", "fulcrumd closed the connection: {}".format(self._close_reason))
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise FulcrumError("timeout", "no reply to {}".format(what))
                    if not self._reading:
                        self._reading = True
                        break
                    self._cond.wait(left)
            try:
                self._read_some(left)
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()  # another waiter may take over the reading

    def _dispatch(self, m):
        t = m.get("type")
        with self._cond:
            seq = m.get("seq")
            if t == "grant":
                self._grants.append(m)
                self._cond.notify_all()
                return
            if t == "error":
                err = FulcrumError(m.get("code", ""), m.get("message", ""), m.get("ref", ""))
                if seq and seq in self._replies:
                    self._replies[seq] = err
                elif seq and seq == self._acquire_seq:
                    self._grants.append(err)  # the waiting acquire's own error
                else:
                    self._errors.append(err)  # e.g. to a release: raised by the next call
            elif t in ("registered", "heartbeat") and seq in self._replies:
                self._replies[seq] = m
            self._cond.notify_all()

    def _call(self, msg, timeout):
        """Send msg with a fresh seq and wait for the reply carrying it."""
        seq = next(self._seq)
        msg["seq"] = seq
        with self._cond:
            self._replies[seq] = None
        try:
            self._send(msg)
            reply = self._wait(lambda: self._replies.get(seq), time.monotonic() + timeout,
                               "{} within {}s".format(msg["type"], timeout))
        finally:
            with self._cond:
                self._replies.pop(seq, None)
        if isinstance(reply, FulcrumError):
            raise reply
        return reply

    def _take_error(self):
        with self._cond:
            return self._errors.popleft() if self._errors else None

    # -- protocol -------------------------------------------------------------------
    def register(self, role, workload, batch=None, batch_sizes=None, timeout=10.0):
        """Register this connection as a training or inference worker."""
        if role not in ("train", "infer"):
            raise ValueError('role must be "train" or "infer"')
        msg = {"type": "register", "v": PROTOCOL_VERSION, "role": role, "workload": workload, "pid": os.getpid()}
        if batch:
            msg["batch"] = int(batch)
        if batch_sizes:
            msg["batch_sizes"] = [int(b) for b in batch_sizes]
        reply = self._call(msg, timeout)
        if reply.get("v") != PROTOCOL_VERSION:
            raise FulcrumError("bad_version", "fulcrumd speaks protocol v{}, this client v{}; upgrade one of them".format(
                reply.get("v"), PROTOCOL_VERSION))
        self.worker_id = reply["worker_id"]
        self.token = reply.get("token")
        self.latency_budget_ms = reply.get("latency_budget_ms")
        self.role = role
        self.batch = batch
        return self.worker_id

    def heartbeat(self, timeout=10.0):
        """Round trip to fulcrumd; raises if the connection is gone."""
        self._call({"type": "heartbeat"}, timeout)

    def arrivals(self, requests):
        """Report inference requests: a list of (request_id, age_ms) pairs."""
        self._send({"type": "arrivals", "requests": [{"id": str(i), "age_ms": max(0.0, float(a))} for i, a in requests]})

    def acquire(self):
        """Ask for a turn and block until fulcrumd grants one. Returns a Grant. An error
        reply that arrived since the last call (e.g. to a release) is raised instead, and
        so is fulcrumd's error reply to this acquire."""
        err = self._take_error()
        if err:
            raise err
        seq = next(self._seq)
        with self._cond:
            self._acquire_seq = seq
        self._send({"type": "acquire", "seq": seq})
        g = self._wait(lambda: self._grants.popleft() if self._grants else None, None, "acquire")
        if isinstance(g, FulcrumError):
            raise g
        return Grant(g["grant"], g.get("kind", ""), g.get("batch", 0), g.get("request_ids") or [],
                     g.get("deadline_ms", 0.0))

    def release(self, grant, duration_ms, samples=None, results=None):
        """End the turn of grant (a Grant or its id) with the measured duration.
        results: for inference, a list of (request_id, ok[, error]) tuples."""
        gid = grant.id if isinstance(grant, Grant) else int(grant)
        msg = {"type": "release", "grant": gid, "duration_ms": max(0.0, float(duration_ms))}
        if samples:
            msg["samples"] = int(samples)
        if results is not None:
            out = []
            for r in results:
                item = {"id": str(r[0]), "ok": bool(r[1])}
                if len(r) > 2 and r[2]:
                    item["error"] = str(r[2])[:200]
                out.append(item)
            msg["results"] = out
        self._send(msg)

    def _run_profile(self, grant):
        """Serve a profile grant: run the user's dummy batch and report its time."""
        start = time.monotonic()
        if self.on_profile is None:
            log.warning("fulcrumd asked for a profile batch of %d but no on_profile callback is set; "
                        "releasing at once", grant.batch)
        else:
            self.on_profile(grant.batch)
        self.release(grant, (time.monotonic() - start) * 1000.0, samples=grant.batch)

    def next_grant(self):
        """acquire() until a non-profile grant comes, serving profile grants on the way."""
        while True:
            g = self.acquire()
            if g.kind == "profile":
                self._run_profile(g)
                continue
            return g

    @contextlib.contextmanager
    def train_step(self, samples=None):
        """Wrap one training minibatch: waits for the turn, yields the Grant, then
        releases with the measured duration (also when the body raises)."""
        g = self.next_grant()
        start = time.monotonic()
        try:
            yield g
        finally:
            self.release(g, (time.monotonic() - start) * 1000.0, samples=samples)

    def close(self):
        """Close the connection; fulcrumd releases a held turn at once."""
        with self._cond:
            if not self._closed:
                self._close_reason = "closed by the client"
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InferenceServer:
    """Serves inference requests in the batches fulcrumd grants.

    handler(list_of_payloads) returns a list of results of the same length (an element
    that is an Exception fails that request); if it raises, the whole batch fails.
    on_profile(batch_size), if given, runs a dummy batch when fulcrumd profiles.
    submit(payload) may be called from any thread and returns a concurrent.futures.Future.
    """

    def __init__(self, client, handler, on_profile=None):
        if client.role != "infer":
            raise ValueError("InferenceServer needs a client registered with role='infer'")
        self.client = client
        self.handler = handler
        if on_profile is not None:
            client.on_profile = on_profile
        self._pending = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._thread = None
        self._stopping = False

    def submit(self, payload):
        """Queue one request; returns a Future resolved with the handler's result."""
        fut = concurrent.futures.Future()
        rid = "r{}".format(next(self._ids))
        with self._lock:
            if self._stopping:
                raise FulcrumError("closed", "the inference server is stopped")
            self._pending[rid] = (payload, fut, time.monotonic())
        try:
            self.client.arrivals([(rid, 0.0)])
        except FulcrumError as e:
            with self._lock:
                self._pending.pop(rid, None)
            fut.set_exception(e)
        return fut

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="fulcrum-inference", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while True:
            try:
                g = self.client.next_grant()
            except FulcrumError as e:
                self._fail_all(e)
                return
            with self._lock:
                items = [(rid, self._pending.pop(rid, None)) for rid in g.request_ids]
            payloads = [it[1][0] for it in items if it[1] is not None]
            start = time.monotonic()
            try:
                outs = list(self.handler(payloads)) if payloads else []
                if len(outs) != len(payloads):
                    raise ValueError("handler returned {} results for {} payloads".format(len(outs), len(payloads)))
                batch_err = None
            except Exception as e:  # the app's handler failed: the whole batch fails
                log.exception("inference handler failed")
                outs, batch_err = [], e
            duration_ms = (time.monotonic() - start) * 1000.0
            results = []
            k = 0
            for rid, it in items:
                if it is None:
                    results.append((rid, False, "unknown request"))
                    continue
                fut = it[1]
                if batch_err is not None:
                    fut.set_exception(batch_err)
                    results.append((rid, False, repr(batch_err)))
                else:
                    out = outs[k]
                    k += 1
                    if isinstance(out, Exception):
                        fut.set_exception(out)
                        results.append((rid, False, repr(out)))
                    else:
                        fut.set_result(out)
                        results.append((rid, True))
            try:
                self.client.release(g, duration_ms, results=results)
            except FulcrumError as e:
                self._fail_all(e)
                return

    def _fail_all(self, err):
        with self._lock:
            pending, self._pending = self._pending, {}
        for _, fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(err)

    def stop(self):
        """Stop serving: closes the client's connection; unserved requests fail."""
        with self._lock:
            self._stopping = True
        self.client.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._fail_all(FulcrumError("closed", "the inference server stopped"))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
