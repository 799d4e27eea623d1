#!/usr/bin/env python3
"""What the gRPC test (test_dapr_grpc.py) stands on: its log and checks, the
packages it installs when missing, the stubs generated from
api/dapr_lock.proto, masters and redlockd instances. The raw HTTP/2 cases
are in grpc_raw.py."""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

sys.dont_write_bytecode = True   # no __pycache__ in the source tree

ROOT, BUILD = sys.argv[1], sys.argv[2]
BIN = os.environ.get("REDLOCKD_BIN", "redlockd")
HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "grpc-test-token"
T0 = time.monotonic()
failures = []


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def fail(msg):
    log("FAIL: " + msg)
    failures.append(msg)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


# ---- packages: installed when missing, never skipped ----

def need_python_packages():
    try:
        import grpc  # noqa: F401
        import grpc_tools.protoc  # noqa: F401
        return
    except ImportError:
        pass
    log("installing python3-grpcio python3-grpc-tools with apt-get")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                           "python3-grpcio", "python3-grpc-tools"], env=env, check=True)


def stubs(outdir):
    """dapr_lock_pb2 and dapr_lock_pb2_grpc from the repository's .proto."""
    from grpc_tools import protoc
    api = os.path.join(ROOT, "api")
    rc = protoc.main(["protoc", f"-I{api}", f"--python_out={outdir}", f"--grpc_python_out={outdir}",
                      os.path.join(api, "dapr_lock.proto")])
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({rc})")
    sys.path.insert(0, outdir)
    import dapr_lock_pb2
    import dapr_lock_pb2_grpc
    return dapr_lock_pb2, dapr_lock_pb2_grpc


def npm_ready(sub="dapr_grpc_js", here=HERE, what="@dapr/dapr"):
    """The packages pinned in here/package-lock.json, in BUILD/sub/node_modules
    (npm ci; again only when the lock file changed)."""
    d = os.path.join(BUILD, sub)
    os.makedirs(d, exist_ok=True)
    lock = open(os.path.join(here, "package-lock.json"), "rb").read()
    stamp = os.path.join(d, "node_modules", ".redlockd-lock")
    if os.path.exists(stamp) and open(stamp, "rb").read() == lock:
        return d
    for f in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(here, f), d)
    if not shutil.which("npm") or not shutil.which("node"):
        raise RuntimeError("node and npm are needed (scripts/deps.sh installs npm)")
    log(f"installing {what} from package-lock.json (npm ci)")
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=d, check=True,
                   timeout=600)
    open(stamp, "wb").write(lock)
    return d


# ---- processes ----

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from testproc import children, free_port, spawn  # noqa: E402


def http(port, method, path, body=None, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers=dict(headers or {}, **({"Content-Type": "application/json"}
                                                                if body is not None else {})))
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Master:
    def __init__(self, tmp, i):
        self.port = free_port()
        d = os.path.join(tmp, f"m{i}")
        os.mkdir(d)
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                           "--dir", d, "--save", "", "--appendonly", "no"],
                          os.path.join(d, "redis.log"))
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on {self.port} did not start")


class Daemon:
    def __init__(self, tmp, name, masters, extra=(), env_extra=None):
        self.name = name
        self.port = free_port()
        self.gport = free_port()
        self.log = os.path.join(tmp, f"redlockd-{name}.log")
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env.setdefault("TSAN_OPTIONS", "exitcode=99")
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=99"
        env.update(env_extra or {})
        argv = [BIN, "--listen", f"127.0.0.1:{self.port}", "--dapr-grpc-listen",
                f"127.0.0.1:{self.gport}", "--masters",
                ",".join(f"127.0.0.1:{m.port}" for m in masters), "--log-format", "text"] + list(extra)
        self.proc = spawn(argv, self.log, env)
        deadline = time.monotonic() + 15
        while True:
            try:
                st, body = http(self.port, "GET", "/readyz")
                if st == 200 and all(m["marker"] == "ready" for m in json.loads(body)["masters"]):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redlockd {name} not ready: {open(self.log).read()[-2000:]}")
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            fail(f"redlockd {self.name} did not stop within 20 s of SIGTERM")
        text = open(self.log, errors="replace").read()
        if re.search(r"ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:", text):
            fail(f"redlockd {self.name}: sanitizer report in its log:\n{text[-6000:]}")
        check(rc == 0, f"redlockd {self.name} exited {rc} (log {self.log})")
        log(f"redlockd {self.name} stopped: exit {rc}")
