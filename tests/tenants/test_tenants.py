#!/usr/bin/env python3
"""One redlockd for many teams (issue 43): principals scoped to name
prefixes, with rights read, lock and admin (--principals-file), and the
audit log (--audit-log), on real redis-server masters.

Every route family refuses a principal without the right (403 forbidden,
nothing changed on the masters) and serves one with it; a token that names
no principal is 401; listings and /ui/state show only the names the caller
may read; SIGHUP reloads the file (a broken one keeps the set in force) and
reopens the audit log; every audit line is JSON and holds no token.

Usage: test_tenants.py (REDLOCKD_BIN names the daemon). Dapr's gRPC
calls need Debian's python3-grpcio and python3-grpc-tools."""
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "races"))
from races_harness import Daemon, Master, check, fail, failures, kill_all, log, wait_for  # noqa: E402
from testproc import free_port  # noqa: E402

TOKENS = {"billing": "billing-token-0123456789", "dashboard": "dashboard-token-0123456789",
          "ops": "ops-token-0123456789", "app": "app-token-0123456789"}


def sha(token):
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def principals_text(billing_prefixes="billing/,reports/"):
    return (f"# principal rights prefixes credential\n"
            f"billing   lock,read        {billing_prefixes}   {sha(TOKENS['billing'])}\n"
            f"dashboard read             *                    {sha(TOKENS['dashboard'])}\n"
            f"ops       read,lock,admin  *                    {sha(TOKENS['ops'])}\n"
            f"app       lock,read        lockstore||          {sha(TOKENS['app'])}\n")


def auth(who):
    return [("Authorization", f"Bearer {TOKENS[who] if who in TOKENS else who}")]


def held(masters, key):
    return sum(m.call("EXISTS", key) for m in masters)


def expect(a, status, error=None, what=""):
    ok = a.status == status
    if ok and error:
        try:
            ok = (a.json().get("error") or a.json().get("errorCode")) == error
        except ValueError:
            ok = False
    check(ok, f"{what}: expected {status} {error or ''}, got {a.status} {a.body[:200]!r}")
    return a


def route_families(d, masters):
    # locks
    a = expect(d.req("POST", "/locks/billing/run", {"ttl_ms": 30000}, auth("billing")), 201, what="billing takes its own")
    tok = a.json().get("token") if a.status == 201 else ""
    expect(d.req("POST", "/locks/payroll", {"ttl_ms": 30000}, auth("billing")), 403, "forbidden",
           "billing takes another team's name")
    check(held(masters, "lock:payroll") == 0, "a refused acquire wrote nothing")
    expect(d.req("POST", "/locks/billing/x", {"ttl_ms": 30000}, auth("dashboard")), 403, "forbidden",
           "dashboard (read only) takes a lock")
    expect(d.req("GET", "/locks/billing/run", None, auth("dashboard")), 200, what="dashboard reads it")
    expect(d.req("GET", "/locks/payroll", None, auth("billing")), 403, "forbidden", "billing reads payroll")
    expect(d.req("POST", "/locks/billing/x", {"ttl_ms": 30000}, auth("nobody-token")), 401, "unauthorized",
           "a token of no principal")
    expect(d.req("POST", "/locks/billing/x", {"ttl_ms": 30000}), 401, "unauthorized", "no token")
    expect(d.req("PATCH", "/locks/billing/run", {"ttl_ms": 30000}, auth("billing") + [("Lock-Token", tok)]), 200,
           what="billing extends its own")
    expect(d.req("PUT", "/locks/payroll/heartbeat", None, auth("billing") + [("Lock-Token", "t")]), 403, "forbidden",
           "billing's heartbeat on payroll")
    # force release: admin only
    expect(d.req("DELETE", "/locks/billing/run?force=true", None, auth("billing")), 403, "forbidden",
           "billing forces")
    check(held(masters, "lock:billing/run") >= 3, "a refused force changed nothing")
    expect(d.req("DELETE", "/locks/billing/run?force=true", None, auth("ops")), 204, what="ops forces")
    check(held(masters, "lock:billing/run") == 0, "the force freed the name")
    # elections
    st = d.stream("/elections/billing/leader", {"candidate": "b1", "ttl_ms": 3000}, headers=auth("billing"))
    check(st.s.answer.status == 201, f"billing campaigns: {st.s.answer.status}")
    ev = st.until("elected", 10)
    st.close()
    if ev:
        log(f"billing elected with term {ev.get('term')}")
    expect(d.req("POST", "/elections/payroll", {"candidate": "b1"}, auth("billing")), 403, "forbidden",
           "billing campaigns for payroll")
    expect(d.req("GET", "/elections/payroll", None, auth("dashboard")), 200, what="dashboard reads an election")
    # semaphores
    expect(d.req("POST", "/semaphores/reports/render", {"limit": 2}, auth("billing")), 201, what="billing's permit")
    expect(d.req("POST", "/semaphores/payroll", {"limit": 2}, auth("billing")), 403, "forbidden",
           "billing's permit of payroll")
    check(held(masters, "lock:payroll\x1f#limit") == 0, "a refused permit wrote nothing")
    # Dapr's lock API: the name is the key name, lockstore||resource
    body = {"resourceId": "r1", "lockOwner": "o", "expiryInSeconds": 30}
    a = expect(d.req("POST", "/v1.0-alpha1/lock/lockstore", body, [("dapr-api-token", TOKENS["app"])]), 200,
               what="app's Dapr lock")
    expect(d.req("POST", "/v1.0-alpha1/lock/lockstore", body, [("dapr-api-token", TOKENS["billing"])]), 403,
           "ERR_PERMISSION_DENIED", "billing's Dapr lock (lockstore||r1 is not billing's)")
    expect(d.req("POST", "/v1.0-alpha1/unlock/lockstore", {"resourceId": "r1", "lockOwner": "o"},
                 [("dapr-api-token", TOKENS["app"])]), 200, what="app's Dapr unlock")


