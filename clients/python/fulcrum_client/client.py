"""The worker client: a registration with fulcrumd that outlives its restarts."""

import collections
import concurrent.futures
import contextlib
import itertools
import json
import logging
import os
import random
import select
import socket
import threading
import time

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 64 * 1024
MAX_REQUESTS_MSG = 4096

log = logging.getLogger("fulcrum_client")


def _arrival_chunks(reqs):
    """Split arrivals into messages fulcrumd accepts: at most MAX_REQUESTS_MSG requests and
    a line under MAX_LINE_BYTES each (4,096 long request ids make a line over the limit,
    which fulcrumd discards as too_long)."""
    budget = MAX_LINE_BYTES - 64  # the envelope {"type":"arrivals","requests":[...]}
    chunk, size = [], 0
    for r in reqs:
        n = len(json.dumps(r, separators=(",", ":"))) + 1
        if chunk and (len(chunk) >= MAX_REQUESTS_MSG or size + n > budget):
            yield chunk
            chunk, size = [], 0
        chunk.append(r)
        size += n
    if chunk:
        yield chunk


class FulcrumError(Exception):
    """An error reply from fulcrumd (code, message, ref) or a lost connection.

    code "away": fulcrumd is away (the connection was lost, reconnection under way) and
    the call was asked not to wait for it."""

    def __init__(self, code, message, ref=""):
        super().__init__("{}: {}".format(code, message))
        self.code = code
        self.message = message
        self.ref = ref


class RateLimited(FulcrumError):
    """One inference request fulcrumd refused (code "rate_limited"): its stream asked for
    more than its share of the GPU while other inference streams are registered. The
    request will not be served; the connection and the other requests carry on.

    request_id is the refused request, workload the stream (its registered workload),
    fulcrumd_message what fulcrumd said (the counts and the share)."""

    def __init__(self, request_id, workload, fulcrumd_message, ref="arrivals"):
        msg = ("request {} of inference stream {!r} refused by fulcrumd: {}. Lower this stream's "
               "request rate, or give it a larger share of the GPU (fewer inference streams beside it); "
               "see docs/protocol.md, per-stream admission").format(request_id, workload, fulcrumd_message)
        super().__init__("rate_limited", msg, ref)
        self.request_id = request_id
        self.workload = workload
        self.fulcrumd_message = fulcrumd_message


Grant = collections.namedtuple("Grant", "id kind batch request_ids deadline_ms micro_batch", defaults=(0,))
Grant.__doc__ = """A turn on the GPU: kind is "train", "infer" or "profile" ("unmanaged" for a
training step taken while fulcrumd is away, see Client(train_while_away=True)); batch the
minibatch size to run; request_ids the inference requests to serve; deadline_ms how long
fulcrumd expects the turn to take at most; micro_batch (training, 0: the whole minibatch)
the samples to run in this turn when the worker declared micro_batches (see
Client.micro_steps)."""

MicroStep = collections.namedtuple("MicroStep", "grant start stop k scale last")
MicroStep.__doc__ = """One turn of a minibatch run as micro-batches (Client.micro_steps): run
samples [start, stop) of the minibatch; multiply the loss by scale (= 1/k for k equal
micro-batches) so that the accumulated gradient is the minibatch's; last is True for the
turn that completes the minibatch: step the optimizer after it (and zero the gradients)."""

# Errors fulcrumd sends just before it closes a connection (docs/protocol.md).
_CLOSING_CODES = ("turn_expired", "idle_timeout", "shutting_down", "busy")
# What a reconnection cures: fulcrumd stopping or gone, the connection ended with no
# reason given ("closed"), no connection at all ("connect"), or too many workers while
# everyone reconnects at once ("busy"). turn_expired and idle_timeout are the worker's
# own doing and are raised.
_LOST_CODES = ("shutting_down", "closed", "connect", "busy")


class _Conn:
    """One connection to fulcrumd and what has been read from it."""

    def __init__(self, sock, gen):
        self.sock = sock
        self.gen = gen  # the registration it carries (Client.gen once installed)
        self.buf = b""
        self.grants = collections.deque()  # grants (or the acquire's own error) not yet taken
        self.errors = collections.deque()
        self.replies = {}
        self.closed = False
        self.close_reason = None
        self.reading = False
        self.acquire_seq = None
        self.by_client = False  # closed by this client (close(), registering again)


