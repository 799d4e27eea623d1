#!/usr/bin/env python3
"""What the hostile-input test (test_hostile.py) stands on: masters spoken to
byte-exact, their keys snapshotted and put back, redlockd instances, and
the record of each case. The sections are in hostile_json.py (1 and 2) and
hostile_wire.py (3 to 6)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import httpraw  # noqa: E402
from testproc import children, free_port, in_thread, spawn, wait_serving  # noqa: E402

BIN = os.environ.get("REDLOCKD_BIN", "redlockd")
BODY_LIMIT = 4096          # --max-body-bytes of the daemon under test
READ_S = 20.0              # a read gives up after this; the request timeout is 60 s
REQUEST_TIMEOUT_MS = 60000
PREFIX = "lock:"
STORE = "lockstore"        # the default --dapr-stores
LK, UL = f"/v1.0-alpha1/lock/{STORE}", f"/v1.0-alpha1/unlock/{STORE}"
T0 = time.monotonic()

results = {}   # case -> list of problems (empty: PASS), in the order run
order = []


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def record(case, problems):
    if case not in results:
        results[case] = []
        order.append(case)
    results[case] += problems
    log(("PASS " if not problems else "FAIL ") + case + ("" if not problems else ": " + "; ".join(problems)))


# ---- Redis, byte-exact ----

class Redis:
    """One RESP connection; replies as bytes, ints, lists or None."""

    def __init__(self, port, password=None):
        self.port = port
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.s.makefile("rb")
        if password:
            self.call("AUTH", password)

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def _reply(self):
        line = self.f.readline()
        if not line:
            raise EOFError(f"redis {self.port} closed the connection")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest
        if t == b"-":
            return RuntimeError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"bad reply {line!r}")

    def pipeline(self, cmds):
        out = b""
        for args in cmds:
            args = [a if isinstance(a, bytes) else str(a).encode() for a in args]
            out += b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        self.s.sendall(out)
        return [self._reply() for _ in cmds]

    def call(self, *args):
        r = self.pipeline([args])[0]
        if isinstance(r, Exception):
            raise r
        return r


class Master:
    def __init__(self, tmp, name, extra=(), password=None):
        self.port = free_port()
        self.password = password
        self.dir = os.path.join(tmp, name)
        os.mkdir(self.dir)
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                           "--dir", self.dir, "--save", "", "--appendonly", "no"] + list(extra),
                          os.path.join(self.dir, "redis.log"))
        self.conn = None
        for _ in range(500):
            try:
                r = Redis(self.port, password)
                if r.call("PING") == b"PONG":
                    self.conn = r
                    return
                r.close()
            except (OSError, EOFError, RuntimeError):
                pass
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def r(self):
        if self.conn is None:
            self.conn = Redis(self.port, self.password)
        return self.conn

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        if self.conn:
            self.conn.close()
            self.conn = None


def snapshot(masters, pattern="*"):
    """Per master: {key: (DUMP of the value, PTTL)} for every key (or every
    key that matches the KEYS pattern)."""
    snap = []
    for m in masters:
        r = m.r()
        keys = r.call("KEYS", pattern)
        replies = r.pipeline([c for k in keys for c in (("DUMP", k), ("PTTL", k))])
        keep = {}
        for i, k in enumerate(keys):
            dump, pttl = replies[2 * i], replies[2 * i + 1]
            if dump is not None and not isinstance(dump, Exception):
                keep[k] = (dump, pttl)
        snap.append(keep)
    return snap


def compare(before, after, elapsed_ms):
    """What changed between two snapshots: keys created, values changed,
    keys gone (unless their TTL ran out meanwhile). TTLs are not compared."""
    probs = []
    for i, (b, a) in enumerate(zip(before, after)):
        for k in sorted(set(a) - set(b)):
            probs.append(f"master {i}: key {k.decode(errors='replace')} created")
        for k in sorted(set(a) & set(b)):
            if a[k][0] != b[k][0]:
                probs.append(f"master {i}: key {k.decode(errors='replace')} changed")
        for k in sorted(set(b) - set(a)):
            pttl = b[k][1]
            if not (isinstance(pttl, int) and 0 <= pttl <= elapsed_ms + 1000):
                probs.append(f"master {i}: key {k.decode(errors='replace')} removed")
    return probs


def restore(masters, before, elapsed_ms):
    """Puts every master back as it was in before (keys created removed,
    values changed or removed put back)."""
    now = snapshot(masters)
    for m, b, a in zip(masters, before, now):
        r = m.r()
        cmds = [("DEL", k) for k in set(a) - set(b)]
        for k, (dump, pttl) in b.items():
            if k not in a or a[k][0] != dump:
                ttl = 0 if pttl is None or pttl < 0 else max(1, pttl - int(elapsed_ms))
                cmds.append(("RESTORE", k, ttl, dump, "REPLACE"))
        if cmds:
            r.pipeline(cmds)


def keys_named(masters, name):
    """Masters holding any key of the native lock name (the lock, its
    fence, its owner)."""
    out = []
    for i, m in enumerate(masters):
        ks = m.r().call("KEYS", (PREFIX + name).encode() + b"*")
        if any(k == (PREFIX + name).encode() or k.startswith((PREFIX + name + "#").encode()) for k in ks):
            out.append(i)
    return out


# ---- redlockd ----

class Daemon:
    def __init__(self, tmp, name, master_ports, extra=(), env_extra=None):
        self.name = name
        self.port = free_port()
        self.log = os.path.join(tmp, f"redlockd-{name}.log")
        env = dict(os.environ)
        env.pop("REDLOCKD_REDIS_PASSWORD", None)
        env.update(env_extra or {})
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=99"
        argv = [BIN, "--listen", f"127.0.0.1:{self.port}",
                "--masters", ",".join(f"127.0.0.1:{p}" for p in master_ports),
                "--request-timeout-ms", str(REQUEST_TIMEOUT_MS),
                "--max-body-bytes", str(BODY_LIMIT), "--log-format", "text"] + list(extra)
        self.proc = spawn(argv, self.log, env)
        wait_serving(self.proc, self.port, self.log, f"redlockd {name}")

    def readyz(self):
        return httpraw.request(self.port, "GET", "/readyz", timeout=READ_S)

    def wait_ready(self, n, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            a = self.readyz()
            if a.status == 200:
                r = a.json()
                if r["masters_up"] == n and all(m["marker"] == "ready" for m in r["masters"]):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redlockd {self.name} not ready: {a.status} {a.body[:500]!r}")

    def req(self, method, path, body=None, headers=(), timeout=READ_S):
        h = list(headers.items()) if isinstance(headers, dict) else list(headers)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if body is not None:
            h.append(("Content-Type", "application/json"))
        return httpraw.request(self.port, method, path, h, body, timeout=timeout)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stops it; the problems (exit status, sanitizer reports)."""
        probs = []
        if sig and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            probs.append(f"redlockd {self.name} did not stop within {timeout} s of SIGTERM")
        text = open(self.log, errors="replace").read()
        if re.search(r"ERROR: (Address|Leak)Sanitizer|runtime error:", text):
            probs.append(f"redlockd {self.name}: sanitizer report in its log:\n{text[-6000:]}")
        if rc != 0:
            probs.append(f"redlockd {self.name} exited {rc} (log {self.log})")
        return probs