def listings(d):
    for name, who in (("billing/a", "billing"), ("reports/b", "billing"), ("payroll/c", "ops"), ("hr/d", "ops")):
        expect(d.req("POST", f"/locks/{name}", {"ttl_ms": 30000}, auth(who)), 201, what=f"take {name}")

    def names(who):
        a = d.req("GET", "/locks?limit=1000", None, auth(who))
        return sorted(x["name"] for x in a.json().get("locks", [])) if a.status == 200 else None
    got = names("billing")
    check(got == ["billing/a", "reports/b"], f"billing's listing: {got}")
    got = names("dashboard")
    check(got is not None and {"billing/a", "reports/b", "payroll/c", "hr/d"} <= set(got), f"dashboard's listing: {got}")
    # /ui/state: waiters on a name billing may not read are not shown to it
    out = {}

    def waiter():
        out["a"] = d.req("POST", "/locks/payroll/c", {"ttl_ms": 1000, "wait_ms": 3000}, auth("ops"))
    t = threading.Thread(target=waiter)
    t.start()
    seen = {}

    def waiting():
        for who in ("billing", "ops"):
            a = d.req("GET", "/ui/state", None, auth(who))
            seen[who] = [w["name"] for w in a.json().get("waiters", [])] if a.status == 200 else None
        return seen.get("ops") and "payroll/c" in seen["ops"]
    wait_for(waiting, 5, "the waiter in ops's /ui/state")
    check(seen.get("billing") == [], f"billing's /ui/state shows {seen.get('billing')}")
    t.join(10)


def reload(d, tmp):
    path = os.path.join(tmp, "principals")
    expect(d.req("POST", "/locks/payroll/z", {"ttl_ms": 5000}, auth("billing")), 403, "forbidden", "before the reload")
    with open(path, "w") as f:
        f.write(principals_text("billing/,reports/,payroll/"))
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: d.req("POST", "/locks/payroll/z", {"ttl_ms": 5000}, auth("billing")).status == 201, 10,
             "billing's new prefix after SIGHUP")
    with open(path, "w") as f:
        f.write("billing read\n")   # broken: the set in force stays
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload_failed" in open(d.log).read(), 10, "the broken file's error in the log")
    expect(d.req("POST", "/locks/payroll/y", {"ttl_ms": 5000}, auth("billing")), 201,
           what="after a broken file, the set in force serves on")
    # the audit log reopens on SIGHUP (logrotate): moved away, a new file starts
    audit = os.path.join(tmp, "audit.log")
    os.rename(audit, audit + ".1")
    d.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: os.path.exists(audit), 10, "a new audit log after SIGHUP")
    expect(d.req("POST", "/locks/payroll", {"ttl_ms": 5000}, auth("dashboard")), 403, "forbidden", "after the reopen")
    wait_for(lambda: os.path.exists(audit) and "refused" in open(audit).read(), 10, "a line in the new audit log")


