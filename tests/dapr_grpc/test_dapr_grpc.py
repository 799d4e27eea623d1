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
* clients that hold connection slots (grpc_slots.py; issue 41): calls
  without the token and PINGs do not keep a connection (a client with the
  token gets in), PINGs are not activity for the idle timeout, an answer
  that cannot be written (INITIAL_WINDOW_SIZE 0, a client that reads
  nothing) is reset and its connection closed, --max-connections-per-ip
  holds for gRPC, and a refusal at --max-connections costs the same at 16
  connections as at 2,000;
* the Dapr JavaScript SDK (npm @dapr/dapr, pinned in package.json and
  package-lock.json, installed with npm ci into the build directory) in gRPC
  mode, with a token: start (GetMetadata), metadata, lock, unlock;
* GET /v1.0/healthz/outbound on the HTTP side: 204, open.

Both daemons stop on SIGTERM with status 0 and, in a sanitizer build,
without a report. Missing Python packages are installed with apt-get (as
root); the test fails, never skips, when they cannot be had.

usage: test_dapr_grpc.py SOURCE_ROOT BUILD_DIR   (env REDLOCKD_BIN: the daemon)
"""
import os
import sys

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpc_harness import *  # noqa: F401,F403,E402
from grpc_raw import (PREFACE, frame, grpc_headers, raw_conn, raw_http2, raw_limits,  # noqa: E402
                      raw_not_http2)
from grpc_slots import run_slots  # noqa: E402


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
        run_slots(tmp, masters, tok)
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
