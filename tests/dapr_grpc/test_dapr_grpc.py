#!/usr/bin/env python3
"""Dapr's lock API over gRPC (--dapr-grpc-listen) with real gRPC clients.

Starts five redis-server masters on free loopback ports and two redlockd
instances over them (one without auth, one with --auth-token-file), then:

* grpcio (Debian's python3-grpcio) with stubs that grpc_tools (python3-grpc-
  tools) generates from the repository's api/dapr_lock.proto at test time:
  TryLockAlpha1 / UnlockAlpha1 / GetMetadata, every UnlockResponse status,
  the same lock seen through the HTTP APIs, validation as Dapr does it
  (INVALID_ARGUMENT), UNIMPLEMENTED for other methods, UNAUTHENTICATED
  without the dapr-api-token, bad protobuf and oversize messages, 100
  concurrent calls on one channel (beyond the 32 streams a connection may
  open);
* raw sockets: garbage and an HTTP/1.1 request instead of the preface
  (GOAWAY PROTOCOL_ERROR, then the close), HTTP/2 garbage, truncated
  frames, oversize frames, header lists beyond the limit, streams beyond
  the limit (refused), connections beyond --max-connections (and one that
  waits while others close, which is served), and a connection that never
  completes a call (closed after --request-timeout-ms); the service keeps
  serving;
* the Dapr JavaScript SDK (npm @dapr/dapr, pinned in package.json and
  package-lock.json, installed with npm ci into the build directory) in gRPC
  mode, with a token: start (GetMetadata), metadata, lock, unlock;
* GET /v1.0/healthz/outbound on the HTTP side: 204, open.

Both daemons stop on SIGTERM with status 0 and, in a sanitizer build,
without a report. Missing Python packages are installed with apt-get (as
root); the test fails, never skips, when they cannot be had.

usage: test_dapr_grpc.py SOURCE_ROOT BUILD_DIR   (env REDLOCKD_BIN: the daemon)
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

sys.dont_write_bytecode = True   # no __pycache__ in the source tree

ROOT, BUILD = sys.argv[1], sys.argv[2]
BIN = os.environ.get("REDLOCKD_BIN", "redlockd")
HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "grpc-test-token"
T0 = time.monotonic()
failures = []


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def fail(msg):
    log("FAIL: " + msg)
    failures.append(msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


# ---- packages: installed when missing, never skipped ----

def need_python_packages():
    try:
        import grpc  # noqa: F401
        import grpc_tools.protoc  # noqa: F401
        return
    except ImportError:
        pass
    log("installing python3-grpcio python3-grpc-tools with apt-get")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                           "python3-grpcio", "python3-grpc-tools"], env=env, check=True)


def stubs(outdir):
    """dapr_lock_pb2 and dapr_lock_pb2_grpc from the repository's .proto."""
    from grpc_tools import protoc
    api = os.path.join(ROOT, "api")
    rc = protoc.main(["protoc", f"-I{api}", f"--python_out={outdir}", f"--grpc_python_out={outdir}",
                      os.path.join(api, "dapr_lock.proto")])
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({rc})")
    sys.path.insert(0, outdir)
    import dapr_lock_pb2
    import dapr_lock_pb2_grpc
    return dapr_lock_pb2, dapr_lock_pb2_grpc


def npm_ready(sub="dapr_grpc_js", here=HERE, what="@dapr/dapr"):
    """The packages pinned in here/package-lock.json, in BUILD/sub/node_modules
    (npm ci; again only when the lock file changed)."""
    d = os.path.join(BUILD, sub)
    os.makedirs(d, exist_ok=True)
    lock = open(os.path.join(here, "package-lock.json"), "rb").read()
    stamp = os.path.join(d, "node_modules", ".redlockd-lock")
    if os.path.exists(stamp) and open(stamp, "rb").read() == lock:
        return d
    for f in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(here, f), d)
    if not shutil.which("npm") or not shutil.which("node"):
        raise RuntimeError("node and npm are needed (scripts/deps.sh installs npm)")
    log(f"installing {what} from package-lock.json (npm ci)")
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=d, check=True,
                   timeout=600)
    open(stamp, "wb").write(lock)
    return d


# ---- processes ----

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from testproc import children, free_port, spawn  # noqa: E402


