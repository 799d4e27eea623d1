#!/usr/bin/env python3
"""One redlockd for many teams (issue 43): principals scoped to name
prefixes, with rights read, lock and admin (--principals-file), and the
audit log (--audit-log), on real redis-server masters.

Every route family refuses a principal without the right (403, nothing
changed on the masters) or a credential that names none (401) and serves
one with it, over plain TCP and a Unix socket with bearer tokens and over
HTTPS with the principals' client certificates (tenants_matrix.py); each
case's audit line is there, names the principal and the client ("unix" on
the socket), and no line holds a token. Over TCP also: listings and
/ui/state show only the names the caller may read; SIGHUP reloads the file
(a broken one keeps the set in force) and reopens the audit log; Dapr's
gRPC calls are refused and served as its HTTP ones.

Usage: test_tenants.py [--control no_rights] (REDLOCKD_BIN names the
daemon). --control no_rights is the matrix's negative control: redlockd
runs with REDLOCKD_TEST_BREAK=no_rights (a known principal may do anything
to any name), and the test passes only when, on every transport, every
route family has a refusal that was served instead. Dapr's gRPC calls need
Debian's python3-grpcio and python3-grpc-tools; certificates, the openssl
CLI."""
import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "listen"))
import tenants_matrix  # noqa: E402
from tenants_harness import TOKENS, Certs, Tokens, make_client_certs, principals_text  # noqa: E402
from hostile_harness import Master  # noqa: E402
import listen_harness  # noqa: E402
from races_harness import Daemon, check, fail, failures, kill_all, log, wait_for  # noqa: E402
from testproc import free_port  # noqa: E402


def auth(who):
    return [("Authorization", f"Bearer {TOKENS[who] if who in TOKENS else who}")]


def expect(a, status, error=None, what=""):
    ok = a.status == status
    if ok and error:
        try:
            ok = (a.json().get("error") or a.json().get("errorCode")) == error
        except ValueError:
            ok = False
    check(ok, f"{what}: expected {status} {error or ''}, got {a.status} {a.body[:200]!r}")
    return a


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
    """The TCP daemon's whole log (the matrix checked each case's line):
    JSON, no token, every kind of event, gRPC's lines, a lost stream's."""
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
    check(any(e.get("route") == "grpc TryLockAlpha1" and e.get("outcome") == "PERMISSION_DENIED"
              for e in events.get("refused", [])), "the gRPC refusal is not in the audit log")
    check(any(e.get("route") == "grpc TryLockAlpha1" and e.get("principal") == "app" for e in events.get("grant", [])),
          "the gRPC grant is not in the audit log")
    forced = events.get("force", [])
    check(any(e.get("principal") == "ops" and e.get("name") == "billing/lease" and e.get("fence", 0) > 0
              for e in forced), f"ops's force of the held stream billing/lease: {forced[:3]}")
    lost = events.get("loss", [])
    check(any(e.get("principal") == "billing" and e.get("name") == "billing/lease" and e.get("outcome") == "forced"
              for e in lost), f"the forced stream's loss: {lost[:3]}")


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


def start_tokens(tmp, masters):
    """redlockd on TCP and a Unix socket, principals known by their tokens,
    with Dapr's gRPC API: (the daemon, its TCP and socket transports)."""
    with open(os.path.join(tmp, "principals"), "w") as f:
        f.write(principals_text())
    sock = os.path.join(tmp, "redlockd.sock")
    gport = free_port()
    audit = os.path.join(tmp, "audit.log")
    d = Daemon(tmp, "tokens", [m.port for m in masters],
               ["--listen", f"unix:{sock}", "--principals-file", os.path.join(tmp, "principals"),
                "--audit-log", audit, "--dapr-grpc-listen", f"127.0.0.1:{gport}"])
    d.gport = gport
    d.wait_ready(len(masters))
    return d, Tokens("tcp", audit, port=d.port), Tokens("unix", audit, sock=sock)