class Client:
    """A worker connection to fulcrumd's worker socket.

    Pass role ("train" or "infer") and workload to register at once, or call register()
    later. Methods may be called from several threads; acquire() from one at a time.

    on_profile(batch_size) runs one real batch of that size when fulcrumd profiles the
    workload. Without it the worker declines profile batches at registration and fulcrumd
    leaves the workload out of live profiling (a batch that runs nothing would be stored
    as the workload's time). Setting client.on_profile after registering registers again
    (on a new connection) at the next acquire.

    When fulcrumd restarts (reconnect=True, the default) the client reconnects with a
    bounded, jittered exponential back-off (backoff=(first, longest) seconds, jitter a
    fraction of each wait) and registers again. acquire() and train_step() wait for it,
    at most reconnect_timeout seconds (None: as long as it takes); with
    train_while_away=True, train_step() instead runs the step unmanaged (an "unmanaged"
    Grant) while fulcrumd is away. InferenceServer serves unmanaged while it is away.
    reconnect=False raises the lost connection's error instead, as clients before it did.
    """

    def __init__(self, socket_path=None, role=None, workload=None, batch=None,
                 batch_sizes=None, connect_timeout=10.0, on_profile=None, reconnect=True,
                 reconnect_timeout=None, train_while_away=False, backoff=(0.05, 0.5), jitter=0.3,
                 micro_batches=None):
        if socket_path is None:
            socket_path = os.environ.get("FULCRUM_WORKER_SOCKET", "/run/fulcrum/worker.sock")
        self.socket_path = socket_path
        self.worker_id = None
        self.token = None
        self.latency_budget_ms = None
        self.role = None
        self.batch = None
        self.batch_sizes = None
        self.micro_batches = None
        self.on_profile = on_profile  # callable(batch_size): run a real batch of that size
        self.reconnect_enabled = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.train_while_away = train_while_away
        self.connect_timeout = connect_timeout
        self.gen = 0  # registrations made: 1 after the first, +1 each time again
        self.reconnects = 0
        self.away_s = 0.0  # time away in all (lost → registered again)
        self.last_gap_s = None
        self._backoff = (max(0.001, float(backoff[0])), max(float(backoff[0]), float(backoff[1])))
        self._jitter = min(max(float(jitter), 0.0), 0.9)
        self._rng = random.Random()
        self._seq = itertools.count(1)
        self._wlock = threading.Lock()
        self._relock = threading.Lock()  # one reconnection at a time
        # There is no reader thread: a call waiting for a reply reads the socket itself,
        # one call at a time (conn.reading), and leaves what it reads for others in the
        # connection's grants, replies and errors. Handing every grant over from a reader
        # thread cost a thread switch on each turn (docs/runtime.md, protocol round trip).
        self._cond = threading.Condition()
        self._reg = None  # (role, workload, batch, batch_sizes, micro_batches) registered
        self._profiles_registered = None
        self._held = None  # (grant id, gen) of the turn held
        self._user_closed = False
        self._lost_at = None
        self._wait_s = self._backoff[0]
        self._next_try = 0.0
        self._on_register = []  # callables(gen) run after registering again
        self._on_refused = []  # callables(list of RateLimited), see add_refused_hook
        self._refused = collections.deque()  # RateLimited not yet handed to hooks or take_refused
        self._conn = _Conn(self._connect(connect_timeout), 0)
        if role is not None:
            try:
                self.register(role, workload, batch=batch, batch_sizes=batch_sizes, micro_batches=micro_batches)
            except BaseException:
                self.close()
                raise

    def _connect(self, timeout):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as e:
            sock.close()
            raise FulcrumError("connect", "cannot connect to fulcrumd at {}: {} (is fulcrumd running? "
                               "check runtime_dir)".format(self.socket_path, e)) from e
        sock.settimeout(None)
        return sock

    # -- wire -----------------------------------------------------------------------
    def _send(self, msg, conn=None):
        """Send msg on conn (default: the present connection); returns conn.gen."""
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        with self._wlock:
            conn = conn or self._conn
            if conn.closed:
                reason = self._take_closing_error(conn)
                if reason is not None:
                    raise reason
                raise FulcrumError("closed", "the connection to fulcrumd is closed: {}".format(conn.close_reason))
            try:
                conn.sock.sendall(data)
            except OSError as e:
                reason = self._close_reason_error(conn)
                self._mark_closed(conn, "send {}: {}".format(msg.get("type"), e))
                if reason is not None:
                    raise reason from e
                raise FulcrumError("closed", "send {} to fulcrumd: {}".format(msg.get("type"), e)) from e
            return conn.gen

    def _close_reason_error(self, conn):
        """After a send failed: read what fulcrumd sent before closing the connection and
        return the error that ended it (e.g. turn_expired), or None."""
        with self._cond:
            if conn.reading:
                return None  # the reading call will raise it
            conn.reading = True
        try:
            deadline = time.monotonic() + 0.2
            while not conn.closed and time.monotonic() < deadline:
                self._read_some(conn, max(0.0, deadline - time.monotonic()))
        finally:
            with self._cond:
                conn.reading = False
                self._cond.notify_all()
        return self._take_closing_error(conn)

    def _take_closing_error(self, conn):
        with self._cond:
            for err in reversed(conn.errors):
                if err.code in _CLOSING_CODES:
                    conn.errors.remove(err)
                    return err
        return None

    def _read_some(self, conn, timeout):
        """Read what the socket has (waiting up to timeout seconds; None: until something
        comes) and dispatch every whole line. Only the thread that set conn.reading calls it."""
        try:
            if timeout is not None:
                ready, _, _ = select.select([conn.sock], [], [], max(0.0, timeout))
                if not ready:
                    return
            chunk = conn.sock.recv(65536)
        except (OSError, ValueError) as e:  # ValueError: select on a socket closed meanwhile
            self._mark_closed(conn, str(e))
            return
        if not chunk:
            self._mark_closed(conn, "fulcrumd closed the connection")
            return
        conn.buf += chunk
        while b"\n" in conn.buf:
            line, conn.buf = conn.buf.split(b"\n", 1)
            if not line.strip():
                continue
            if line.startswith(b"HTTP/"):
                # The control socket answers a JSON line with an HTTP 400.
                self._mark_closed(conn, "{} answered in HTTP: it is fulcrumd's control socket (control.sock, "
                                  "for fulcrumctl), not its worker socket; give the worker socket "
                                  "(worker.sock in the same directory; default /run/fulcrum/worker.sock, "
                                  "or FULCRUM_WORKER_SOCKET)".format(self.socket_path))
                return
            try:
                m = json.loads(line)
            except ValueError as e:
                self._mark_closed(conn, "fulcrumd sent a line that is not JSON: {}".format(e))
                return
            if isinstance(m, dict):
                self._dispatch(conn, m)
        if len(conn.buf) > MAX_LINE_BYTES:
            self._mark_closed(conn, "fulcrumd sent an oversized line")

    def _mark_closed(self, conn, reason):
        with self._cond:
            conn.closed = True
            conn.close_reason = conn.close_reason or reason
            self._cond.notify_all()

    def _wait(self, conn, ready, deadline, what):
        """Return ready()'s first non-None value (checked under _cond), reading the socket
        meanwhile whenever no other thread is. deadline: time.monotonic() value or None."""
        while True:
            with self._cond:
                while True:
                    v = ready()
                    if v is not None:
                        return v
                    if conn.closed:
                        reason = self._take_closing_error(conn)  # _cond is reentrant
                        if reason is not None:
                            raise reason
                        raise FulcrumError("closed", "fulcrumd closed the connection: {}".format(conn.close_reason))
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise FulcrumError("timeout", "no reply to {}".format(what))
                    if not conn.reading:
                        conn.reading = True
                        break
                    self._cond.wait(left)
            try:
                self._read_some(conn, left)
            finally:
                with self._cond:
                    conn.reading = False
                    self._cond.notify_all()  # another waiter may take over the reading
            self._deliver_refused()

    def _dispatch(self, conn, m):
        t = m.get("type")
        with self._cond:
            seq = m.get("seq")
            if t == "grant":
                conn.grants.append(m)
                self._cond.notify_all()
                return
            if t == "error" and m.get("code") == "rate_limited":
                # A refusal of the requests it names, not of a call: a pending acquire
                # keeps waiting, nothing is raised (take_refused, add_refused_hook).
                workload = self._reg[1] if self._reg else None
                for rid in m.get("request_ids") or []:
                    self._refused.append(RateLimited(str(rid), workload, m.get("message", ""), m.get("ref", "")))
                self._cond.notify_all()
                return
            if t == "error":
                err = FulcrumError(m.get("code", ""), m.get("message", ""), m.get("ref", ""))
                if seq and seq in conn.replies:
                    conn.replies[seq] = err
                elif seq and seq == conn.acquire_seq:
                    conn.grants.append(err)  # the waiting acquire's own error
                else:
                    conn.errors.append(err)  # e.g. to a release: raised by the next call
            elif t in ("registered", "heartbeat") and seq in conn.replies:
                conn.replies[seq] = m
            self._cond.notify_all()

    def _call(self, msg, timeout, conn=None):
        """Send msg with a fresh seq and wait for the reply carrying it."""
        conn = conn or self._conn
        seq = next(self._seq)
        msg["seq"] = seq
        with self._cond:
            conn.replies[seq] = None
        try:
            self._send(msg, conn)
            reply = self._wait(conn, lambda: conn.replies.get(seq), time.monotonic() + timeout,
                               "{} within {}s".format(msg["type"], timeout))
        finally:
            with self._cond:
                conn.replies.pop(seq, None)
        if isinstance(reply, FulcrumError):
            raise reply
        return reply

    def _take_error(self, conn):
        with self._cond:
            return conn.errors.popleft() if conn.errors else None

    # -- registration and reconnection ----------------------------------------------
    def _register_on(self, conn, role, workload, batch, batch_sizes, micro_batches, timeout):
        msg = {"type": "register", "v": PROTOCOL_VERSION, "role": role, "workload": workload, "pid": os.getpid()}
        if batch:
            msg["batch"] = int(batch)
        if batch_sizes:
            msg["batch_sizes"] = [int(b) for b in batch_sizes]
        if micro_batches:
            msg["micro_batches"] = [int(b) for b in micro_batches]
        profiles = self.on_profile is not None
        if not profiles:
            msg["profiles"] = False  # decline profile batches: fulcrumd leaves the workload out
        reply = self._call(msg, timeout, conn)
        if reply.get("v") != PROTOCOL_VERSION:
            raise FulcrumError("bad_version", "fulcrumd speaks protocol v{}, this client v{}; upgrade one of them".format(
                reply.get("v"), PROTOCOL_VERSION))
        return reply, profiles

    def register(self, role, workload, batch=None, batch_sizes=None, timeout=10.0, micro_batches=None):
        """Register this connection as a training or inference worker. micro_batches
        (training): the micro-batch sizes the worker accepts, divisors of batch; fulcrumd
        may then run a minibatch as several shorter turns (see micro_steps)."""
        if role not in ("train", "infer"):
            raise ValueError('role must be "train" or "infer"')
        if micro_batches:
            micro_batches = [int(b) for b in micro_batches]
            if role != "train" or not batch or any(b < 1 or int(batch) % b for b in micro_batches):
                raise ValueError("micro_batches must be divisors of a training worker's batch, got {} for batch {}".format(
                    micro_batches, batch))
        reg = (role, workload, batch, batch_sizes, micro_batches or None)
        reply, profiles = self._register_on(self._conn, role, workload, batch, batch_sizes, micro_batches, timeout)
        self._installed(self._conn, reply, reg, profiles)
        return self.worker_id

    def _installed(self, conn, reply, reg, profiles):
        with self._cond:
            self.gen += 1
            conn.gen = self.gen
            self._conn = conn
            self.worker_id = reply["worker_id"]
            self.token = reply.get("token")
            self.latency_budget_ms = reply.get("latency_budget_ms")
            self._reg = reg
            self.role, _, self.batch, self.batch_sizes, self.micro_batches = reg
            self._profiles_registered = profiles
            self._held = None

    @property
    def connected(self):
        """Whether the client is registered on a live connection."""
        c = self._conn
        return self._reg is not None and not c.closed and c.gen == self.gen and not self._user_closed

    def add_register_hook(self, fn):
        """fn(gen) runs (in the thread that registered) after every registration made
        again, before anything else is sent on it (InferenceServer reports its queued
        requests again from it)."""
        self._on_register.append(fn)

    def add_refused_hook(self, fn):
        """fn(list of RateLimited) runs, in the thread that read them and holding no lock
        of the client, for requests fulcrumd refused with rate_limited (InferenceServer
        fails their futures from it). Without a hook they wait for take_refused()."""
        self._on_refused.append(fn)
        self._deliver_refused()

    def take_refused(self):
        """Return (and forget) the requests fulcrumd refused with rate_limited since the
        last call and not handed to a hook: a list of RateLimited, oldest first. They are
        read while a call waits for fulcrumd (acquire, heartbeat)."""
        with self._cond:
            out = list(self._refused)
            self._refused.clear()
        return out

    def _deliver_refused(self):
        if not self._on_refused:
            return
        refused = self.take_refused()
        if refused:
            for fn in list(self._on_refused):
                fn(refused)

    def _lost(self, conn, err):
        """Note that conn (the present connection) is gone: start the back-off."""
        with self._cond:
            if conn is not self._conn or self._lost_at is not None and conn.closed:
                return
            conn.closed = True
            conn.close_reason = conn.close_reason or str(err)
            self._lost_at = time.monotonic()
            self._wait_s = self._backoff[0]
            self._next_try = self._lost_at + self._jittered(self._wait_s)
        try:
            conn.sock.close()
        except OSError:
            pass
        log.warning("lost the connection to fulcrumd (%s); reconnecting", err)

    def _jittered(self, s):
        return s * (1 + self._jitter * (2 * self._rng.random() - 1))

    def _is_lost(self, err):
        return (self.reconnect_enabled and self._reg is not None and not self._user_closed
                and err.code in _LOST_CODES)

    def try_reconnect(self):
        """One reconnection attempt if one is due (the back-off has passed); returns
        whether the client is registered afterwards. A registration fulcrumd refuses
        (other than shutting_down or busy) is raised."""
        with self._relock:
            if self.connected:
                return True
            if self._user_closed or self._reg is None or not self.reconnect_enabled:
                raise FulcrumError("closed", "the connection to fulcrumd is closed: {}".format(self._conn.close_reason))
            if self._lost_at is None:
                self._lost(self._conn, self._conn.close_reason or "connection closed")
            if time.monotonic() < self._next_try:
                return False
            try:
                self._register_again()
            except FulcrumError as e:
                if e.code not in _LOST_CODES + ("timeout",):
                    raise
                self._wait_s = min(2 * self._wait_s, self._backoff[1])
                self._next_try = time.monotonic() + self._jittered(self._wait_s)
                return False
            gap = time.monotonic() - self._lost_at
            self._lost_at = None
            self.reconnects += 1
            self.last_gap_s = gap
            self.away_s += gap
            log.warning("registered again with fulcrumd as %s after %.2f s away", self.worker_id, gap)
            return True

    def _register_again(self):
        """Connect, register with the registration made before, install the connection
        and run the register hooks."""
        conn = _Conn(self._connect(min(self.connect_timeout, 5.0)), 0)
        try:
            role, workload, batch, batch_sizes, micro_batches = self._reg
            reply, profiles = self._register_on(conn, role, workload, batch, batch_sizes, micro_batches, 5.0)
        except BaseException:
            conn.by_client = True
            conn.sock.close()
            raise
        self._installed(conn, reply, self._reg, profiles)
        for fn in list(self._on_register):
            try:
                fn(self.gen)
            except Exception:  # a hook's failure must not undo the registration
                log.exception("register hook failed")

    def reconnect(self, timeout=None):
        """Wait (retrying with the back-off) until registered again; timeout seconds at
        most (None: as long as it takes), else raise FulcrumError("closed")."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.try_reconnect():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise FulcrumError("closed", "fulcrumd did not come back at {} within {:g} s".format(
                    self.socket_path, timeout))
            wait = self._next_try - now
            if deadline is not None:
                wait = min(wait, deadline - now)
            time.sleep(max(0.001, wait))

    def _reregister(self):
        """Register again on a new connection (on_profile changed after registering)."""
        old = self._conn
        with self._cond:
            old.by_client = True
        try:
            self._register_again()
        except FulcrumError as e:
            if not self._is_lost(e):
                raise
            self._lost(old, e)
            return
        old.closed = True
        try:
            old.sock.close()
        except OSError:
            pass

    # -- protocol -------------------------------------------------------------------
    def heartbeat(self, timeout=10.0):
        """Round trip to fulcrumd; raises if the connection is gone."""
        self._call({"type": "heartbeat"}, timeout)

    def arrivals(self, requests):
        """Report inference requests: a list of (request_id, age_ms) pairs. Returns the
        registration (gen) they were reported to."""
        reqs = [{"id": str(i), "age_ms": max(0.0, float(a))} for i, a in requests]
        gen = self.gen
        for chunk in _arrival_chunks(reqs):
            gen = self._send({"type": "arrivals", "requests": chunk})
        return gen

    def acquire(self, wait=True):
        """Ask for a turn and block until fulcrumd grants one. Returns a Grant. An error
        reply that arrived since the last call (e.g. to a release) is raised instead, and
        so is fulcrumd's error reply to this acquire. While fulcrumd is away it waits for it
        to come back (reconnect_timeout); wait=False raises FulcrumError("away") instead."""
        while True:
            if not self.connected and self._reg is not None and self.reconnect_enabled and not self._user_closed:
                if not wait:
                    if not self.try_reconnect():
                        raise FulcrumError("away", "fulcrumd is away; reconnecting")
                else:
                    self.reconnect(self.reconnect_timeout)
            if (self._reg is not None and self._held is None and self.connected
                    and (self.on_profile is not None) != self._profiles_registered):
                log.info("on_profile %s after registering: registering again so that fulcrumd %s profile batches",
                         "set" if self.on_profile else "cleared", "sends" if self.on_profile else "sends no")
                self._reregister()
                continue
            conn = self._conn
            try:
                return self._acquire_on(conn)
            except FulcrumError as e:
                if not self._is_lost(e):
                    raise
                if conn is not self._conn:
                    continue  # registered again meanwhile
                self._lost(conn, e)
                if not wait:
                    raise FulcrumError("away", "fulcrumd is away ({}); reconnecting".format(e)) from e

    def _acquire_on(self, conn):
        self._deliver_refused()  # refusals read while a send failed (_close_reason_error)
        err = self._take_error(conn)
        if err:
            raise err
        seq = next(self._seq)
        with self._cond:
            conn.acquire_seq = seq
        self._send({"type": "acquire", "seq": seq}, conn)
        g = self._wait(conn, lambda: conn.grants.popleft() if conn.grants else None, None, "acquire")
        if isinstance(g, FulcrumError):
            raise g
        self._held = (g["grant"], conn.gen)
        return Grant(g["grant"], g.get("kind", ""), g.get("batch", 0), g.get("request_ids") or [],
                     g.get("deadline_ms", 0.0), int(g.get("micro_batch") or 0))

    def release(self, grant, duration_ms, samples=None, results=None):
        """End the turn of grant (a Grant or its id) with the measured duration.
        results: for inference, a list of (request_id, ok[, error]) tuples. A turn of a
        registration lost since ended with its connection: releasing it does nothing."""
        gid = grant.id if isinstance(grant, Grant) else int(grant)
        held = self._held
        if held is not None and held[0] == gid:
            self._held = None
            if held[1] != self.gen or not self.connected:
                return
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
        conn = self._conn
        try:
            self._send(msg, conn)
        except FulcrumError as e:
            if not self._is_lost(e):
                raise
            self._lost(conn, e)  # the turn ended with the connection

    def _run_profile(self, grant):
        """Serve a profile grant: run the user's real batch and report its time."""
        start = time.monotonic()
        if self.on_profile is None:
            # Only an older fulcrumd, which ignores the registration's "profiles": false.
            log.warning("fulcrumd asked for a profile batch of %d but no on_profile callback is set; "
                        "releasing at once (fulcrumd discards such batches)", grant.batch)
        else:
            self.on_profile(grant.batch)
        self.release(grant, (time.monotonic() - start) * 1000.0, samples=grant.batch)

    def next_grant(self, wait=True):
        """acquire() until a non-profile grant comes, serving profile grants on the way."""
        while True:
            g = self.acquire(wait=wait)
            if g.kind == "profile":
                self._run_profile(g)
                continue
            return g

    @contextlib.contextmanager
    def train_step(self, samples=None):
        """Wrap one training minibatch: waits for the turn, yields the Grant, then
        releases with the measured duration (also when the body raises). While fulcrumd
        is away it waits for it, or with train_while_away yields an "unmanaged" Grant at
        once (the step runs without a turn)."""
        g = None
        if self.train_while_away:
            try:
                g = self.next_grant(wait=False)
            except FulcrumError as e:
                if e.code != "away":
                    raise
        else:
            g = self.next_grant()
        if g is None:
            yield Grant(0, "unmanaged", self.batch or 0, [], 0.0)
            return
        start = time.monotonic()
        try:
            yield g
        finally:
            self.release(g, (time.monotonic() - start) * 1000.0, samples=samples)

    def micro_steps(self):
        """Run one minibatch as the turns fulcrumd grants: yields a MicroStep per turn,
        holding the turn while the loop body runs and releasing it (with the measured
        time and the samples run) when the body is done, also when it raises.

        With micro_batches registered, fulcrumd may grant the minibatch as k turns of
        batch/k samples (gradient accumulation); otherwise, and while fulcrumd is away
        with train_while_away, it is one step of the whole minibatch. For each step:
        run samples [step.start, step.stop), scale the loss by step.scale (1/k),
        backward (gradients accumulate), and after the step with step.last step the
        optimizer and zero the gradients:

            for step in client.micro_steps():
                loss = loss_fn(model(x[step.start:step.stop]), y[step.start:step.stop])
                (loss * step.scale).backward()
                if step.last:
                    optimizer.step()
                    optimizer.zero_grad()

        Layers that keep batch statistics (BatchNorm) compute them per micro-batch:
        small micro-batches make those statistics noisier than the whole minibatch's.
        """
        total = int(self.batch or 0)
        if total < 1:
            raise ValueError("micro_steps needs the minibatch size: register with batch=")
        done = 0
        while done < total:
            g = None
            if self.train_while_away:
                try:
                    g = self.next_grant(wait=False)
                except FulcrumError as e:
                    if e.code != "away":
                        raise
            else:
                g = self.next_grant()
            if g is None:
                # fulcrumd is away: the rest of the minibatch runs unmanaged, as one step.
                left = total - done
                yield MicroStep(Grant(0, "unmanaged", total, [], 0.0), done, total, max(1, total // left), left / total, True)
                return
            m = g.micro_batch if 0 < g.micro_batch < total else total
            # fulcrumd may lower the size within a minibatch (to one dividing what is
            # left), and after it restarted may start afresh with another: count
            # samples, scale by this turn's size, never run past the minibatch.
            m = min(m, total - done)
            start = time.monotonic()
            try:
                yield MicroStep(g, done, done + m, max(1, total // m), m / total, done + m >= total)
            finally:
                self.release(g, (time.monotonic() - start) * 1000.0, samples=m)
            done += m

    def close(self):
        """Close the connection; fulcrumd releases a held turn at once. No reconnection
        follows."""
        with self._cond:
            self._user_closed = True
            conn = self._conn
            conn.by_client = True
            if not conn.closed:
                conn.close_reason = "closed by the client"
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InferenceServer:
    """Serves inference requests in the batches fulcrumd grants.

    handler(list_of_payloads) returns a list of results of the same length (an element
    that is an Exception fails that request); if it raises, the whole batch fails.
    on_profile(batch_size), if given, runs a real batch when fulcrumd profiles (without
    one, here or on the client, the worker declines profile batches).
    submit(payload) may be called from any thread and returns a concurrent.futures.Future.

    A request fulcrumd refuses (rate_limited: this stream asks for more than its share of
    the GPU beside other inference streams) fails with RateLimited at once; the server
    carries on with the others (server.refused counts them).

    While fulcrumd is away (restarting) the server keeps answering: it serves what is
    queued itself, up to the client's batch, as soon as the previous batch is done, and
    after registering again reports the requests still queued to the new fulcrumd. No
    accepted request is lost.
    """

    def __init__(self, client, handler, on_profile=None):
        if client.role != "infer":
            raise ValueError("InferenceServer needs a client registered with role='infer'")
        self.client = client
        self.handler = handler
        if on_profile is not None:
            client.on_profile = on_profile  # registers again at the first acquire
        self.batch = client.batch or max(client.batch_sizes or [1])
        # rid -> [payload, future, submitted (monotonic), gen reported to (None: not yet)]
        self._pending = collections.OrderedDict()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._thread = None
        self._stopping = False
        self._serving = False  # a granted batch is being served and not yet released
        self._closing = False  # stop() is closing the connection: no batch starts
        self.unmanaged_batches = 0  # batches served while fulcrumd was away
        self.refused = 0  # requests fulcrumd refused (rate_limited): their futures failed
        self._refused_logged_at, self._refused_unlogged = -1e9, 0
        client.add_register_hook(self._report_again)
        client.add_refused_hook(self._refuse)

    def submit(self, payload):
        """Queue one request; returns a Future resolved with the handler's result."""
        fut = concurrent.futures.Future()
        rid = "r{}".format(next(self._ids))
        with self._lock:
            if self._stopping:
                raise FulcrumError("closed", "the inference server is stopped")
            entry = [payload, fut, time.monotonic(), None]
            self._pending[rid] = entry
            # Reported under the lock: a registration made again reports what is queued
            # (_report_again) under it too, so no request reaches fulcrumd twice.
            try:
                entry[3] = self.client.arrivals([(rid, 0.0)])
            except FulcrumError as e:
                if not self.client._is_lost(e):
                    self._pending.pop(rid, None)
                    fut.set_exception(e)
                # else: kept; served here while fulcrumd is away, or reported again
            self._arrived.notify_all()
        return fut

    def _refuse(self, refused):
        """Fail the futures of the requests fulcrumd refused (RateLimited each); the
        others are served as usual."""
        with self._lock:
            entries = [(r, self._pending.pop(r.request_id, None)) for r in refused]
        n = 0
        for r, e in entries:
            if e is not None and not e[1].done():
                e[1].set_exception(r)
                n += 1
        if n:
            self.refused += n
            self._refused_unlogged += n
            now = time.monotonic()
            if now - self._refused_logged_at >= 1.0:  # at most one line a second
                log.warning("fulcrumd refused %d inference requests of stream %r (rate_limited; their futures "
                            "failed with RateLimited): %s", self._refused_unlogged, refused[0].workload,
                            refused[0].fulcrumd_message)
                self._refused_logged_at, self._refused_unlogged = now, 0

    def _report_again(self, gen):
        with self._lock:
            now = time.monotonic()
            todo = [(rid, (now - e[2]) * 1000.0) for rid, e in self._pending.items() if e[3] != gen]
            if not todo:
                return
            try:
                sent = self.client.arrivals(todo)
            except FulcrumError as e:
                log.warning("reporting %d queued requests to fulcrumd again failed: %s", len(todo), e)
                return
            for rid, _ in todo:
                self._pending[rid][3] = sent
            log.info("reported %d queued requests to fulcrumd again", len(todo))

    def start(self, warmup=None):
        """Start serving in a thread of its own; returns self.

        warmup(), if given, runs first in that thread and start() returns once it is done
        (an exception it raises is raised here). Warm up there, not in the caller's thread:
        CUDA libraries keep per-thread state, and a shape first seen by a thread pays its
        set-up again — measured on an H200 with torch 2.11, a MobileNetV3 batch already
        run in the main thread took 48–52 ms the first time in a new thread (2.7 ms after),
        and 780–880 ms with cudnn.benchmark on. Requests submitted meanwhile queue.
        """
        ready = threading.Event()
        failed = []

        def run():
            try:
                if warmup is not None:
                    warmup()
            except BaseException as e:  # noqa: B902 - handed to start()'s caller
                failed.append(e)
                return
            finally:
                ready.set()
            self._loop()

        self._thread = threading.Thread(target=run, name="fulcrum-inference", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self

    def _loop(self):
        while True:
            with self._lock:
                if self._stopping:
                    return
            if not self.client.connected and self.client.reconnect_enabled:
                try:
                    if not self.client.try_reconnect():
                        self._serve_away()
                        continue
                except FulcrumError as e:
                    self._fail_all(e)
                    return
            try:
                g = self.client.next_grant(wait=False)
            except FulcrumError as e:
                if e.code == "away":
                    continue
                self._fail_all(e)
                return
            with self._lock:
                if self._closing:
                    return  # stop() closes the connection: the turn ends with it, unserved
                self._serving = True
                items = [(rid, self._pending.pop(rid, None)) for rid in g.request_ids]
            try:
                results = self._run(items)
                try:
                    self.client.release(g, self._last_ms, results=results)
                except FulcrumError as e:
                    self._fail_all(e)
                    return
            finally:
                with self._lock:
                    self._serving = False
                    self._arrived.notify_all()

    def _serve_away(self):
        """While fulcrumd is away: serve the oldest queued requests (up to the batch), or
        wait a little for some."""
        with self._lock:
            if not self._pending:
                self._arrived.wait(0.01)
                return
            items = []
            while self._pending and len(items) < self.batch:
                items.append(self._pending.popitem(last=False))
        self._run(items)
        self.unmanaged_batches += 1

    def _run(self, items):
        """Run the handler on items [(rid, entry or None)]; resolve the futures; return
        the results for the release."""
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
        self._last_ms = (time.monotonic() - start) * 1000.0
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
        return results

    def _fail_all(self, err):
        with self._lock:
            pending, self._pending = self._pending, collections.OrderedDict()
        for _, fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(err)

    def stop(self):
        """Stop serving: the batch being served is finished and released, then the
        client's connection is closed; requests not served yet fail."""
        with self._lock:
            self._stopping = True
            self._arrived.notify_all()
            # Closing under a held turn would make fulcrumd count that turn's requests as
            # failed although their futures already have their results (issue 27 item 2).
            deadline = time.monotonic() + 10
            while self._serving and time.monotonic() < deadline:
                self._arrived.wait(max(0.0, deadline - time.monotonic()))
            self._closing = True
        self.client.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._fail_all(FulcrumError("closed", "the inference server stopped"))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
