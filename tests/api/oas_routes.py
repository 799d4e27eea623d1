#!/usr/bin/env python3
"""The OpenAPI conformance test's scenarios of the routes (test_openapi.py
runs them): operational routes, framing, the native lock API, waiters,
Dapr's routes, request limits, held streams, no quorum, overload and force
release."""
from oas_harness import *  # noqa: F401,F403
import oas_harness


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
    # Unknown paths.
    for m, p in [("GET", "/ui/state/"), ("GET", "/nope"),
                 ("POST", "/v1.0-alpha1/lock/"), ("POST", "/v1.0-alpha1/unlock"),
                 ("GET", "/v1.0/healthz/x"), ("GET", "/v1.0/healthz/outbound/x"), ("DELETE", "/")]:
        expect(A.req(m, p), 404, "not_found", f"{m} {p}")
    # Known paths, other methods: Allow must name exactly the documented ones.
    for m, p in [("PUT", "/locks/x"), ("HEAD", "/locks/x"), ("OPTIONS", "/locks/x"),
                 ("GET", "/locks/"), ("POST", "/locks/"), ("GET", "/elections/"), ("PATCH", "/semaphores/"),
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
        doc_says = oas_harness.SPEC.request_problems(m, path, h, body)
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
        if oas_harness.SPEC.request_problems("POST", "/locks/x", {}, b'{"hold": true, "ttl_ms": 1000}'):
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
            for kind in ("locks", "elections", "semaphores"):
                expect(C.req("GET", f"/{kind}?prefix=ov"), 503, "overloaded",
                       f"a listing's page of {kind} behind one in flight")
            expect(C.req("GET", "/elections/ov-e"), 503, "overloaded", "an election's GET behind one in flight")
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
