#!/usr/bin/env python3
"""The OpenAPI conformance test's scenarios of shutdown and the recipes
(test_openapi.py runs them): shutting down, elections, semaphores,
heartbeats, listings and the dashboard, and the metrics text."""
from oas_harness import *  # noqa: F401,F403
from oas_routes import *  # noqa: F401,F403
import oas_browsers
import oas_harness


ADMIN = {"Authorization": f"Bearer {oas_browsers.ADMIN}"}


def shutting_down(tmp, masters):
    """SIGTERM: a waiting acquire answers 503 shutting_down at once, a held stream ends
    with released (shutting_down), and a request whose body arrives after the
    engine stopped taking work answers 503 shutting_down."""
    C = Daemon(tmp, "C", [m.port for m in masters], ["--admin-token-file", oas_browsers.admin_file(tmp)])
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
                          ("GET", "/elections", {}, b'{}'),
                          ("GET", "/semaphores", {}, b'{}'),
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
                          ("DELETE", "/locks/?force=true&name=sd-q", ADMIN, b'{}'),
                          ("DELETE", "/elections/?force=true&name=sd-q", ADMIN, b'{}'),
                          ("DELETE", "/semaphores/?force=true&name=sd-q", ADMIN, b'{}'),
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
            if p.startswith("/locks") or p.startswith("/elections") or p.startswith("/semaphores"):
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
    --max-holds 2 (a campaign and a watch), B has no masters (503)."""
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
    expect(over.a, 429, "too_many_holds", "a second campaign beside a campaign and a watch, --max-holds 2")
    over.finish()
    over = Streamed(A, "GET", f"/elections/{n}?watch=true")
    expect(over.a, 429, "too_many_holds", "a second watch beside a campaign and a watch, --max-holds 2")
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
            doc_says = oas_harness.SPEC.request_problems("GET", path)
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