def http(port, method, path, body=None, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers=dict(headers or {}, **({"Content-Type": "application/json"}
                                                                if body is not None else {})))
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Master:
    def __init__(self, tmp, i):
        self.port = free_port()
        d = os.path.join(tmp, f"m{i}")
        os.mkdir(d)
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                           "--dir", d, "--save", "", "--appendonly", "no"],
                          os.path.join(d, "redis.log"))
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on {self.port} did not start")


class Daemon:
    def __init__(self, tmp, name, masters, extra=()):
        self.name = name
        self.port = free_port()
        self.gport = free_port()
        self.log = os.path.join(tmp, f"redlockd-{name}.log")
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env.setdefault("TSAN_OPTIONS", "exitcode=99")
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=99"
        argv = [BIN, "--listen", f"127.0.0.1:{self.port}", "--dapr-grpc-listen",
                f"127.0.0.1:{self.gport}", "--masters",
                ",".join(f"127.0.0.1:{m.port}" for m in masters), "--log-format", "text"] + list(extra)
        self.proc = spawn(argv, self.log, env)
        deadline = time.monotonic() + 15
        while True:
            try:
                st, body = http(self.port, "GET", "/readyz")
                if st == 200 and all(m["marker"] == "ready" for m in json.loads(body)["masters"]):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redlockd {name} not ready: {open(self.log).read()[-2000:]}")
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            fail(f"redlockd {self.name} did not stop within 20 s of SIGTERM")
        text = open(self.log, errors="replace").read()
        if re.search(r"ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:", text):
            fail(f"redlockd {self.name}: sanitizer report in its log:\n{text[-6000:]}")
        check(rc == 0, f"redlockd {self.name} exited {rc} (log {self.log})")
        log(f"redlockd {self.name} stopped: exit {rc}")


# ---- gRPC with grpcio ----