def audit_lines(tmp):
    lines = []
    for p in (os.path.join(tmp, "audit.log.1"), os.path.join(tmp, "audit.log")):
        if os.path.exists(p):
            text = open(p).read()
            for t in TOKENS.values():
                check(t not in text, f"{p} holds a token")
            for line in text.splitlines():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    fail(f"an audit line that is not JSON: {line[:200]!r}")
    events = {}
    for ev in lines:
        events.setdefault(ev.get("event"), []).append(ev)
        for k in ("time", "event", "client", "route", "outcome"):
            check(k in ev, f"audit line without {k}: {ev}")
    log(f"audit: {len(lines)} lines: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(events.items())))
    for want in ("grant", "release", "force", "refused", "term", "extend_failed", "loss"):
        check(want in events, f"no {want} line in the audit log")
    refused = [e for e in events.get("refused", []) if e.get("name") == "payroll"]
    check(any(e.get("principal") == "billing" and e.get("outcome") == "403" for e in refused),
          f"billing's refusal on payroll is not in the audit log: {refused[:3]}")
    check(any(e.get("principal") is None and e.get("outcome") == "401" for e in events.get("refused", [])),
          "a 401 without a principal is not in the audit log")
    check(any(e.get("route") == "grpc TryLockAlpha1" and e.get("outcome") == "PERMISSION_DENIED"
              for e in events.get("refused", [])), "the gRPC refusal is not in the audit log")
    check(any(e.get("route") == "grpc TryLockAlpha1" and e.get("principal") == "app" for e in events.get("grant", [])),
          "the gRPC grant is not in the audit log")
    forced = events.get("force", [])
    check(any(e.get("principal") == "ops" and e.get("name") == "billing/run" and e.get("fence", 0) > 0 for e in forced),
          f"ops's force of billing/run: {forced[:3]}")


def losses(d):
    """A failed extension and a lost stream, for their audit lines."""
    expect(d.req("PATCH", "/locks/billing/none", {"ttl_ms": 5000}, auth("billing") + [("Lock-Token", "x" * 22)]),
           409, "not_held", "an extension of nothing")
    st = d.stream("/locks/billing/lease", {"hold": True, "ttl_ms": 3000}, headers=auth("billing"))
    st.until("acquired", 10)
    expect(d.req("DELETE", "/locks/billing/lease?force=true", None, auth("ops")), 204, what="ops forces a stream")
    ev = st.until("lost", 10)
    check(ev is not None and ev.get("reason") == "forced", f"the forced stream ended {ev}")
    st.close()


def grpc_calls(d, tmp):
    """Dapr's lock API over gRPC: the same rows, the same principals."""
    import grpc
    from grpc_tools import protoc
    api = os.path.join(HERE, "..", "..", "api")
    if protoc.main(["protoc", f"-I{api}", f"--python_out={tmp}", f"--grpc_python_out={tmp}",
                    os.path.join(api, "dapr_lock.proto")]) != 0:
        raise RuntimeError("grpc_tools.protoc failed")
    sys.path.insert(0, tmp)
    import dapr_lock_pb2 as pb
    import dapr_lock_pb2_grpc as pbg
    ch = grpc.insecure_channel(f"127.0.0.1:{d.gport}")
    stub = pbg.DaprStub(ch)

    def try_lock(token, resource):
        md = [("dapr-api-token", token)] if token else []
        try:
            r = stub.TryLockAlpha1(pb.TryLockRequest(store_name="lockstore", resource_id=resource, lock_owner="o",
                                                     expiry_in_seconds=30), timeout=5, metadata=md)
            return "OK" if r.success else "NOT_GRANTED"
        except grpc.RpcError as e:
            return e.code().name
    check(try_lock(TOKENS["app"], "g1") == "OK", "app's TryLock over gRPC")
    check(try_lock(TOKENS["billing"], "g2") == "PERMISSION_DENIED", "billing's TryLock of lockstore||g2 over gRPC")
    check(try_lock("nobody", "g3") == "UNAUTHENTICATED", "a token of no principal over gRPC")
    check(try_lock(None, "g3") == "UNAUTHENTICATED", "no token over gRPC")
    try:
        stub.UnlockAlpha1(pb.UnlockRequest(store_name="lockstore", resource_id="g1", lock_owner="o"), timeout=5,
                          metadata=[("dapr-api-token", TOKENS["app"])])
    except grpc.RpcError as e:
        fail(f"app's Unlock over gRPC: {e.code().name}")
    ch.close()


def main():
    tmp = tempfile.mkdtemp(prefix="redlockd-tenants-")
    with open(os.path.join(tmp, "principals"), "w") as f:
        f.write(principals_text())
    masters, d = [], None
    try:
        masters = [Master(tmp, i) for i in range(5)]
        gport = free_port()
        d = Daemon(tmp, "t", [m.port for m in masters],
                   ["--principals-file", os.path.join(tmp, "principals"), "--audit-log", os.path.join(tmp, "audit.log"),
                    "--dapr-grpc-listen", f"127.0.0.1:{gport}"])
        d.gport = gport
        d.wait_ready(5)
        for name, fn in (("route families", lambda: route_families(d, masters)), ("listings", lambda: listings(d)),
                         ("losses", lambda: losses(d)), ("gRPC", lambda: grpc_calls(d, tmp)),
                         ("reload", lambda: reload(d, tmp))):
            log(f"== {name}")
            fn()
        d.stop()
        d = None
        audit_lines(tmp)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        fail(f"the test itself failed: {e!r}")
    finally:
        kill_all()
        if not failures:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s); logs in {tmp}", flush=True)
        for f_ in failures:
            print("  " + f_, flush=True)
        return 1
    print("all tenant tests passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
