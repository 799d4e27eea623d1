#!/usr/bin/env python3
"""Hostile input against the running service (issue 27).

Starts five redis-server masters on free loopback ports and redlockd over
them (a 60 s request timeout, so that "answered" and "left waiting for the
request timeout" differ: every read here gives up after 20 s), and sends
what a careless or hostile client sends:

1. strict JSON on every body-taking route: raw control bytes inside strings,
   duplicate keys, integers written as fractions, exponents or out of range,
   invalid UTF-8; each is 400 with a JSON body that names the field, and
   nothing changes on any master;
2. every integer in every answer and event is an integer literal (decoded
   with a parse_float that fails);
3. framing: Transfer-Encoding other than chunked, a chunk over the body
   limit, an obs-folded Content-Length, HTTP/1.1 without Host, garbage
   request lines;
4. a 503 names the true cause, as /readyz gives it (masters refusing the
   connection; masters asking for a password that redlockd does not send);
5. at SIGTERM a waiting acquire (lock or semaphore) answers 503
   shutting_down;
6. a semaphore's 409 locked carries the holder's remaining time.

After every hostile case of 1 and 3 each master's keys and values (DUMP,
TTL ignored) are compared with what they were before the request; whatever
a case changed is put back, so the cases do not disturb one another.

usage: test_hostile.py [SECTION...]   (env REDLOCKD_BIN: the daemon;
SECTION: 1 to 6, all by default)
"""
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
from testproc import children, free_port, spawn, wait_serving  # noqa: E402

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


def snapshot(masters):
    """Per master: {key: (DUMP of the value, PTTL)} for every key."""
    snap = []
    for m in masters:
        r = m.r()
        keys = r.call("KEYS", "*")
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


# ---- 1: strict JSON ----

def acquire(D, name, body):
    a = D.req("POST", f"/locks/{name}", body)
    if a.status != 201:
        raise RuntimeError(f"set-up: acquire {name} answered {a.status} {a.body[:200]!r}")
    return a.json()["token"]