def start_https(tmp, masters):
    """redlockd serving HTTPS only, a client certificate signed by the test
    CA asked of every client, principals known by their certificates:
    (the daemon, its transport)."""
    certs = make_client_certs(os.path.join(tmp, "certs"))
    pfile = os.path.join(tmp, "principals-cert")
    with open(pfile, "w") as f:
        f.write(principals_text(certs=True))
    port = free_port()
    audit = os.path.join(tmp, "audit-https.log")
    d = listen_harness.Daemon(tmp, "https", masters, ["--listen", f"127.0.0.1:{port}"],
                              ["--cacert", certs["ca.crt"], f"https://127.0.0.1:{port}/healthz"],
                              ["--tls-cert-file", certs["server.crt"], "--tls-key-file", certs["server.key"],
                               "--tls-client-ca-file", certs["ca.crt"], "--principals-file", pfile,
                               "--audit-log", audit])
    return d, Certs("https", audit, port, certs)


def report(cases):
    """One line per transport and family: cases, refused, served, failed."""
    cells = {}
    for c in cases:
        cells.setdefault((c["transport"], c["family"]), []).append(c)
    for (tr, fam), cs in cells.items():
        bad = [c for c in cs if c["problems"]]
        log(f"  {tr:6} {fam:11} {len(cs):3} cases: {sum(c['kind'] == 'refused' for c in cs):2} refused, "
            f"{sum(c['kind'] == 'served' for c in cs):2} served, {len(bad)} failed")
    return cells


def matrix(t, masters, all_cases):
    log(f"== the route families over {t.name}")
    for c in tenants_matrix.run(t, masters, log):
        c["transport"] = t.name
        all_cases.append(c)


def control_verdict(cells, daemons):
    """--control no_rights: each daemon ran with the hook (its log says
    so), and every transport's every family must have a refusal that was
    served (2xx) instead; the test fails otherwise."""
    for dm in daemons:
        check("test_hook breaks=no_rights" in open(dm.log, errors="replace").read(),
              f"redlockd {dm.name} did not run with REDLOCKD_TEST_BREAK=no_rights (log {dm.log})")
    for tr in ("tcp", "unix", "https"):
        for fam in tenants_matrix.FAMILIES:
            caught = [c for c in cells.get((tr, fam), []) if c["kind"] == "refused" and c["problems"]
                      and isinstance(c["status"], int) and 200 <= c["status"] < 300]
            if check(caught, f"no_rights: no refusal of {fam} over {tr} was served: the matrix did not see it"):
                log(f"  caught {tr} {fam}: {caught[0]['what']} -> {caught[0]['status']}; "
                    f"{caught[0]['problems'][0][:100]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", choices=["no_rights"])
    control = ap.parse_args().control
    if control:
        os.environ["REDLOCKD_TEST_BREAK"] = control   # the daemons inherit it
    tmp = tempfile.mkdtemp(prefix="redlockd-tenants-")
    os.mkdir(os.path.join(tmp, "certs"))
    cases = []
    try:
        masters = [Master(tmp, f"m{i}") for i in range(5)]
        d, tcp, unix = start_tokens(tmp, masters)
        matrix(tcp, masters, cases)
        matrix(unix, masters, cases)
        if not control:
            for name, fn in (("listings", lambda: listings(d)), ("losses", lambda: losses(d)),
                             ("gRPC", lambda: grpc_calls(d, tmp)), ("reload", lambda: reload(d, tmp))):
                log(f"== {name}")
                fn()
        d.stop()
        if not control:
            audit_lines(tmp)
        h, https = start_https(tmp, masters)
        matrix(https, masters, cases)
        h.stop()
        cells = report(cases)
        if control:
            control_verdict(cells, (d, h))
        else:
            for c in cases:
                if c["problems"]:
                    fail(f"[{c['transport']} {c['family']}] {c['what']}: " + "; ".join(c["problems"]))
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
    print("control no_rights: the matrix caught it on every transport and family" if control
          else "all tenant tests passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
