#!/usr/bin/env python3
"""Principals (issue 43), for test_openapi.py: a daemon with
--principals-file, whose principal "lockonly" may lock names under mine/
and read none. Every operation that needs a right answers it 403
(forbidden; Dapr's ERR_PERMISSION_DENIED) as documented: a read it lacks
the right for, or a lock of a name its prefixes do not cover."""
import hashlib
import os

from oas_harness import Daemon, expect

LOCKONLY = "lockonly-token-of-the-conformance-test"


def principals(tmp, masters):
    path = os.path.join(tmp, "principals")
    with open(path, "w") as f:
        f.write(f"lockonly lock mine/ sha256:{hashlib.sha256(LOCKONLY.encode()).hexdigest()}\n")
    P = Daemon(tmp, "P", [m.port for m in masters], ["--principals-file", path], auth=LOCKONLY)
    try:
        P.wait_ready(5)
        tok = {"Lock-Token": "t"}
        reads = [("GET", "/locks"), ("HEAD", "/locks"), ("GET", "/elections"), ("HEAD", "/elections"),
                 ("GET", "/semaphores"), ("HEAD", "/semaphores"), ("GET", "/ui/state"), ("HEAD", "/ui/state"),
                 ("GET", "/locks/mine%2Fa"), ("GET", "/elections/mine%2Fa"), ("GET", "/semaphores/mine%2Fa")]
        for m, p in reads:
            expect(P.req(m, p), 403, None if m == "HEAD" else "forbidden", f"{m} {p} without the read right")
        locks = [("POST", "/locks/other", {}, None), ("PATCH", "/locks/other", {}, tok),
                 ("DELETE", "/locks/other", None, tok), ("PUT", "/locks/other/heartbeat", None, tok),
                 ("POST", "/elections/other", {"candidate": "c"}, None), ("DELETE", "/elections/other", None, tok),
                 ("PUT", "/elections/other/value", {"value": "v"}, tok),
                 ("PUT", "/elections/other/heartbeat", None, tok),
                 ("POST", "/semaphores/other", {"limit": 1}, None),
                 ("PATCH", "/semaphores/other", {}, {"Lock-Token": "0:t"}),
                 ("DELETE", "/semaphores/other", None, {"Lock-Token": "0:t"}),
                 ("PUT", "/semaphores/other/heartbeat", None, {"Lock-Token": "0:t"})]
        for m, p, body, hd in locks:
            expect(P.req(m, p, body, headers=hd), 403, "forbidden", f"{m} {p}: a name its prefixes do not cover")
        for p, body in (("/v1.0-alpha1/lock/lockstore", {"resourceId": "r", "lockOwner": "o", "expiryInSeconds": 5}),
                        ("/v1.0-alpha1/unlock/lockstore", {"resourceId": "r", "lockOwner": "o"})):
            expect(P.req("POST", p, body), 403, "ERR_PERMISSION_DENIED", f"POST {p}: lockstore||r is not mine/")
        expect(P.req("GET", "/v1.0/metadata"), 403, "ERR_PERMISSION_DENIED", "Dapr's metadata without the read right")
        expect(P.req("POST", "/locks/mine%2Fa", {"ttl_ms": 1000}), 201, what="lockonly's own name")
    finally:
        P.stop()