class Targets:
    """What a case needs to exist first (a lock, a permit, a leader, a Dapr
    lock), made before the case's first snapshot and given up after it.
    Both wait for every master: a grant or a release answers once a majority
    said yes, and a late master's write must not land inside a case."""

    def __init__(self, D, masters):
        self.D, self.masters, self.n = D, masters, 0

    def on_every_master(self, key, present, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((m.r().call("EXISTS", key) == 1) == present for m in self.masters):
                return
            time.sleep(0.01)
        raise RuntimeError(f"set-up: {key} {'missing on' if present else 'still on'} some master after {timeout} s")

    def made(self, key, name, tok, undo):
        self.on_every_master(key, True)

        def undo_and_wait():
            undo()
            self.on_every_master(key, False)
        return {"name": name, "token": tok, "undo": undo_and_wait}

    def lock(self):
        self.n += 1
        name = f"tgt-lock-{self.n}"
        tok = acquire(self.D, name, {"ttl_ms": 60000})
        return self.made(PREFIX + name, name, tok,
                         lambda: self.D.req("DELETE", f"/locks/{name}", headers={"Lock-Token": tok}))

    def permit(self):
        self.n += 1
        name = f"tgt-sem-{self.n}"
        a = self.D.req("POST", f"/semaphores/{name}", {"limit": 1, "ttl_ms": 60000})
        if a.status != 201:
            raise RuntimeError(f"set-up: permit of {name}: {a.status} {a.body[:200]!r}")
        tok = a.json()["permits"][0]["token"]
        return self.made(PREFIX + name + "\x1f#0", name, tok,
                         lambda: self.D.req("DELETE", f"/semaphores/{name}", headers={"Lock-Token": tok}))

    def leader(self):
        self.n += 1
        name = f"tgt-el-{self.n}"
        s = httpraw.Stream(self.D.port, "POST", f"/elections/{name}", [("Content-Type", "application/json")],
                           json.dumps({"candidate": "pg-1", "value": "10.0.0.7:5432", "ttl_ms": 30000}), READ_S)
        tok = None
        try:
            for _ in range(2):
                ev = json.loads(s.next_line(5.0))
                if ev.get("event") == "elected":
                    tok = ev["token"]
        except Exception as e:  # noqa: BLE001
            s.close()
            raise RuntimeError(f"set-up: campaign {name}: {e!r}")
        if not tok:
            s.close()
            raise RuntimeError(f"set-up: campaign {name} was not elected")

        def undo():
            self.D.req("DELETE", f"/elections/{name}", headers={"Lock-Token": tok})
            s.close()
        self.on_every_master(PREFIX + name + "\x1f#election\x1f#owner", True)
        return self.made(PREFIX + name + "\x1f#election", name, tok, undo)

    def dapr_lock(self):
        self.n += 1
        rid = f"tgt-r-{self.n}"
        a = self.D.req("POST", LK, {"resourceId": rid, "lockOwner": "worker", "expiryInSeconds": 60})
        if a.status != 200 or a.json() != {"success": True}:
            raise RuntimeError(f"set-up: dapr lock {rid}: {a.status} {a.body[:200]!r}")
        return self.made(f"{PREFIX}{STORE}||{rid}", rid, "worker",
                         lambda: self.D.req("POST", UL, {"resourceId": rid, "lockOwner": "worker"}))


def hostile(D, masters, case, method, path, body, headers=(), field=None, dapr=False, status=400,
            code=None, target=None):
    """One hostile request: the answer is a JSON error and no master
    changed. path, body and headers may be functions of the target."""
    t = target() if target else None
    try:
        p = path(t) if callable(path) else path
        b = body(t) if callable(body) else body
        h = headers(t) if callable(headers) else headers
        before = snapshot(masters)
        t0 = time.monotonic()
        try:
            a = send(D.port, method, p, b, h)
            probs = json_error(a, status, code or ("ERR_MALFORMED_REQUEST" if dapr else "bad_request"),
                               field, dapr)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            probs = [f"no answer: {e!r}"]
        changed = compare(before, snapshot(masters), (time.monotonic() - t0) * 1000)
        probs += changed
        if changed:
            time.sleep(0.3)   # a stream closed above gives up what it held meanwhile
            restore(masters, before, (time.monotonic() - t0) * 1000)
        record(case, probs)
    finally:
        if t:
            t["undo"]()


def section_strict_json(D, masters):
    tg = Targets(D, masters)

    def H(t):
        return {"Lock-Token": t["token"]}

    def tokb(t):
        return t["token"].encode()

    # (label, method, path, body(t) -> bytes, headers, field, dapr, target)
    sites = []
    # Raw control bytes inside strings.
    for ctl in (0x00, 0x01, 0x1F):
        c = f"0x{ctl:02x}"
        bc = bytes([ctl])
        sites += [
            (f"owner with raw {c}", "POST", "/locks/hx-owner", b'{"owner":"web' + bc + b'-evil"}', (), "owner",
             False, None),
            (f"token with raw {c} (body)", "PATCH", lambda t: f"/locks/{t['name']}",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x","ttl_ms":5000}', (), "token", False, tg.lock),
            (f"token with raw {c} (body)", "DELETE", lambda t: f"/locks/{t['name']}",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x"}', (), "token", False, tg.lock),
            (f"candidate with raw {c}", "POST", "/elections/hx-el", b'{"candidate":"10.0.0.7' + bc + b':5432"}', (),
             "candidate", False, None),
            (f"value with raw {c}", "POST", "/elections/hx-el",
             b'{"candidate":"pg-1","value":"10.0.0.7' + bc + b':5432"}', (), "value", False, None),
            (f"value with raw {c}", "PUT", lambda t: f"/elections/{t['name']}/value",
             b'{"value":"10.0.0.7' + bc + b':5432"}', H, "value", False, tg.leader),
            (f"token with raw {c} (body)", "PUT", lambda t: f"/elections/{t['name']}/value",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x","value":"v2"}', (), "token", False, tg.leader),
            (f"owner with raw {c}", "POST", "/semaphores/hx-sem", b'{"limit":1,"owner":"web' + bc + b'-evil"}', (),
             "owner", False, None),
            (f"tokens with raw {c}", "DELETE", lambda t: f"/semaphores/{t['name']}",
             lambda t, bc=bc: b'{"tokens":["' + tokb(t) + bc + b'x"]}', (), "token", False, tg.permit),
            (f"token with raw {c} (body)", "DELETE", lambda t: f"/semaphores/{t['name']}",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x"}', (), "token", False, tg.permit),
            (f"lockOwner with raw {c}", "POST", LK,
             b'{"resourceId":"hx-r","lockOwner":"worker' + bc + b'A","expiryInSeconds":60}', (), None, True, None),
            (f"resourceId with raw {c}", "POST", LK,
             b'{"resourceId":"hx-r' + bc + b'x","lockOwner":"worker","expiryInSeconds":60}', (), None, True, None),
            (f"lockOwner with raw {c} (another's lock)", "POST", UL,
             lambda t, bc=bc: b'{"resourceId":"' + t["name"].encode() + b'","lockOwner":"worker' + bc + b'B"}',
             (), None, True, tg.dapr_lock),
            (f"unknown field's string with raw {c}", "POST", "/locks/hx-unknown",
             b'{"note":"a' + bc + b'b","ttl_ms":5000}', (), None, False, None),
            (f"key with raw {c}", "POST", "/locks/hx-key", b'{"ttl_ms' + bc + b'x":1}', (), None, False, None),
        ]
        if ctl == 0x00:
            # Beyond the routes listed in the brief: the other two that take a
            # body with a token (the issue: every HTTP route).
            sites += [
                (f"tokens with raw {c}", "PATCH", lambda t: f"/semaphores/{t['name']}",
                 lambda t: b'{"tokens":["' + tokb(t) + b'\x00x"],"ttl_ms":5000}', (), "token", False, tg.permit),
                (f"token with raw {c} (body)", "DELETE", lambda t: f"/elections/{t['name']}",
                 lambda t: b'{"token":"' + tokb(t) + b'\x00x"}', (), "token", False, tg.leader),
            ]
    # Duplicate keys.
    sites += [
        ("duplicate ttl_ms", "POST", "/locks/hx-dup", b'{"ttl_ms":1000,"ttl_ms":-1}', (), "ttl_ms", False, None),
        ("duplicate ttl_ms", "PATCH", lambda t: f"/locks/{t['name']}", b'{"ttl_ms":1000,"ttl_ms":-1}', H,
         "ttl_ms", False, tg.lock),
        ("duplicate token", "DELETE", lambda t: f"/locks/{t['name']}",
         lambda t: b'{"token":"' + tokb(t) + b'","token":"x"}', (), "token", False, tg.lock),
        ("duplicate ttl_ms", "POST", "/elections/hx-dup", b'{"candidate":"a","ttl_ms":1000,"ttl_ms":-1}', (),
         "ttl_ms", False, None),
        ("duplicate candidate", "POST", "/elections/hx-dup", b'{"candidate":"a","candidate":"b"}', (),
         "candidate", False, None),
        ("duplicate value", "PUT", lambda t: f"/elections/{t['name']}/value", b'{"value":"a","value":"b"}', H,
         "value", False, tg.leader),
        ("duplicate ttl_ms", "POST", "/semaphores/hx-dup", b'{"limit":1,"ttl_ms":1000,"ttl_ms":-1}', (),
         "ttl_ms", False, None),
        ("duplicate limit", "POST", "/semaphores/hx-dup", b'{"limit":1,"limit":2}', (), "limit", False, None),
        ("duplicate tokens", "DELETE", lambda t: f"/semaphores/{t['name']}",
         lambda t: b'{"tokens":["' + tokb(t) + b'"],"tokens":["0:x"]}', (), "token", False, tg.permit),
        ("duplicate expiryInSeconds", "POST", LK,
         b'{"resourceId":"hx-dup","lockOwner":"o","expiryInSeconds":10,"expiryInSeconds":-1}', (),
         "expiryInSeconds", True, None),
        ("duplicate lockOwner", "POST", LK,
         b'{"resourceId":"hx-dup","lockOwner":"o","lockOwner":"p","expiryInSeconds":10}', (), None, True, None),
        ("duplicate lockOwner", "POST", UL,
         lambda t: b'{"resourceId":"' + t["name"].encode() + b'","lockOwner":"worker","lockOwner":"x"}', (), None,
         True, tg.dapr_lock),
    ]
    # Integers: a fraction, an exponent, out of range, negative.
    for v in ("1.0", "1e3", "1.5", "99999999999999999999", "-1"):
        vb = v.encode()
        sites += [
            (f"ttl_ms {v}", "POST", "/locks/hx-int", b'{"ttl_ms":' + vb + b'}', (), "ttl_ms", False, None),
            (f"wait_ms {v}", "POST", "/locks/hx-int", b'{"wait_ms":' + vb + b'}', (), "wait_ms", False, None),
            (f"ttl_ms {v}", "PATCH", lambda t: f"/locks/{t['name']}", b'{"ttl_ms":' + vb + b'}', H, "ttl_ms",
             False, tg.lock),
            (f"ttl_ms {v}", "POST", "/elections/hx-int", b'{"candidate":"a","ttl_ms":' + vb + b'}', (), "ttl_ms",
             False, None),
            (f"limit {v}", "POST", "/semaphores/hx-int", b'{"limit":' + vb + b'}', (), "limit", False, None),
            (f"permits {v}", "POST", "/semaphores/hx-int", b'{"limit":2,"permits":' + vb + b'}', (), "permits",
             False, None),
            (f"ttl_ms {v}", "POST", "/semaphores/hx-int", b'{"limit":1,"ttl_ms":' + vb + b'}', (), "ttl_ms",
             False, None),
            (f"wait_ms {v}", "POST", "/semaphores/hx-int", b'{"limit":1,"wait_ms":' + vb + b'}', (), "wait_ms",
             False, None),
            (f"expiryInSeconds {v}", "POST", LK,
             b'{"resourceId":"hx-int","lockOwner":"o","expiryInSeconds":' + vb + b'}', (), "expiryInSeconds",
             True, None),
        ]
    # Invalid UTF-8 inside a string (a lone lead byte, a stray continuation
    # byte, an overlong '/').
    for label, bad in (("lone lead byte", b"caf\xc3"), ("0xff", b"a\xffb"), ("overlong", b"a\xc0\xafb")):
        sites += [
            (f"owner with invalid UTF-8 ({label})", "POST", "/locks/hx-utf", b'{"owner":"' + bad + b'"}', (), None,
             False, None),
            (f"unknown field with invalid UTF-8 ({label})", "POST", "/locks/hx-utf",
             b'{"note":"' + bad + b'","ttl_ms":5000}', (), None, False, None),
            (f"value with invalid UTF-8 ({label})", "POST", "/elections/hx-utf",
             b'{"candidate":"a","value":"' + bad + b'"}', (), None, False, None),
            (f"value with invalid UTF-8 ({label})", "PUT", lambda t: f"/elections/{t['name']}/value",
             b'{"value":"' + bad + b'"}', H, None, False, tg.leader),
            (f"owner with invalid UTF-8 ({label})", "POST", "/semaphores/hx-utf",
             b'{"limit":1,"owner":"' + bad + b'"}', (), None, False, None),
            (f"lockOwner with invalid UTF-8 ({label})", "POST", LK,
             b'{"resourceId":"hx-utf","lockOwner":"' + bad + b'","expiryInSeconds":60}', (), None, True, None),
            (f"unknown field with invalid UTF-8 ({label})", "POST", UL,
             lambda t, bad=bad: b'{"resourceId":"' + t["name"].encode() + b'","lockOwner":"worker","note":"'
             + bad + b'"}', (), None, True, tg.dapr_lock),
        ]
    for label, method, path, body, headers, field, dapr, target in sites:
        route = route_of(method, path, target, tg)
        hostile(D, masters, f"1 {method} {route}: {label}", method, path, body, headers, field, dapr,
                target=target)
    dapr_owner_scenario(D, masters)


def route_of(method, path, target, tg):
    if isinstance(path, str):
        return re.sub(r"/(locks|elections|semaphores)/[^/]+", r"/\1/{name}", path)
    kind = {tg.lock: "locks", tg.permit: "semaphores", tg.leader: "elections", tg.dapr_lock: None}[target]
    if kind is None:
        return UL
    return f"/{kind}/{{name}}" + ("/value" if method == "PUT" else "")


def dapr_owner_scenario(D, masters):
    """Issue 27's Dapr case: owners "worker<NUL>A" and "worker<NUL>B" were
    one owner, and B's unlock released A's lock."""
    case = "1 Dapr: lock by worker<NUL>A, unlock by worker<NUL>B"
    r = "hx-dapr-r"
    before = snapshot(masters)
    t0 = time.monotonic()
    probs = []
    a = send(D.port, "POST", LK, b'{"resourceId":"' + r.encode() + b'","lockOwner":"worker\x00A",'
             b'"expiryInSeconds":60}')
    probs += ["lock: " + p for p in json_error(a, 400, "ERR_MALFORMED_REQUEST", dapr=True)]
    a = send(D.port, "POST", UL, b'{"resourceId":"' + r.encode() + b'","lockOwner":"worker\x00B"}')
    probs += ["unlock: " + p for p in json_error(a, 400, "ERR_MALFORMED_REQUEST", dapr=True)]
    g = D.req("GET", f"/locks/{STORE}%7C%7C{r}")
    if g.status != 200 or g.json().get("held") is not False:
        probs.append(f"the lock was taken: GET {g.status} {g.body[:200]!r}")
    changed = compare(before, snapshot(masters), (time.monotonic() - t0) * 1000)
    probs += changed
    if changed:
        restore(masters, before, (time.monotonic() - t0) * 1000)
    record(case, probs)

    # The control: plain owners workerA and workerB are two owners.
    case = "1 Dapr: lock by workerA, unlock by workerB (control)"
    probs = []
    a = D.req("POST", LK, {"resourceId": r, "lockOwner": "workerA", "expiryInSeconds": 60})
    if a.status != 200 or a.json() != {"success": True}:
        probs.append(f"lock by workerA: {a.status} {a.body[:200]!r}")
    a = D.req("POST", UL, {"resourceId": r, "lockOwner": "workerB"})
    if a.status != 200 or a.json() != {"status": 2}:   # LOCK_BELONGS_TO_OTHERS (docs/api.md)
        probs.append(f"unlock by workerB: {a.status} {a.body[:200]!r}, not {{\"status\": 2}}")
    g = D.req("GET", f"/locks/{STORE}%7C%7C{r}")
    if g.status != 200 or g.json().get("held") is not True:
        probs.append(f"workerA's lock is gone after workerB's unlock: {g.status} {g.body[:200]!r}")
    a = D.req("POST", UL, {"resourceId": r, "lockOwner": "workerA"})
    if a.status != 200 or a.json() != {"status": 0}:
        probs.append(f"unlock by workerA: {a.status} {a.body[:200]!r}")
    record(case, probs)


# ---- 2: every integer an integer literal ----

def no_float(s):
    raise ValueError(f"a number that is not an integer literal: {s}")


def strict(raw, what, probs):
    """raw decoded so that any fraction or exponent fails."""
    try:
        return json.loads(raw if isinstance(raw, str) else raw.decode(), parse_float=no_float,
                          parse_constant=no_float)
    except ValueError as e:
        probs.append(f"{what}: {e} in {raw[:300]!r}")
        try:
            return json.loads(raw)
        except ValueError:
            return None


def expect_status(a, status, what, probs):
    if a.status != status:
        probs.append(f"{what}: {a.status} {a.body[:200]!r}, not {status}")
        return False
    return True


class Watch:
    """A watch stream read on a thread: its lines, as they come."""

    def __init__(self, D, name):
        self.s = httpraw.Stream(D.port, "GET", f"/elections/{name}?watch=true", timeout=READ_S)
        self.lines = []
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                line = self.s.next_line(0.5)
            except TimeoutError:
                continue
            except (OSError, EOFError, ValueError):
                return
            if line is None:
                return
            self.lines.append(line)

    def close(self):
        self.stop = True
        self.t.join(5)
        self.s.close()


def section_integers(D):
    # Fences and terms of one name grow by one per grant, so ten grants in a
    # row give one whose last digit is 0: the number a %.15g printer writes
    # as 1.79...e+15.
    probs = []
    n = "int-sem"
    for i in range(30):
        a = D.req("POST", f"/semaphores/{n}", {"limit": 1, "ttl_ms": 5000})
        if not expect_status(a, 201, f"POST /semaphores #{i}", probs):
            break
        j = strict(a.body, f"POST /semaphores/{n} #{i}", probs)
        g = D.req("GET", f"/semaphores/{n}")
        if expect_status(g, 200, f"GET /semaphores #{i}", probs):
            strict(g.body, f"GET /semaphores/{n} #{i}", probs)
        d = D.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": j["permits"][0]["token"]})
        expect_status(d, 204, f"DELETE /semaphores #{i}", probs)
    record("2 POST and GET /semaphores/{name}: 30 grants, integers only", probs)

    probs = []
    n = "int-semh"
    for i in range(12):
        s = httpraw.Stream(D.port, "POST", f"/semaphores/{n}", [("Content-Type", "application/json")],
                           json.dumps({"limit": 1, "hold": True, "ttl_ms": 3000}), READ_S)
        try:
            if not expect_status(s.answer, 201, f"held permit #{i}", probs):
                break
            ev = strict(s.next_line(5.0), f"held permit #{i} acquired", probs)
            d = D.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": ev["token"]})
            expect_status(d, 204, f"release held permit #{i}", probs)
            line = s.next_line(5.0)
            if line is not None:
                strict(line, f"held permit #{i} released", probs)
        except (TimeoutError, EOFError, OSError, TypeError, KeyError) as e:
            probs.append(f"held permit #{i}: {e!r}")
        finally:
            s.close()
    record("2 POST /semaphores/{name} hold: 12 acquired events, integers only", probs)

    probs = []
    n = "int-el"
    w = Watch(D, n)
    try:
        for i in range(12):
            s = httpraw.Stream(D.port, "POST", f"/elections/{n}", [("Content-Type", "application/json")],
                               json.dumps({"candidate": "c1", "value": f"v{i}", "ttl_ms": 3000}), READ_S)
            told = len(w.lines)
            try:
                if not expect_status(s.answer, 201, f"campaign #{i}", probs):
                    break
                ev = None
                for _ in range(2):
                    ev = strict(s.next_line(5.0), f"campaign #{i} event", probs)
                if not ev or ev.get("event") != "elected":
                    probs.append(f"campaign #{i}: {ev}, not elected")
                    break
                for q in ("", "?candidate=c1"):
                    g = D.req("GET", f"/elections/{n}{q}")
                    if expect_status(g, 200, f"GET /elections #{i}{q}", probs):
                        strict(g.body, f"GET /elections/{n}{q} #{i}", probs)
                # The watch tells this term (elected, or state for the
                # first) before it is proclaimed and resigned.
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and not any(
                        b'"v%d"' % i in line for line in w.lines[told:]):
                    time.sleep(0.02)
                d = D.req("PUT", f"/elections/{n}/value", {"value": f"w{i}"}, {"Lock-Token": ev["token"]})
                expect_status(d, 204, f"proclaim #{i}", probs)
                d = D.req("DELETE", f"/elections/{n}", headers={"Lock-Token": ev["token"]})
                expect_status(d, 204, f"resign #{i}", probs)
                line = s.next_line(5.0)
                while line is not None:
                    strict(line, f"campaign #{i} event", probs)
                    line = s.next_line(5.0)
            except (TimeoutError, EOFError, OSError, TypeError, KeyError) as e:
                probs.append(f"campaign #{i}: {e!r}")
            finally:
                s.close()
        time.sleep(0.5)
    finally:
        w.close()
    if len(w.lines) < 12:
        probs.append(f"the watch told only {len(w.lines)} events of 12 terms")
    for line in w.lines:
        strict(line, "watch event", probs)
    record("2 campaigns, GET /elections/{name} and its watch: 12 terms, integers only", probs)

    probs = []
    for i in range(12):
        n = "int-hold"
        s = httpraw.Stream(D.port, "POST", f"/locks/{n}", [("Content-Type", "application/json")],
                           json.dumps({"hold": True, "ttl_ms": 3000, "owner": "o"}), READ_S)
        try:
            if not expect_status(s.answer, 201, f"held lock #{i}", probs):
                break
            ev = strict(s.next_line(5.0), f"held lock #{i} acquired", probs)
            g = D.req("GET", f"/locks/{n}")
            if expect_status(g, 200, f"GET /locks #{i}", probs):
                strict(g.body, f"GET /locks/{n} #{i}", probs)
            d = D.req("DELETE", f"/locks/{n}", headers={"Lock-Token": ev["token"]})
            expect_status(d, 204, f"release held lock #{i}", probs)
            line = s.next_line(5.0)
            if line is not None:
                strict(line, f"held lock #{i} released", probs)
        except (TimeoutError, EOFError, OSError, TypeError, KeyError) as e:
            probs.append(f"held lock #{i}: {e!r}")
        finally:
            s.close()
        a = D.req("POST", "/locks/int-lock", {"ttl_ms": 5000})
        if expect_status(a, 201, f"POST /locks #{i}", probs):
            j = strict(a.body, f"POST /locks #{i}", probs)
            D.req("DELETE", "/locks/int-lock", headers={"Lock-Token": j["token"]})
    record("2 POST /locks/{name} (plain and held) and GET /locks/{name}: integers only", probs)


# ---- 3: framing ----

def raw_exchange(port, data, expect_close):
    """Sends data on a connection of its own; the answer (head and body,
    or None when the connection closed without one) and whether it was
    closed within READ_S."""
    c = httpraw.Conn(port, READ_S)
    a, closed, err = None, False, None
    deadline = time.monotonic() + READ_S
    try:
        c.send(data)
        try:
            a = c.read_head(READ_S)
            c.read_body(a, "POST", max(0.001, deadline - time.monotonic()))
        except EOFError:
            closed = True
        except ConnectionResetError:
            closed = True
        except (TimeoutError, ValueError) as e:
            err = e
        if expect_close and not closed and err is None:
            try:
                while True:
                    c._fill(deadline)
            except (EOFError, ConnectionResetError):
                closed = True
            except TimeoutError as e:
                err = e
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    finally:
        c.close()
    return a, closed, err


def framing_case(D, masters, case, data, status, code, names, expect_close=False, require_answer=True):
    before = snapshot(masters)
    t0 = time.monotonic()
    a, closed, err = raw_exchange(D.port, data, expect_close)
    probs = []
    if require_answer:
        if a is None:
            probs.append(f"no answer ({'closed' if closed else repr(err)})")
        else:
            probs += json_error(a, status, code)
    if expect_close and not closed:
        probs.append(f"the connection was not closed within {READ_S:.0f} s ({err!r})")
    time.sleep(0.2)   # a grant answers once a majority said yes; the others follow
    for n in names:
        on = keys_named(masters, n)
        if on:
            probs.append(f"lock {n} exists on masters {on}")
    changed = compare(before, snapshot(masters), (time.monotonic() - t0) * 1000)
    probs += changed
    if changed:
        restore(masters, before, (time.monotonic() - t0) * 1000)
    record(case, probs)


def section_framing(D, masters):
    J = b"Content-Type: application/json\r\n"
    framing_case(D, masters, "3 Transfer-Encoding: gzip: 501 not_implemented",
                 b"POST /locks/fr-gzip HTTP/1.1\r\nHost: 127.0.0.1\r\n" + J
                 + b"Transfer-Encoding: gzip\r\n\r\n"
                 + b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\xae\x05\x00\x43\xbf\xa6\xa3\x02\x00\x00\x00",
                 501, "not_implemented", ["fr-gzip"])
    # libmicrohttpd 0.9.75 neither shows the application a chunk's size nor
    # lets it answer while a body is still arriving (MHD_queue_response
    # refuses outside HEADERS_PROCESSED and FULL_REQ_RECEIVED, connection.c
    # around line 5128): the 413 comes once the chunked body has ended,
    # and nothing of it runs.
    chunk = b'{"ttl_ms":1000' + b" " * (2 * BODY_LIMIT - 15) + b"}"
    framing_case(D, masters, "3 chunk size above --max-body-bytes: 413 too_large once it ends",
                 b"POST /locks/fr-chunk HTTP/1.1\r\nHost: 127.0.0.1\r\n" + J
                 + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(chunk) + chunk
                 + b"\r\n0\r\n\r\n",
                 413, "too_large", ["fr-chunk"])
    framing_case(D, masters, "3 Content-Length: 2 folded onto ' 40' (obs-fold): 400, no lock",
                 b"POST /locks/fr-fold HTTP/1.1\r\nHost: 127.0.0.1\r\n" + J
                 + b"Content-Length: 2\r\n 40\r\nConnection: close\r\n\r\n{}",
                 400, None, ["fr-fold"])
    framing_case(D, masters, "3 HTTP/1.1 without Host: 400 bad_request, no lock",
                 b"POST /locks/fr-nohost HTTP/1.1\r\n" + J + b"Content-Length: 2\r\nConnection: close\r\n\r\n{}",
                 400, "bad_request", ["fr-nohost"])
    # The same as HTTP/1.0, where Host is optional: served.
    probs = []
    a, closed, err = raw_exchange(D.port, b"POST /locks/fr-nohost10 HTTP/1.0\r\n" + J
                                  + b"Content-Length: 2\r\n\r\n{}", False)
    if a is None or a.status != 201:
        probs.append(f"HTTP/1.0 without Host: {a.status if a else None} {a.body[:200] if a else err!r}, not 201")
    else:
        tok = json.loads(a.body)["token"]
        d = D.req("DELETE", "/locks/fr-nohost10", headers={"Lock-Token": tok})
        if d.status != 204:
            probs.append(f"release of fr-nohost10: {d.status}")
    record("3 HTTP/1.0 without Host: served (201)", probs)
    # A garbage request line. libmicrohttpd 0.9.75 closes such a connection
    # itself before any callback of ours runs (connection.c:
    # parse_initial_message_line -> CONNECTION_CLOSE_ERROR_CHECK), and offers
    # no hook to answer it, so only the close is asserted: promptly, not
    # after the request timeout, and with nothing created.
    for label, data in (("TLS ClientHello bytes", b"\x16\x03\x01garbage\r\n\r\n"),
                        ("HELLO", b"HELLO\r\n\r\n")):
        framing_case(D, masters, f"3 garbage request line ({label}): closed", data, None, None, [],
                     expect_close=True, require_answer=False)


# ---- 4: the true cause in a 503 ----

def reasons_of(d):
    a = d.readyz()
    try:
        return [m.get("reason") for m in a.json()["masters"] if m.get("reason")], a
    except (ValueError, KeyError):
        return [], a


def wait_all_down(d, n, settled, timeout=10):
    """/readyz's reasons once all n masters are down and settled(reasons)
    holds (the first reason after a kill is the connection's close; the
    reconnects then meet the refusal), or whatever it says at the timeout."""
    deadline = time.monotonic() + timeout
    rs = []
    while time.monotonic() < deadline:
        rs, a = reasons_of(d)
        if len(rs) == n and settled(rs):
            return rs
        time.sleep(0.1)
    return rs


def key_phrases(reason):
    """A reason and its key phrases: what follows its last ': ', what it
    says in parentheses, what comes before a ';' (e.g. 'Connection
    refused', 'NOAUTH Authentication required')."""
    out = {reason, reason.rsplit(": ", 1)[-1], reason.split(";", 1)[0]}
    out.update(re.findall(r"\(([^()]+)\)", reason))
    return {p.strip().rstrip(".").lower() for p in out if len(p.strip()) >= 8}


def names_a_reason(message, reasons):
    """The message carries one of /readyz's reasons, whole or a key phrase."""
    m = message.lower()
    return any(p in m for r in reasons for p in key_phrases(r))


def section_causes(tmp):
    # (a) every master killed: connection refused.
    probs = []
    ms = [Master(tmp, f"q{i}") for i in range(5)]
    Q = Daemon(tmp, "Q", [m.port for m in ms])
    try:
        Q.wait_ready(5)
        for m in ms:
            m.kill()
        rs = wait_all_down(Q, 5, lambda rs: all("refused" in r.lower() for r in rs))
        if not rs:
            probs.append("/readyz gives no reason for a master that refuses connections")
        a = Q.req("POST", "/locks/q-1", {"ttl_ms": 1000})
        rs2, _ = reasons_of(Q)
        probs += json_error(a, 503, "no_quorum")
        if a.status == 503 and not names_a_reason(a.json().get("message", ""), rs + rs2):
            probs.append(f"the 503 says {a.json().get('message')!r}; /readyz says {sorted(set(rs + rs2))}")
    finally:
        probs += Q.stop()
    record("4 every master refuses the connection: 503 names /readyz's reason", probs)

    # (b) masters that ask for a password redlockd does not send.
    probs = []
    ms = [Master(tmp, f"p{i}", ["--requirepass", "secret"], password="secret") for i in range(5)]
    ports = ",".join(f"127.0.0.1:{m.port}" for m in ms)
    env = dict(os.environ, REDLOCKD_REDIS_PASSWORD="secret")
    r = subprocess.run([BIN, "--setup-cluster", "--masters", ports], env=env, capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        probs.append(f"set-up: redlockd --setup-cluster with the password exited {r.returncode}: {r.stdout}"
                     f"{r.stderr}")
    P = Daemon(tmp, "P", [m.port for m in ms])
    try:
        rs = wait_all_down(P, 5, lambda rs: all("auth" in r.lower() for r in rs))
        if not rs:
            probs.append("/readyz gives no reason for a master that wants a password")
        a = P.req("POST", "/locks/p-1", {"ttl_ms": 1000})
        rs2, _ = reasons_of(P)
        probs += json_error(a, 503, "no_quorum")
        if a.status == 503:
            msg = a.json().get("message", "")
            if not names_a_reason(msg, rs + rs2):
                probs.append(f"the 503 says {msg!r}; /readyz says {sorted(set(rs + rs2))}")
            if "auth" not in msg.lower():
                probs.append(f"the 503 does not say authentication: {msg!r}")
    finally:
        probs += P.stop()
        for m in ms:
            m.kill()
    record("4 masters want a password redlockd does not send: 503 says authentication", probs)


# ---- 5: waiters at SIGTERM ----

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


def section_shutdown(tmp, D, masters):
    S = Daemon(tmp, "S", [m.port for m in masters])
    stopped = False
    held = []
    try:
        S.wait_ready(5)
        probs = []
        a = S.req("POST", "/locks/sd-lock", {"ttl_ms": 30000})
        if a.status != 201:
            raise RuntimeError(f"set-up: sd-lock {a.status} {a.body[:200]!r}")
        held.append(("/locks/sd-lock", a.json()["token"]))
        p = S.req("POST", "/semaphores/sd-sem", {"limit": 1, "ttl_ms": 30000})
        if p.status != 201:
            raise RuntimeError(f"set-up: sd-sem {p.status} {p.body[:200]!r}")
        held.append(("/semaphores/sd-sem", p.json()["permits"][0]["token"]))
        a = S.req("POST", "/locks/sd-lock", {"wait_ms": 0})
        probs += json_error(a, 409, "locked")
        record("5 an acquire with wait_ms 0 on a held lock: 409 locked", probs)

        wl, wlo = in_thread(lambda: S.req("POST", "/locks/sd-lock", {"wait_ms": 20000}, timeout=30))
        ws, wso = in_thread(lambda: S.req("POST", "/semaphores/sd-sem", {"limit": 1, "wait_ms": 20000},
                                          timeout=30))
        time.sleep(1.0)   # both have tried once and wait (a set-up delay, not a measurement)
        if not wl.is_alive() or not ws.is_alive():
            record("5 set-up", [f"a waiter answered before SIGTERM: {wlo} {wso}"])
        S.proc.send_signal(signal.SIGTERM)
        stopped = True
        for t, out, case in ((wl, wlo, "5 a waiting lock acquire at SIGTERM: 503 shutting_down"),
                             (ws, wso, "5 a waiting semaphore acquire at SIGTERM: 503 shutting_down")):
            t.join(30)
            if "value" not in out:
                record(case, [f"no answer: {out.get('error')!r}"])
            else:
                record(case, json_error(out["value"], 503, "shutting_down"))
        probs = S.stop(sig=None)
        if probs:
            record("5 redlockd exits 0 at SIGTERM", probs)
    finally:
        if not stopped:
            S.stop()
        for path, tok in held:
            D.req("DELETE", path, headers={"Lock-Token": tok})


# ---- 6: a semaphore's retry_after_ms ----

def section_retry_after(D):
    probs = []
    n = "ra-sem"
    p = D.req("POST", f"/semaphores/{n}", {"limit": 1, "ttl_ms": 20000})
    if not expect_status(p, 201, "the first permit", probs):
        record("6 semaphore 409 locked: retry_after_ms is the holder's time left", probs)
        return
    tok = p.json()["permits"][0]["token"]
    a = D.req("POST", f"/semaphores/{n}", {"limit": 1, "wait_ms": 0})
    probs += json_error(a, 409, "locked")
    if a.status == 409:
        j = strict(a.body, "409 locked", probs) or {}
        ra = j.get("retry_after_ms")
        if not isinstance(ra, int) or not 10000 <= ra <= 20000:
            probs.append(f"retry_after_ms {ra!r}, not the holder's time left (10000 to 20000)")
        if not a.header("Retry-After"):
            probs.append("no Retry-After header")
    D.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": tok})
    record("6 semaphore 409 locked: retry_after_ms is the holder's time left", probs)


def main():
    wanted = set(sys.argv[1:]) or {"1", "2", "3", "4", "5", "6"}
    tmp = tempfile.mkdtemp(prefix="redlockd-hostile-")
    ok = False
    try:
        masters = [Master(tmp, f"m{i}") for i in range(5)]
        D = Daemon(tmp, "D", [m.port for m in masters])
        D.wait_ready(5)
        log(f"masters {[m.port for m in masters]}, redlockd on {D.port}")
        for sec, name, fn in [("1", "strict JSON", lambda: section_strict_json(D, masters)),
                              ("3", "framing", lambda: section_framing(D, masters)),
                              ("2", "integer literals", lambda: section_integers(D)),
                              ("6", "semaphore retry_after_ms", lambda: section_retry_after(D)),
                              ("4", "true causes in 503", lambda: section_causes(tmp)),
                              ("5", "waiters at SIGTERM", lambda: section_shutdown(tmp, D, masters))]:
            if sec not in wanted:
                continue
            log(f"== {sec}: {name}")
            try:
                fn()
            except Exception:  # noqa: BLE001
                record(f"{sec} {name}: the section itself", [traceback.format_exc()])
        probs = D.stop()
        if probs:
            record("redlockd D exits 0 at SIGTERM, no sanitizer report", probs)
        ok = all(not p for p in results.values())
    finally:
        for p in children:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"logs kept in {tmp}")
    failed = [c for c in order if results[c]]
    print("\n==== hostile input: %d cases, %d failed ====" % (len(order), len(failed)))
    for c in order:
        print(("PASS  " if not results[c] else "FAIL  ") + c)
    sys.exit(0 if not failed and order else 1)


if __name__ == "__main__":
    main()
