#!/usr/bin/env python3
"""Browsers (issue 41, finding A), for test_openapi.py: a request of a
foreign origin or, on a loopback listener, of a foreign Host is refused
403 on every path the document says, with the document's codes, and
changes nothing; the probes answer; a request without Origin is served.
And the force release's query form, which the dashboard sends for the
names "." and ".." (a browser cannot put them in a path)."""
import os

from oas_harness import AUTH_TOKEN, PREFIX, Daemon, expect, fail, free_port, redis, secrets

EVIL = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
REBOUND = {"Host": "attacker.example:8080"}


def foreign_callers(A, masters):
    name = "fc-1"
    secrets.add(name)
    g = A.req("POST", f"/locks/{name}", {"ttl_ms": 60000}, what="a lock held while foreign callers try")
    if not expect(g, 201, what="a lock to try on"):
        return
    tok = g.json()["token"]
    secrets.add(tok)
    for code, hdrs in [("forbidden_origin", EVIL), ("forbidden_host", REBOUND)]:
        for m, p, body in [("POST", "/locks/fc-2", b'{"ttl_ms": 60000}'), ("GET", f"/locks/{name}", None),
                           ("PATCH", f"/locks/{name}", b'{"ttl_ms": 1000}'), ("DELETE", f"/locks/{name}", None),
                           ("DELETE", f"/locks/{name}?force=true", None),
                           ("DELETE", "/elections/fc-e?force=true", None), ("DELETE", "/elections/fc-e", None),
                           ("DELETE", "/semaphores/fc-s?force=true", None), ("DELETE", "/semaphores/fc-s", None),
                           ("GET", "/locks", None), ("HEAD", "/locks", None), ("GET", "/ui/state", None),
                           ("HEAD", "/ui/state", None), ("GET", "/elections", None), ("HEAD", "/elections", None),
                           ("GET", "/semaphores", None), ("HEAD", "/semaphores", None),
                           ("PUT", f"/locks/{name}/heartbeat", None), ("GET", "/elections/fc-e", None),
                           ("POST", "/elections/fc-e", b'{"candidate": "c"}'),
                           ("PUT", "/elections/fc-e/value", b'{"value": "v"}'),
                           ("PUT", "/elections/fc-e/heartbeat", None), ("GET", "/semaphores/fc-s", None),
                           ("POST", "/semaphores/fc-s", b'{"limit": 1}'), ("PATCH", "/semaphores/fc-s", None),
                           ("PUT", "/semaphores/fc-s/heartbeat", None),
                           ("GET", "/ui", None), ("POST", "/v1.0-alpha1/lock/lockstore",
                                                  b'{"resourceId":"fc-2","lockOwner":"o","expiryInSeconds":60}'),
                           ("POST", "/v1.0-alpha1/unlock/lockstore", b'{"resourceId":"fc-2","lockOwner":"o"}'),
                           ("GET", "/v1.0/metadata", None), ("GET", "/nope", None)]:
            h = dict(hdrs, **{"Lock-Token": tok})
            a = A.req(m, p, body, headers=h, what=f"{m} {p} with {hdrs}")
            expect(a, 403, None if m == "HEAD" else code, f"{m} {p} with {hdrs}")
    for m, p in [("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/v1.0/healthz")]:
        a = A.req(m, p, headers=EVIL, what=f"{m} {p} from another origin")
        if a.status not in (200, 204):
            fail(f"{m} {p} from another origin: {a.status}, not served")
    expect(A.req("GET", "/healthz", headers=REBOUND), 200, what="/healthz through a rebound name")
    expect(A.req("GET", "/readyz", headers=REBOUND), 403, "forbidden_host", "/readyz through a rebound name")
    for m in masters:
        if redis(m.port, "GET", PREFIX + "fc-2") is not None:
            fail(f"a foreign caller took fc-2 on master {m.port}")
        if redis(m.port, "GET", PREFIX + "lockstore||fc-2") is not None:
            fail(f"a foreign caller took Dapr's fc-2 on master {m.port}")
    s = A.req("GET", f"/locks/{name}")
    if not (expect(s, 200, what=f"{name} after the foreign callers") and s.json().get("held")):
        fail(f"{name} was freed by a foreign caller: {s.body[:200]!r}")
    # Without Origin, any content type (curl -d sends a form's).
    secrets.add("fc-3")
    a = A.req("POST", "/locks/fc-3", b'{"ttl_ms": 1000}', headers={"Content-Type": "application/x-www-form-urlencoded"},
              what="a form's content type without Origin")
    expect(a, 201, what="curl -d without Origin")
    expect(A.req("DELETE", f"/locks/{name}", headers={"Lock-Token": tok}), 204, what=f"release {name}")


