"""What the race tests (test_races.py) stand on: redis-server masters,
redlockd instances, and a gate: a TCP proxy between one instance and a
master that can hold the bytes of one kind of connection (the instance's
commands, or its release-notice subscription) in one direction until the
test lets them go. With gates, an order of events that happens only now
and then under load (a renewal that reaches the masters just after a
release, a notice read after the renewal's answer) happens every time."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
import httpraw  # noqa: E402
from testproc import children, free_port, spawn, wait_serving  # noqa: E402

BIN = os.environ.get("REDLOCKD_BIN", "redlockd")
T0 = time.monotonic()
failures = []


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def fail(msg):
    failures.append(msg)
    log("FAIL: " + msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def redis(port, *args, timeout=2.0):
    """One command over RESP; the reply (str, int, list or None); an error
    reply raises RuntimeError."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in
            (x if isinstance(x, bytes) else str(x).encode() for x in args)))
        f = s.makefile("rb")

        def reply():
            line = f.readline().rstrip(b"\r\n")
            t, rest = line[:1], line[1:].decode(errors="replace")
            if t == b"+":
                return rest
            if t == b"-":
                raise RuntimeError(rest)
            if t == b":":
                return int(rest)
            if t == b"$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2].decode(errors="replace")
            if t == b"*":
                n = int(rest)
                return None if n < 0 else [reply() for _ in range(n)]
            raise RuntimeError(f"bad reply {line!r}")
        return reply()
    finally:
        s.close()


class Master:
    def __init__(self, tmp, i):
        self.port = free_port()
        self.dir = os.path.join(tmp, f"m{i}")
        os.makedirs(self.dir, exist_ok=True)
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                           "--dir", self.dir, "--save", "", "--appendonly", "no"],
                          os.path.join(self.dir, "redis.log"))
        for _ in range(500):
            try:
                if redis(self.port, "PING", timeout=0.2) == "PONG":
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def call(self, *args):
        return redis(self.port, *args)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)


class Daemon:
    def __init__(self, tmp, name, master_ports, extra=()):
        self.name = name
        self.port = free_port()
        self.log = os.path.join(tmp, f"redlockd-{name}.log")
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=99"
        argv = [BIN, "--listen", f"127.0.0.1:{self.port}",
                "--masters", ",".join(f"127.0.0.1:{p}" for p in master_ports),
                "--log-format", "text"] + list(extra)
        self.proc = spawn(argv, self.log, env)
        wait_serving(self.proc, self.port, self.log, f"redlockd {name}")

    def wait_ready(self, n, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            a = httpraw.request(self.port, "GET", "/readyz")
            if a.status == 200:
                r = a.json()
                if r["masters_up"] == n and all(m["marker"] == "ready" for m in r["masters"]):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redlockd {self.name} not ready")

    def req(self, method, path, body=None, headers=()):
        h = list(headers)
        if body is not None:
            body = json.dumps(body)
            h.append(("Content-Type", "application/json"))
        return httpraw.request(self.port, method, path, h, body)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stream(self, path, body, timeout=10.0, headers=()):
        return Events(httpraw.Stream(self.port, "POST", path, [("Content-Type", "application/json")] + list(headers),
                                     json.dumps(body), timeout))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        check(rc == 0, f"redlockd {self.name} exited {rc} (log {self.log})")
        text = open(self.log, errors="replace").read()
        check("Sanitizer" not in text and "runtime error:" not in text,
              f"redlockd {self.name}: sanitizer report:\n{text[-4000:]}")


class Events:
    """A held stream's events, one JSON object a line."""

    def __init__(self, s):
        self.s = s
        self.events = []

    def next(self, timeout):
        line = self.s.next_line(timeout)
        if line is None:
            return None
        ev = json.loads(line)
        self.events.append(ev)
        return ev

    def until(self, kind, timeout):
        """Reads until an event of kind; None (and a failure) when the
        stream ends or nothing comes in time."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                ev = self.next(max(0.01, deadline - time.monotonic()))
            except (TimeoutError, OSError) as e:
                fail(f"no {kind} event: {e!r}; events {self.events}")
                return None
            if ev is None:
                fail(f"the stream ended before a {kind} event; events {self.events}")
                return None
            if ev.get("event") == kind:
                return ev

    def close(self):
        self.s.close()


# ---- the gate ----

UP, DOWN = "up", "down"          # toward the master, toward the instance
DATA, SUB = "data", "sub"        # the instance's command connection, its notice subscription


class Gate:
    """A TCP proxy in front of one master. Each connection is told a
    DATA or a SUB connection by the first command the instance sends on it
    (a subscription begins with SUBSCRIBE). close(kind, way) holds that
    kind's bytes going that way, in order, until open(kind, way)."""

    def __init__(self, master_port):
        self.master_port = master_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = free_port()
        self.lsock.bind(("127.0.0.1", self.port))
        self.lsock.listen(64)
        self.mu = threading.Condition()
        self.shut = {(k, w): False for k in (DATA, SUB) for w in (UP, DOWN)}
        self.held = {(k, w): b"" for k in (DATA, SUB) for w in (UP, DOWN)}
        self.passed = {(k, w): 0 for k in (DATA, SUB) for w in (UP, DOWN)}
        self.socks = []
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self, kind, way):
        with self.mu:
            self.shut[(kind, way)] = True

    def open(self, kind, way):
        with self.mu:
            self.shut[(kind, way)] = False
            self.mu.notify_all()

    def holding(self, kind, way):
        """The bytes held back so far (since the gate last opened)."""
        with self.mu:
            return self.held[(kind, way)]

    def passed_bytes(self, kind, way):
        with self.mu:
            return self.passed[(kind, way)]

    def stop(self):
        self.stopping = True
        with self.mu:
            for k in self.shut:
                self.shut[k] = False
            self.mu.notify_all()
        for s in [self.lsock] + self.socks:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.master_port), timeout=5)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            self.socks += [c, u]
            kind = {}
            known = threading.Event()
            threading.Thread(target=self._pump, args=(c, u, UP, kind, known), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, DOWN, kind, known), daemon=True).start()

    def _pump(self, src, dst, way, kind, known):
        """Copies src to dst; while the gate of its kind and way is shut,
        what arrives is kept (held) and goes, in order, when it opens."""
        src.settimeout(0.01)
        while not self.stopping:
            try:
                data = src.recv(65536)
                if not data:
                    break
            except socket.timeout:
                data = b""
            except OSError:
                break
            if data and way == UP and not known.is_set():
                kind["k"] = SUB if b"SUBSCRIBE" in data.upper() else DATA
                known.set()
            if not known.is_set():
                known.wait(0.01)
                if not known.is_set():
                    continue
            key = (kind["k"], way)
            with self.mu:
                self.held[key] += data
                if self.shut[key]:
                    continue
                out, self.held[key] = self.held[key], b""
                self.passed[key] += len(out)
            if out:
                try:
                    dst.sendall(out)
                except OSError:
                    break
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    fail(f"timed out waiting for {what}")
    return False


def kill_all():
    for p in children:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
            except OSError:
                pass