def send(port, method, path, body=None, headers=(), timeout=READ_S):
    """One request on its own connection. An answer that is a stream (a
    campaign or a held acquire that should have been refused) is read for
    its first two lines, then closed (which gives up what it holds)."""
    h = [("Content-Type", "application/json")] if body is not None else []
    h += list(headers.items()) if isinstance(headers, dict) else list(headers)
    s = httpraw.Stream(port, method, path, h, body, timeout)
    a = s.answer
    a.stream_lines = []
    if s.chunked:
        try:
            for _ in range(2):
                line = s.next_line(2.0)
                if line is None:
                    break
                a.stream_lines.append(line)
        except (TimeoutError, EOFError, ValueError):
            pass
    s.close()
    return a


def json_error(a, status, code=None, field=None, dapr=False):
    """Problems with an answer that should be a JSON error."""
    desc = f"{a.status} {(a.body or b''.join(getattr(a, 'stream_lines', [])))[:200]!r}"
    if a.status != status:
        return [f"expected {status}, got {desc}"]
    if "application/json" not in (a.header("Content-Type") or ""):
        return [f"Content-Type {a.header('Content-Type')!r}, not JSON: {desc}"]
    try:
        j = json.loads(a.body.decode())
    except ValueError:
        return [f"the body is not JSON: {desc}"]
    if not isinstance(j, dict):
        return [f"the body is no object: {desc}"]
    probs = []
    key = "errorCode" if dapr else "error"
    if code and j.get(key) != code:
        probs.append(f"{key} {j.get(key)!r}, not {code}: {desc}")
    if not isinstance(j.get("message"), str) or not j["message"]:
        probs.append(f"no message: {desc}")
    elif field and field.lower() not in j["message"].lower():
        probs.append(f"the message does not name {field}: {j['message']!r}")
    return probs