ADMIN = "conformance-admin-token-2"
KINDS = ["/locks/", "/elections/", "/semaphores/"]


def admin_file(tmp):
    af = os.path.join(tmp, "admin-token-2")
    with open(af, "w") as f:
        f.write(ADMIN + "\n")
    return af


def force_by_query(tmp, masters):
    """The force release's query form (DELETE /locks/?force=true&name=.),
    for the names a browser cannot put in a path, on the three routes: every
    documented answer, and the names "." and ".." freed."""
    tf = os.path.join(tmp, "token-2")
    with open(tf, "w") as f:
        f.write(AUTH_TOKEN + "\n")
    G = Daemon(tmp, "G", [m.port for m in masters], ["--auth-token-file", tf, "--admin-token-file", admin_file(tmp)],
               auth=AUTH_TOKEN)
    H = Daemon(tmp, "H", [free_port() for _ in masters], ["--admin-token-file", admin_file(tmp)])
    admin = f"Bearer {ADMIN}"
    try:
        G.wait_ready(len(masters))
        secrets.update([".", ".."])
        for seg in ["%2E", "%2E%2E"]:
            expect(G.req("POST", f"/locks/{seg}", {"ttl_ms": 60000}), 201, what=f"acquire {seg}")
        for k in KINDS:
            for name in [".", ".."]:
                expect(G.req("DELETE", f"{k}?force=true&name={name}", auth=admin), 204,
                       what=f"force {k} name={name}")
            for what, path, auth, hdrs, status, code in [
                    ("force=yes", "?force=yes&name=x", admin, {}, 400, "bad_request"),
                    ("a control byte", "?force=true&name=a%01b", admin, {}, 400, "bad_name"),
                    ("no token", "?force=true&name=x", None, {}, 401, "unauthorized"),
                    ("the ordinary token", "?force=true&name=x", True, {}, 403, "forbidden"),
                    ("another origin", "?force=true&name=x", admin, EVIL, 403, "forbidden_origin"),
                    ("a rebound name", "?force=true&name=x", admin, REBOUND, 403, "forbidden_host")]:
                expect(G.req("DELETE", k + path, headers=hdrs, auth=auth), status, code, f"force {k} with {what}")
            expect(H.req("DELETE", f"{k}?force=true&name=.", auth=admin), 503, "no_quorum",
                   f"force {k} without masters")
            expect(G.req("DELETE", f"{k}?name=.", auth=admin), 400, "bad_request", f"DELETE {k} without force")
            expect(G.req("DELETE", f"{k}?force=true", auth=admin), 400, "bad_name", f"DELETE {k} without a name")
            expect(G.req("GET", f"{k}?force=true&name=.", auth=admin), 405, "method_not_allowed", f"GET {k}")
        for seg in ["%2E", "%2E%2E"]:
            s = G.req("GET", f"/locks/{seg}")
            if expect(s, 200, what=f"GET /locks/{seg}") and s.json().get("held"):
                fail(f"/locks/{seg} is still held after its force release by the query form")
    finally:
        G.stop()
        H.stop()