def grpc_calls(A, pb, pbg):
    import grpc
    ch = grpc.insecure_channel(f"127.0.0.1:{A.gport}")
    stub = pbg.DaprStub(ch)
    St = pb.UnlockResponse

    def lock(res, owner, expiry=30, store="lockstore"):
        return stub.TryLockAlpha1(pb.TryLockRequest(store_name=store, resource_id=res,
                                                    lock_owner=owner, expiry_in_seconds=expiry),
                                  timeout=5).success

    def unlock(res, owner, store="lockstore"):
        return stub.UnlockAlpha1(pb.UnlockRequest(store_name=store, resource_id=res,
                                                  lock_owner=owner), timeout=5).status

    def code_of(fn, *a, **kw):
        try:
            fn(*a, **kw)
            return None, ""
        except grpc.RpcError as e:
            return e.code(), e.details()

    check(lock("order-1", "owner-a") is True, "TryLock of a free resource: success true")
    check(lock("order-1", "owner-b") is False, "TryLock by another owner: success false")
    check(lock("order-1", "owner-a") is False, "TryLock again by the holder: success false "
          "(no re-entry, as Dapr's Redis store)")
    st, body = http(A.port, "GET", "/locks/lockstore%7C%7Corder-1")
    check(st == 200 and json.loads(body)["held"] is True,
          f"the gRPC lock is the native lock lockstore||order-1: {st} {body[:200]!r}")
    check(unlock("order-1", "owner-b") == St.LOCK_BELONGS_TO_OTHERS,
          "Unlock by the wrong owner: LOCK_BELONGS_TO_OTHERS")
    check(unlock("order-1", "owner-a") == St.SUCCESS, "Unlock by the owner: SUCCESS")
    check(unlock("order-1", "owner-a") == St.LOCK_DOES_NOT_EXIST, "Unlock again: LOCK_DOES_NOT_EXIST")
    check(lock("order-1", "owner-b") is True, "TryLock after the unlock: success true")
    check(unlock("order-1", "owner-b") == St.SUCCESS, "Unlock by the new owner: SUCCESS")
    log("grpc: TryLock / Unlock, every status")

    # Across APIs: taken over HTTP (Dapr route), released over gRPC, and back.
    st, body = http(A.port, "POST", "/v1.0-alpha1/lock/lockstore",
                    {"resourceId": "order-2", "lockOwner": "owner-h", "expiryInSeconds": 30})
    check(st == 200 and json.loads(body) == {"success": True}, f"HTTP Dapr lock: {st} {body!r}")
    check(lock("order-2", "owner-g") is False, "gRPC TryLock of an HTTP-held lock: false")
    check(unlock("order-2", "owner-h") == St.SUCCESS, "gRPC Unlock of an HTTP lock by its owner")
    check(lock("order-2", "owner-g") is True, "gRPC TryLock once free")
    st, body = http(A.port, "POST", "/v1.0-alpha1/unlock/lockstore",
                    {"resourceId": "order-2", "lockOwner": "owner-g"})
    check(st == 200 and json.loads(body) == {"status": 0}, f"HTTP Dapr unlock of a gRPC lock: {body!r}")
    # A second store is its own namespace.
    check(lock("order-3", "o", store="other") is True and lock("order-3", "o") is True,
          "the same resource in two stores: two locks")
    check(unlock("order-3", "o", store="other") == St.SUCCESS and unlock("order-3", "o") == St.SUCCESS,
          "unlock in both stores")
    log("grpc: the same locks as the HTTP APIs, per store")

    # Validation, with Dapr's codes (InvalidArgument) and messages.
    bad = [
        (dict(store_name="lockstore", resource_id="", lock_owner="o", expiry_in_seconds=5),
         "ResourceId is empty"),
        (dict(store_name="lockstore", resource_id="r", lock_owner="", expiry_in_seconds=5),
         "LockOwner is empty"),
        (dict(store_name="lockstore", resource_id="r", lock_owner="o", expiry_in_seconds=0),
         "ExpiryInSeconds is not positive"),
        (dict(store_name="lockstore", resource_id="r", lock_owner="o", expiry_in_seconds=-3),
         "ExpiryInSeconds is not positive"),
        (dict(store_name="lockstore", resource_id="r", lock_owner="o", expiry_in_seconds=3601),
         "at most 3600"),
        (dict(store_name="nostore", resource_id="r", lock_owner="o", expiry_in_seconds=5),
         "lock store nostore is not found"),
        (dict(store_name="lockstore", resource_id="r\x1f#fence", lock_owner="o", expiry_in_seconds=5),
         "resourceId must be"),
        (dict(store_name="lockstore", resource_id="r" * 201, lock_owner="o", expiry_in_seconds=5),
         "1 to 200 bytes"),
        (dict(store_name="lockstore", resource_id="r", lock_owner="has\ttab", expiry_in_seconds=5),
         "lockOwner must be"),
        (dict(store_name="lockstore", resource_id="a||b", lock_owner="o", expiry_in_seconds=5),
         "can't contain '||'"),
        (dict(store_name="lockstore", resource_id="a\0b", lock_owner="o", expiry_in_seconds=5),
         "NUL byte"),
    ]
    for fields, words in bad:
        code, details = code_of(stub.TryLockAlpha1, pb.TryLockRequest(**fields), timeout=5)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and words in details,
              f"TryLock {fields!r}: {code} {details!r}, expected INVALID_ARGUMENT with {words!r}")
    code, details = code_of(stub.UnlockAlpha1, pb.UnlockRequest(store_name="lockstore",
                                                                resource_id="r", lock_owner=""))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "LockOwner is empty" in details,
          f"Unlock without owner: {code} {details!r}")
    st, body = http(A.port, "GET", "/locks/lockstore%7C%7Ca")
    check(json.loads(body)["held"] is False, "the NUL-cut name 'a' was not locked")
    log(f"grpc: {len(bad) + 1} invalid requests: INVALID_ARGUMENT with Dapr's messages")

    # Bad protobuf, framing and sizes.
    raw = ch.unary_unary("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1",
                         request_serializer=lambda b: b, response_deserializer=lambda b: b)
    for what, data, want in [
        ("garbage", b"\xff\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT),
        ("a truncated string field", b"\x12\x10abc", grpc.StatusCode.INVALID_ARGUMENT),
        ("a wrong wire type", b"\x0d\x01\x02\x03\x04", grpc.StatusCode.INVALID_ARGUMENT),
        ("a 5000-byte message", b"\x12\x88\x27" + b"a" * 5000, grpc.StatusCode.RESOURCE_EXHAUSTED),
        ("a 1 MB message", b"\x12\x80\x80\x40" + b"a" * (1 << 20), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ]:
        code, details = code_of(raw, data, timeout=10)
        check(code == want and details, f"{what}: {code} {details!r}, expected {want}")
    # An empty message is a TryLockRequest with every field empty.
    code, details = code_of(raw, b"", timeout=5)
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "lock store  is not found" in details,
          f"an empty TryLockRequest: {code} {details!r}")
    other = ch.unary_unary("/dapr.proto.runtime.v1.Dapr/GetState",
                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
    code, details = code_of(other, b"", timeout=5)
    check(code == grpc.StatusCode.UNIMPLEMENTED, f"GetState: {code} {details!r}, expected UNIMPLEMENTED")
    code, _ = code_of(ch.unary_unary("/other.Service/Method", request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b), b"", timeout=5)
    check(code == grpc.StatusCode.UNIMPLEMENTED, f"another service: {code}, expected UNIMPLEMENTED")
    log("grpc: bad protobuf INVALID_ARGUMENT, oversize RESOURCE_EXHAUSTED, other methods UNIMPLEMENTED")

    md = stub.GetMetadata(pb.GetMetadataRequest(), timeout=5)
    names = [c.name for c in md.registered_components]
    check(md.id == "redlockd" and names == ["lockstore", "other"] and
          all(c.type == "lock.redlockd" for c in md.registered_components) and
          md.runtime_version.startswith("redlockd-"), f"GetMetadata: {md}")
    log(f"grpc: GetMetadata id={md.id} components={names} runtime_version={md.runtime_version}")

    # 100 calls at once on one channel: beyond the 32 streams a connection
    # may have open, the client queues; every one is answered.
    t = time.monotonic()
    futs = [stub.TryLockAlpha1.future(pb.TryLockRequest(store_name="lockstore", resource_id=f"c-{i}",
                                                        lock_owner="many", expiry_in_seconds=30),
                                      timeout=20) for i in range(100)]
    ok = sum(1 for f in futs if f.result().success)
    futs = [stub.UnlockAlpha1.future(pb.UnlockRequest(store_name="lockstore", resource_id=f"c-{i}",
                                                      lock_owner="many"), timeout=20) for i in range(100)]
    unl = sum(1 for f in futs if f.result().status == St.SUCCESS)
    check(ok == 100 and unl == 100, f"100 concurrent calls: {ok} locked, {unl} unlocked")
    log(f"grpc: 100 concurrent TryLock + 100 Unlock on one channel: {ok}/{unl} in "
        f"{time.monotonic() - t:.2f} s")
    ch.close()


def grpc_auth(B, pb, pbg):
    import grpc
    ch = grpc.insecure_channel(f"127.0.0.1:{B.gport}")
    stub = pbg.DaprStub(ch)
    req = pb.TryLockRequest(store_name="lockstore", resource_id="auth-1", lock_owner="o",
                            expiry_in_seconds=10)
    for what, md in [("no token", None), ("a wrong token", [("dapr-api-token", TOKEN + "x")]),
                     ("a token prefix", [("dapr-api-token", TOKEN[:-1])])]:
        try:
            stub.TryLockAlpha1(req, metadata=md, timeout=5)
            fail(f"TryLock with {what}: answered")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED,
                  f"TryLock with {what}: {e.code()}, expected UNAUTHENTICATED")
    try:
        stub.GetMetadata(pb.GetMetadataRequest(), timeout=5)
        fail("GetMetadata without a token: answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"GetMetadata without a token: {e.code()}")
    st, body = http(B.port, "GET", "/locks/lockstore%7C%7Cauth-1", headers={"Authorization": f"Bearer {TOKEN}"})
    check(json.loads(body)["held"] is False, "nothing was locked without the token")
    md = [("dapr-api-token", TOKEN)]
    check(stub.TryLockAlpha1(req, metadata=md, timeout=5).success is True, "TryLock with the token")
    check(stub.UnlockAlpha1(pb.UnlockRequest(store_name="lockstore", resource_id="auth-1",
                                             lock_owner="o"), metadata=md, timeout=5).status == 0,
          "Unlock with the token")
    check(stub.TryLockAlpha1(req, metadata=[("authorization", f"Bearer {TOKEN}")], timeout=5).success,
          "TryLock with Authorization: Bearer")
    stub.UnlockAlpha1(pb.UnlockRequest(store_name="lockstore", resource_id="auth-1", lock_owner="o"),
                      metadata=md, timeout=5)
    st, _ = http(B.port, "GET", "/v1.0/healthz/outbound")
    check(st == 204, f"GET /v1.0/healthz/outbound without a token: {st}, expected 204")
    st, _ = http(B.port, "GET", "/v1.0/healthz")
    check(st == 204, f"GET /v1.0/healthz: {st}")
    log("grpc: UNAUTHENTICATED without or with a wrong dapr-api-token; served with it; "
        "/v1.0/healthz/outbound 204 open")
    ch.close()


# ---- raw HTTP/2: bad input must not hurt ----

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpack_int(v, prefix_bits, first=0):
    mx = (1 << prefix_bits) - 1
    if v < mx:
        return bytes([first | v])
    out = [first | mx]
    v -= mx
    while v >= 128:
        out.append(v % 128 + 128)
        v //= 128
    out.append(v)
    return bytes(out)


def hpack_literal(name, value):
    """A literal header field without indexing, new name, no Huffman."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def grpc_headers(path=b"/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"):
    return b"".join(hpack_literal(n, v) for n, v in [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
        (b":authority", b"127.0.0.1"), (b"content-type", b"application/grpc"), (b"te", b"trailers")])


def read_frames(s, timeout):
    """Frames until the server closes or goes quiet: [(type, flags, sid, payload)], closed."""
    s.settimeout(timeout)
    buf = b""
    closed = False
    try:
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            buf += d
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    frames = []
    while len(buf) >= 9:
        n = int.from_bytes(buf[:3], "big")
        if len(buf) < 9 + n:
            break
        frames.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff, buf[9:9 + n]))
        buf = buf[9 + n:]
    return frames, closed


def stop_every_thread(pid):
    """SIGSTOP, and back once every thread has stopped: kill() returns
    before the other threads of the process have taken the stop."""
    os.kill(pid, signal.SIGSTOP)
    os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)


def raw_conn(A):
    return socket.create_connection(("127.0.0.1", A.gport), timeout=5)


def raw_not_http2(A):
    """Bytes that are not an HTTP/2 preface: GOAWAY PROTOCOL_ERROR, then
    the close (RFC 9113 3.4: an invalid preface is a connection error)."""
    cases = [
        ("garbage bytes", b"\x00\xffhello garbage\r\n\r\n" * 4),
        ("an HTTP/1.1 request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a preface that goes wrong halfway", PREFACE[:10] + b"garbage\r\n\r\nmore garbage"),
    ]
    for what, data in cases:
        s = raw_conn(A)
        try:
            s.sendall(data)
        except OSError:
            pass
        frames, closed = read_frames(s, 10)
        s.close()
        goaway = [f for f in frames if f[0] == 7]
        code = int.from_bytes(goaway[0][3][4:8], "big") if goaway and len(goaway[0][3]) >= 8 else None
        check(closed and code == 1,
              f"{what} on the gRPC port: frames {[f[0] for f in frames]}, GOAWAY error code {code}, "
              f"closed {closed}; expected GOAWAY PROTOCOL_ERROR (1), then the close")
        log(f"raw: {what}: frames {[f[0] for f in frames]}, GOAWAY error {code}, "
            f"{'closed' if closed else 'open'}")


def raw_http2(A):
    cases = [
        ("garbage instead of the preface", os.urandom(4096)),
        ("an HTTP/1.1 request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("a truncated preface", PREFACE[:10]),
        ("a truncated frame header", PREFACE + frame(4, 0, 0, b"")[:5]),
        ("a frame longer than the maximum", PREFACE + frame(4, 0, 0, b"") + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01"),
        ("DATA on stream 0", PREFACE + frame(4, 0, 0, b"") + frame(0, 1, 0, b"abc")),
        ("a bad HPACK block", PREFACE + frame(4, 0, 0, b"") + frame(1, 5, 1, b"\xff\xff\xff\xff\xff\xff")),
        ("HEADERS on an even stream", PREFACE + frame(4, 0, 0, b"") + frame(1, 5, 2, grpc_headers())),
        ("a truncated gRPC message", PREFACE + frame(4, 0, 0, b"") + frame(1, 4, 1, grpc_headers()) +
         frame(0, 1, 1, b"\x00\xff\xff\xff\xff\x0a\x01")),
        ("random frames after the preface", PREFACE + frame(4, 0, 0, b"") + os.urandom(8192)),
    ]
    for what, data in cases:
        s = raw_conn(A)
        try:
            s.sendall(data)
        except OSError:
            pass
        frames, closed = read_frames(s, 1.5)
        s.close()
        log(f"raw: {what}: {len(frames)} frames back, "
            f"{'closed' if closed else 'open'}; types {[f[0] for f in frames][:8]}")
    # A header list far beyond SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB), in
    # HEADERS + CONTINUATION frames: the stream is refused, not buffered.
    s = raw_conn(A)
    block = grpc_headers() + b"".join(hpack_literal(b"x-big-%d" % i, b"v" * 8000) for i in range(40))
    chunks = [block[i:i + 16000] for i in range(0, len(block), 16000)]
    data = PREFACE + frame(4, 0, 0, b"") + frame(1, 0x1, 1, chunks[0])   # END_STREAM, no END_HEADERS
    for i, c in enumerate(chunks[1:]):
        data += frame(9, 0x4 if i == len(chunks) - 2 else 0, 1, c)
    try:
        s.sendall(data)
    except OSError:
        pass
    frames, closed = read_frames(s, 1.5)
    s.close()
    resets = [f for f in frames if f[0] == 3 or f[0] == 7]
    check(resets or closed, f"320 KB of headers: {len(frames)} frames, closed {closed}: neither "
          "RST_STREAM, GOAWAY nor a close")
    log(f"raw: 320 KB of headers in {len(chunks)} frames: "
        f"{'RST_STREAM' if any(f[0] == 3 for f in frames) else ''}"
        f"{' GOAWAY' if any(f[0] == 7 for f in frames) else ''}{' closed' if closed else ''}")
    # 200 streams opened at once, none ended, after acknowledging the
    # server's SETTINGS: beyond 32 the client breaks the protocol (RFC 9113
    # 5.1.2), and nghttp2 answers with GOAWAY PROTOCOL_ERROR naming at most
    # stream 63 (the 32nd) as processed, or refuses the streams one by one.
    s = raw_conn(A)
    data = PREFACE + frame(4, 0, 0, b"") + frame(4, 1, 0, b"")
    for i in range(200):
        data += frame(1, 0x4, 1 + 2 * i, grpc_headers())
    s.sendall(data)
    frames, closed = read_frames(s, 1.5)
    s.close()
    refused = sum(1 for f in frames if f[0] == 3 and f[3] == b"\x00\x00\x00\x07")
    goaway = [f for f in frames if f[0] == 7]
    last = int.from_bytes(goaway[0][3][:4], "big") if goaway else None
    code = int.from_bytes(goaway[0][3][4:8], "big") if goaway else None
    check(refused >= 200 - 32 or (closed and last is not None and last <= 63 and code == 1),
          f"200 open streams on one connection: {refused} refused, GOAWAY last stream {last} "
          f"code {code}, closed {closed}")
    log(f"raw: 200 streams opened at once (limit 32): {refused} REFUSED_STREAM, GOAWAY last "
        f"stream {last} error {code}, {'closed' if closed else 'open'}")


def raw_limits(A, max_conns, request_timeout_ms):
    # A connection that never sends a whole call is closed after the
    # request timeout.
    s = raw_conn(A)
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    t = time.monotonic()
    _, closed = read_frames(s, request_timeout_ms / 1000 + 2.5)
    took = time.monotonic() - t
    s.close()
    check(closed and took < request_timeout_ms / 1000 + 2.5,
          f"a connection without a call: closed {closed} after {took:.1f} s")
    log(f"raw: a connection without a call closed after {took:.1f} s "
        f"(--request-timeout-ms {request_timeout_ms})")
    # Connections beyond --max-connections are closed at once.
    held = []
    for _ in range(max_conns):
        c = raw_conn(A)
        c.sendall(PREFACE)
        held.append(c)
    time.sleep(0.2)
    extra = raw_conn(A)
    extra.sendall(PREFACE)
    t = time.monotonic()
    _, closed = read_frames(extra, 1.0)
    extra.close()
    check(closed and time.monotonic() - t < 1.0,
          f"connection {max_conns + 1} with --max-connections {max_conns}: closed {closed}")
    for c in held:
        c.close()
    log(f"raw: connection {max_conns + 1} closed at once (--max-connections {max_conns})")
    # A connection that waits to be taken while the server is at its limit
    # is served if, by the time the server takes it, others have closed:
    # closes the server has been told of count before a new connection does.
    # The daemon is stopped while that happens, so the new connection is
    # ready before the closes are (epoll would hand them over in that order).
    held = []
    for _ in range(max_conns):
        c = raw_conn(A)
        c.sendall(PREFACE + frame(4, 0, 0, b""))
        held.append(c)
    for c in held:   # every one taken: its SETTINGS came back
        c.settimeout(5)
        c.recv(9)
    stop_every_thread(A.proc.pid)
    try:
        fresh = raw_conn(A)   # the kernel completes it; the daemon has not taken it
        fresh.sendall(PREFACE + frame(4, 0, 0, b""))
        for c in held:
            c.close()
        time.sleep(0.1)
    finally:
        os.kill(A.proc.pid, signal.SIGCONT)
    frames, closed = read_frames(fresh, 0.5)
    fresh.close()
    check(not closed and frames and frames[0][0] == 4,
          f"a connection waiting while {max_conns} others closed: closed {closed}, "
          f"frames {[f[0] for f in frames]}")
    log(f"raw: a connection waiting at the limit while {max_conns} others closed: "
        f"{'closed' if closed else 'served'}")


# ---- gRPC under --max-inflight ----

def grpc_overload(D, pb, pbg, limited):
    """200 concurrent TryLocks of free resources. Under --max-inflight 1 and
    --queue-timeout-ms 1 (limited) some find no place: each of those is an
    UNAVAILABLE status that says overloaded, never success:false (which reads
    as held by another). Without the limits (the control) all are granted."""
    import grpc
    ch = grpc.insecure_channel(f"127.0.0.1:{D.gport}")
    stub = pbg.DaprStub(ch)
    stub.GetMetadata(pb.GetMetadataRequest(), timeout=10)
    tag = f"ovl-{D.name}-{os.getpid()}"
    futs = [stub.TryLockAlpha1.future(pb.TryLockRequest(store_name="lockstore", resource_id=f"{tag}-{i}",
                                                        lock_owner="o", expiry_in_seconds=30), timeout=30)
            for i in range(200)]
    granted = refused = 0
    odd = []
    for f in futs:
        try:
            if f.result().success:
                granted += 1
            else:
                odd.append("success:false")
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE and "overloaded" in e.details():
                refused += 1
            else:
                odd.append(f"{e.code()} {e.details()}")
    ch.close()
    check(not odd, f"{D.name}: answers other than granted or UNAVAILABLE overloaded: {odd[:5]}")
    if limited:
        check(refused > 0, f"{D.name}: 200 concurrent TryLocks under --max-inflight 1 all granted "
              "(gRPC bypasses the limit)")
    else:
        check(refused == 0 and granted == 200, f"{D.name} (no limit): {granted} granted, {refused} overloaded")
    log(f"grpc under --max-inflight ({'1, queue 1 ms' if limited else 'default'}): 200 concurrent "
        f"TryLocks: {granted} granted, {refused} UNAVAILABLE overloaded, {len(odd)} other")


# ---- the Dapr JavaScript SDK in gRPC mode ----

def dapr_js(B, js_dir, mode):
    env = dict(os.environ, NODE_PATH=os.path.join(js_dir, "node_modules"))
    t = time.monotonic()
    port = B.gport if mode == "grpc" else B.port
    p = subprocess.run(["node", os.path.join(HERE, "dapr-js.js"), mode, str(port), TOKEN],
                       cwd=js_dir, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t
    if not check(p.returncode == 0, f"dapr-js.js exited {p.returncode}: {p.stderr[-3000:]}"):
        return
    steps = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            o = json.loads(line)
            steps[o["step"]] = o["value"]
    want = {
        "metadata": {"id": "redlockd", "components": ["lockstore", "other"]},
        "lock_a": {"success": True},
        "lock_b": {"success": False},
        "unlock_b": {"status": 2},      # LockStatus.LockBelongsToOthers
        "unlock_a": {"status": 0},      # LockStatus.Success
        "unlock_a_again": {"status": 1},  # LockStatus.LockDoesNotExist
        "lock_b_after": {"success": True},
        "unlock_b_after": {"status": 0},
    }
    # daprd's resource ids and owners (issue 31): each excludes a second
    # owner, and the unlocks answer the right status.
    for i in range(JS_IDS):
        want.update({f"id{i}_lock_a": {"success": True}, f"id{i}_lock_b": {"success": False},
                     f"id{i}_unlock_b": {"status": 2}, f"id{i}_unlock_a": {"status": 0},
                     f"id{i}_unlock_a_again": {"status": 1}})
    for k, v in want.items():
        check(steps.get(k) == v, f"JS SDK ({mode}) {k}: {steps.get(k)!r}, expected {v!r}")
    err = (steps.get("lock_empty") or {}).get("error") or ""
    check("ResourceId is empty" in err if mode == "grpc" else err != "",
          f"JS SDK ({mode}) lock with an empty resource: {err!r}")
    log(f"dapr js sdk ({mode}, with token): {len(steps)} steps, {json.dumps(steps)[:600]} in {took:.1f} s")


JS_IDS = 5   # the ids dapr-js.js tries: orders/42, user@example.com, "a b", UTF-8, 180 bytes


def main():
    need_python_packages()
    js_dir = npm_ready()
    tmp = tempfile.mkdtemp(prefix="redlockd-grpc-")
    pb, pbg = stubs(tmp)
    masters = [Master(tmp, i) for i in range(5)]
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    A = B = None
    try:
        A = Daemon(tmp, "A", masters, ["--dapr-stores", "lockstore,other", "--max-connections", "16",
                                       "--request-timeout-ms", "1000"])
        B = Daemon(tmp, "B", masters, ["--dapr-stores", "lockstore,other", "--auth-token-file", tok])
        log(f"masters {[m.port for m in masters]}; A http {A.port} grpc {A.gport}; "
            f"B http {B.port} grpc {B.gport} (auth)")
        grpc_calls(A, pb, pbg)
        raw_not_http2(A)
        raw_http2(A)
        raw_limits(A, 16, 1000)
        grpc_calls(A, pb, pbg)   # still serving, after all that
        grpc_auth(B, pb, pbg)
        dapr_js(B, js_dir, "grpc")
        dapr_js(B, js_dir, "http")
        grpc_overload(A, pb, pbg, False)
        O = Daemon(tmp, "O", masters, ["--max-inflight", "1", "--queue-timeout-ms", "1"])
        grpc_overload(O, pb, pbg, True)
        O.stop()
        check(A.proc.poll() is None and B.proc.poll() is None, "both daemons still run")
        # Stopping with connections open: a gRPC channel that has made a
        # call, and a raw connection in the middle of one. SIGTERM still
        # ends the process at once, with status 0 and nothing leaked.
        import grpc
        ch = grpc.insecure_channel(f"127.0.0.1:{A.gport}")
        pbg.DaprStub(ch).GetMetadata(pb.GetMetadataRequest(), timeout=5)
        s = raw_conn(A)
        s.sendall(PREFACE + frame(4, 0, 0, b"") + frame(1, 0x4, 1, grpc_headers()) +
                  frame(0, 0, 1, b"\x00\x00\x00\x00\x10ab"))
        time.sleep(0.2)
        t = time.monotonic()
        A.stop()
        log(f"redlockd A stopped {time.monotonic() - t:.2f} s after SIGTERM with a channel and a "
            "half-sent call open")
        s.close()
        ch.close()
    except Exception:
        fail(traceback.format_exc())
    finally:
        for d in (A, B):
            if d and d.proc.poll() is None:
                d.stop()
        for p in children:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        log(f"{len(failures)} failure(s)")
        sys.exit(1)
    log("all passed")


if __name__ == "__main__":
    main()
