"""What the listener tests (test_listen.py) stand on: redlockd started with
listeners of any kind (TCP, HTTPS, unix:PATH) and waited for on one of
them, the real curl and openssl binaries, and the certificates the openssl
CLI makes (tests/api/testcerts.py, shared with tests/tenants): a CA, the server's (for 127.0.0.1 and localhost) and a second
one for a reload, clients of that CA (one named by its CN, one by a DNS SAN
only, one naming nobody), one of another CA, and an expired one (`openssl ca` with dates in
the past)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "races"))
from races_harness import BIN, check, fail, failures, kill_all, log  # noqa: E402,F401
from testcerts import SERVER_SAN, add, make_ca, make_expired, make_leaf  # noqa: E402
from testproc import free_port, spawn  # noqa: E402


def run(argv, timeout=15, stdin=None):
    """A tool's run: (exit status, stdout + stderr as text)."""
    r = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def curl(*args, timeout=10):
    """curl -s with the status on the last line: (status or 0, body, exit)."""
    r = subprocess.run(["curl", "-s", "-S", "--max-time", str(timeout), "-w", "\n%{http_code}", *args],
                       capture_output=True, timeout=timeout + 5)
    out = r.stdout.decode(errors="replace")
    body, _, code = out.rpartition("\n")
    return (int(code) if code.isdigit() else 0), body, r.returncode


def json_of(body):
    try:
        return json.loads(body)
    except ValueError:
        return {}


# ---- certificates, with the openssl CLI (tests/api/testcerts.py) ----

def make_certs(d):
    """Everything in d; returns a dict of paths."""
    ca = make_ca(d, "ca", "redlockd-test-ca")
    other = make_ca(d, "other", "some-other-ca")
    p = add(add({}, "ca", ca), "other", other)
    add(p, "server", make_leaf(d, "server", "/CN=redlockd-test", ca, SERVER_SAN))
    add(p, "server2", make_leaf(d, "server2", "/CN=redlockd-reloaded", ca, SERVER_SAN))
    add(p, "billing", make_leaf(d, "billing", "/CN=billing", ca))
    add(p, "ops", make_leaf(d, "ops", "/O=no common name here", ca,
                            "subjectAltName=DNS:ops.example,DNS:second.example"))
    add(p, "nobody", make_leaf(d, "nobody", "/CN=nobody", ca))   # of the CA, naming no principal
    add(p, "foreign", make_leaf(d, "foreign", "/CN=billing", other))
    add(p, "expired", make_expired(d, "expired", "/CN=billing", ca))
    return p


def der_of(pem_path):
    rc, _ = run(["openssl", "x509", "-in", pem_path, "-outform", "DER", "-out", pem_path + ".der"])
    return open(pem_path + ".der", "rb").read() if rc == 0 else b""


# ---- redlockd ----

class Daemon:
    """redlockd with the listeners given (argv's --listen ...), waited for
    until GET /healthz answers 200 through `probe` (curl arguments and a
    URL) and its masters vote."""

    def __init__(self, tmp, name, masters, listen_args, probe, extra=()):
        self.name = name
        self.log = os.path.join(tmp, f"redlockd-{name}.log")
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=99"
        argv = [BIN, *listen_args, "--masters", ",".join(f"127.0.0.1:{m.port}" for m in masters),
                "--log-format", "text", *extra]
        self.proc = spawn(argv, self.log, env)
        deadline = time.monotonic() + 15
        while True:
            st, body, _ = curl(*probe[:-1], probe[-1].replace("/healthz", "/readyz"), timeout=2)
            if st == 200 and all(m.get("marker") == "ready" for m in json_of(body).get("masters", [{}])):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redlockd {name} did not start: {self.text()[-2000:]}")
            time.sleep(0.05)

    def text(self):
        return open(self.log, errors="replace").read()

    def wait_log(self, needle, after=0, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text()[after:]:
                return True
            time.sleep(0.02)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        check(rc == 0, f"redlockd {self.name} exited {rc} (log {self.log})")
        text = self.text()
        check("Sanitizer" not in text and "runtime error:" not in text,
              f"redlockd {self.name}: sanitizer report:\n{text[-4000:]}")
        return rc


def refused_start(tmp, name, masters, listen_args):
    """redlockd that must refuse to start: (exit status, its output)."""
    argv = [BIN, *listen_args, "--masters", ",".join(f"127.0.0.1:{m.port}" for m in masters)]
    try:
        return run(argv, timeout=10)
    except subprocess.TimeoutExpired:
        return None, "still running after 10 s"


def run_sections(tmp, sections):
    """Runs each (name, fn) in turn, an exception a failure of its own; then
    kills every process started and removes tmp (kept when anything
    failed). The exit status: 1 on any failure."""
    try:
        for name, fn in sections:
            log(f"-- {name}")
            try:
                fn()
            except Exception:  # noqa: BLE001
                fail(f"{name}: {traceback.format_exc()}")
    finally:
        kill_all()
        if failures:
            log(f"kept {tmp} for a look")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"{len(failures)} failures")
    return 1 if failures else 0
