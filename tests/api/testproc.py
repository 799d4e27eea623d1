"""Processes for the Python test suites: loopback ports reserved as the C
harness reserves them (tests/integration/harness.c), children that die
with the test and are listed for its cleanup, and calls run on a thread."""
import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import threading
import time

PORT_DIR = "/tmp/redlockd-test-ports"   # shared with tests/integration/harness.c
_port_locks = []
_next_port = [random.Random(os.getpid() * 7919 + time.time_ns()).randrange(12000)]


def free_port():
    """A loopback port below the ephemeral range, reserved (as the C harness
    does) by a lock on a file in PORT_DIR held until this process exits."""
    try:
        os.mkdir(PORT_DIR, 0o1777)
        os.chmod(PORT_DIR, 0o1777)
    except FileExistsError:
        pass
    for _ in range(12000):
        port = 20000 + _next_port[0] % 12000
        _next_port[0] += 1
        fd = os.open(f"{PORT_DIR}/{port}", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.close()
            _port_locks.append(fd)
            return port
        except OSError:
            s.close()
            os.close(fd)
    raise RuntimeError("no free port")


_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent():
    _libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


children = []


def spawn(argv, log_path, env=None):
    f = open(log_path, "ab")
    p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         preexec_fn=_die_with_parent, env=env)
    f.close()
    children.append(p)
    return p


def wait_serving(proc, port, log_path, what, timeout=10):
    """Waits until the process answers GET /healthz with 200 on port; raises
    with the end of its log when it exits or does not within timeout."""
    import httpraw   # beside this file; imported here so testproc stays usable alone
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpraw.request(port, "GET", "/healthz", timeout=1).status == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {open(log_path).read()[-2000:]}")
        time.sleep(0.02)


def in_thread(fn):
    """Runs fn on a daemon thread: (the thread, a dict that gets "value" or
    "error")."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out
