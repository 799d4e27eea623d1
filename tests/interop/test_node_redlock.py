#!/usr/bin/env python3
"""node-redlock and redlockd on the same five masters (issue 31): with
--key-prefix '' a lock's key is exactly its name's bytes, so names with
slashes, @, spaces and UTF-8 exclude each other across the two clients, both
ways. node-redlock 4.2 (npm "redlock", pinned in package-lock.json, installed
with npm ci into the build directory) runs node-redlock.js.

usage: test_node_redlock.py SOURCE_ROOT BUILD_DIR   (env REDLOCKD_BIN)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "dapr_grpc"))
sys.argv[1:] = sys.argv[1:] or [os.path.join(HERE, "..", ".."), tempfile.mkdtemp()]
import test_dapr_grpc as t  # noqa: E402  (its masters, daemon and helpers)

NAMES = ["reports/2026/11", "user@example.com", "nightly backup", "caf\u00e9 \u6771\u4eac", "orders#42"]


def path_of(name):
    return "/locks/" + urllib.parse.quote(name, safe="")


def main():
    js_dir = t.npm_ready("interop_js", HERE, "node-redlock")
    tmp = tempfile.mkdtemp(prefix="redlockd-interop-")
    masters = [t.Master(tmp, i) for i in range(5)]
    node = D = None
    try:
        D = t.Daemon(tmp, "D", masters, ["--key-prefix", ""])
        node = subprocess.Popen(["node", os.path.join(HERE, "node-redlock.js"),
                                 ",".join(f"127.0.0.1:{m.port}" for m in masters)],
                                cwd=js_dir, env=dict(os.environ, NODE_PATH=os.path.join(js_dir, "node_modules")),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def ask(line):
            node.stdin.write(line + "\n")
            node.stdin.flush()
            return json.loads(node.stdout.readline())

        for name in NAMES:
            st, body = t.http(D.port, "POST", path_of(name), {"ttl_ms": 10000})
            t.check(st == 201, f"redlockd POST {name!r}: {st} {body[:200]!r}")
            token = json.loads(body)["token"]
            r = ask(f"try {name}")
            t.check(r["ok"] is False, f"node-redlock took {name!r} while redlockd held it: {r}")
            st, _ = t.http(D.port, "DELETE", path_of(name), headers={"Lock-Token": token})
            t.check(st == 204, f"redlockd DELETE {name!r}: {st}")
            r = ask(f"try {name}")
            t.check(r["ok"] is True, f"node-redlock could not take {name!r} once redlockd released it: {r}")
            st, body = t.http(D.port, "POST", path_of(name))
            t.check(st == 409, f"redlockd took {name!r} while node-redlock held it: {st} {body[:200]!r}")
            st, body = t.http(D.port, "GET", path_of(name))
            t.check(json.loads(body).get("held") is True, f"redlockd GET {name!r}: {body[:200]!r}")
            r = ask(f"release {name}")
            t.check(r["ok"] is True, f"node-redlock release {name!r}: {r}")
            st, body = t.http(D.port, "POST", path_of(name))
            t.check(st == 201, f"redlockd POST {name!r} after node-redlock released: {st} {body[:200]!r}")
        t.log(f"node-redlock and redlockd (--key-prefix ''): {len(NAMES)} names exclude each other both ways")
        node.stdin.write("quit\n")
        node.stdin.flush()
        node.wait(10)
    except Exception:
        import traceback
        t.fail(traceback.format_exc())
    finally:
        if node and node.poll() is None:
            node.kill()
            node.wait()
        if D and D.proc.poll() is None:
            D.stop()
        for p in t.children:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    if t.failures:
        t.log(f"{len(t.failures)} failure(s)")
        sys.exit(1)
    t.log("all passed")


if __name__ == "__main__":
    main()
