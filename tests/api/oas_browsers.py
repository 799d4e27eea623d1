#!/usr/bin/env python3
"""Browsers (issue 41, finding A), for test_openapi.py: a request of a
foreign origin or, on a loopback listener, of a foreign Host is refused
403 on every path the document says, with the document's codes, and
changes nothing; the probes answer; a request without Origin is served."""
from oas_harness import PREFIX, expect, fail, redis, secrets

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
                           ("GET", "/ui", None), ("POST", "/v1.0-alpha1/lock/lockstore",
                                                  b'{"resourceId":"fc-2","lockOwner":"o","expiryInSeconds":60}'),
                           ("GET", "/nope", None)]:
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
