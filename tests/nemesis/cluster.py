"""The nemesis suite's processes: five redis-server masters (appendonly yes,
appendfsync always, noeviction, each in its own temporary folder) and three
redlockd instances on them, every one on a free loopback port reserved as
the other suites reserve theirs (tests/api/testproc.py).

Who starts what: every process is started by one thread, the spawner (the
main thread at start-up, then a thread of its own that lives until the
process exits), because a child's death signal (PR_SET_PDEATHSIG) follows
the *thread* that forked it: a master restarted by the fault thread would
otherwise be killed the moment that thread ended. stop_all() kills them
all; it runs in the caller's finally block, and SIGTERM (meson's timeout)
is turned into an exception so that it does."""
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
import httpraw  # noqa: E402
import testproc  # noqa: E402

ADMIN_TOKEN = "nemesis-admin-token"
# Principals (--principals-file): the clients' own, on every name, and an
# outsider's on names under outside/ only (the trespass operation).
CLIENT_TOKEN = "nemesis-client-token"
OUTSIDER_TOKEN = "nemesis-outsider-token"
OUTSIDE_PREFIX = "outside/"


def principals_text():
    import hashlib
    def digest(t):
        return "sha256:" + hashlib.sha256(t.encode()).hexdigest()
    return (f"nemesis  read,lock  *                {digest(CLIENT_TOKEN)}\n"
            f"outsider read,lock  {OUTSIDE_PREFIX}  {digest(OUTSIDER_TOKEN)}\n")
KEY_PREFIX = "lock:"
CG_ROOT = "/sys/fs/cgroup/cpu"
CG_PREFIX = "redlockd-nemesis-"

# The service's settings, short so that quarantine (max ttl + fence keep +
# drift) and expiries fit in a run of seconds.
CONF = {
    "default_ttl_ms": 2000,
    "max_ttl_ms": 4000,
    "fence_keep_ms": 2000,
    "master_timeout_ms": 100,
    "drift_factor": 0.01,
}


def quarantine_ms():
    return CONF["max_ttl_ms"] + CONF["fence_keep_ms"] + CONF["max_ttl_ms"] * CONF["drift_factor"] + 2


class Spawner:
    """Runs spawn requests on one thread that outlives every other thread of
    the run (see the module's comment)."""

    def __init__(self):
        self.q = queue.Queue()
        t = threading.Thread(target=self._run, daemon=True, name="spawner")
        t.start()

    def _run(self):
        while True:
            fn, box, done = self.q.get()
            try:
                box["value"] = fn()
            except Exception as e:  # noqa: BLE001
                box["error"] = e
            done.set()

    def call(self, fn):
        box, done = {}, threading.Event()
        self.q.put((fn, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]


SPAWNER = Spawner()


def resp(port, *args, timeout=2.0):
    """One Redis command over RESP; its reply (str, int, list or None).
    Raises OSError (or TimeoutError) when the master does not answer, and
    RuntimeError on an error reply."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in
            (x if isinstance(x, bytes) else str(x).encode() for x in args)))
        f = s.makefile("rb")

        def reply():
            line = f.readline()
            if not line:
                raise EOFError("the master closed the connection")
            line = line.rstrip(b"\r\n")
            t, rest = line[:1], line[1:].decode("latin-1")
            if t == b"+":
                return rest
            if t == b"-":
                raise RuntimeError(rest)
            if t == b":":
                return int(rest)
            if t == b"$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2].decode("latin-1")
            if t == b"*":
                n = int(rest)
                return None if n < 0 else [reply() for _ in range(n)]
            raise RuntimeError(f"bad reply {line!r}")
        return reply()
    finally:
        s.close()


class Master:
    def __init__(self, tmp, i):
        self.i = i
        self.port = testproc.free_port()
        self.dir = os.path.join(tmp, f"m{i}")
        os.mkdir(self.dir)
        self.log = os.path.join(tmp, f"m{i}.log")
        self.proc = None
        self.start()

    def start(self):
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                "--maxmemory-policy", "noeviction"]
        self.proc = SPAWNER.call(lambda: testproc.spawn(argv, self.log))
        deadline = time.monotonic() + 10
        while True:
            try:
                if resp(self.port, "PING", timeout=0.5) == "PONG":
                    return
            except (OSError, RuntimeError, EOFError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {self.port} did not start: "
                                   f"{open(self.log, errors='replace').read()[-1500:]}")
            time.sleep(0.01)

    def cmd(self, *args, timeout=2.0):
        return resp(self.port, *args, timeout=timeout)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def restart_empty(self):
        """Killed, its data removed, started again on the same port."""
        self.kill()
        for e in os.listdir(self.dir):
            p = os.path.join(self.dir, e)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        self.start()


class Instance:
    """One redlockd: HTTP on port, Dapr's gRPC API on gport, force release
    with the admin token."""

    def __init__(self, tmp, i, bin_path, masters, env_extra=None, master_ports=None):
        self.i = i
        self.bin = bin_path
        self.master_ports = master_ports or [m.port for m in masters]   # a slow link's, or the masters' own
        self.port = testproc.free_port()
        self.gport = testproc.free_port()
        self.log = os.path.join(tmp, f"redlockd-{i}.log")
        self.admin_file = os.path.join(tmp, "admin-token")
        with open(self.admin_file, "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        self.principals_file = os.path.join(tmp, "principals")
        with open(self.principals_file, "w") as f:
            f.write(principals_text())
        self.audit = os.path.join(tmp, f"audit-{i}.log")
        self.masters = masters
        self.env = dict(os.environ, **(env_extra or {}))
        self.env["ASAN_OPTIONS"] = "detect_leaks=0"
        self.proc = None
        self.expect_dead = False   # set while the nemesis has it killed
        self.sig_lock = threading.Lock()
        self.stops = 0             # pauses under way (a fault's, an aimed probe's stall): resumed at the last

    def argv(self):
        c = CONF
        return [self.bin, "--listen", f"127.0.0.1:{self.port}",
                "--dapr-grpc-listen", f"127.0.0.1:{self.gport}",
                "--masters", ",".join(f"127.0.0.1:{p}" for p in self.master_ports),
                "--admin-token-file", self.admin_file,
                "--principals-file", self.principals_file, "--audit-log", self.audit,
                "--default-ttl-ms", str(c["default_ttl_ms"]), "--max-ttl-ms", str(c["max_ttl_ms"]),
                "--fence-keep-ms", str(c["fence_keep_ms"]),
                "--master-timeout-ms", str(c["master_timeout_ms"]),
                "--drift-factor", str(c["drift_factor"]),
                "--max-wait-ms", "20000", "--log-format", "text", "--log-level", "info"]

    def start(self, ready=True, timeout=20):
        argv = self.argv()
        with self.sig_lock:
            self.stops = 0
        self.proc = SPAWNER.call(lambda: testproc.spawn(argv, self.log, self.env))
        deadline = time.monotonic() + timeout
        while True:
            try:
                if not ready:
                    if httpraw.request(self.port, "GET", "/healthz", timeout=1).status == 200:
                        break
                else:
                    a = httpraw.request(self.port, "GET", "/readyz", timeout=1)
                    if a.status == 200 and all(m.get("marker") == "ready" for m in a.json()["masters"]):
                        break
            except (OSError, TimeoutError, EOFError, ValueError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redlockd {self.i} did not start: "
                                   f"{open(self.log, errors='replace').read()[-2000:]}")
            time.sleep(0.05)
        self.expect_dead = False

    def sighup(self):
        """Reloads its principals and reopens its audit log."""
        self.proc.send_signal(signal.SIGHUP)

    def pause(self):
        """SIGSTOP; pauses may overlap (the nemesis's and an aimed probe's
        stall): it runs again when the last one ends."""
        with self.sig_lock:
            self.stops += 1
            if self.stops == 1:
                self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        with self.sig_lock:
            if self.stops == 0:   # (restarted since)
                return
            self.stops -= 1
            if self.stops == 0:
                self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        self.expect_dead = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def died(self):
        """An exit the nemesis did not cause: its status and the log's end."""
        if self.expect_dead or self.proc is None or self.proc.poll() is None:
            return None
        return self.proc.returncode, open(self.log, errors="replace").read()[-3000:]


class SlowLink:
    """slowlink.py in front of every master, for one instance: a port of
    its own per master, each chunk delayed (seeded) up_ms towards the
    master and down_ms back ((lo, hi) each), in order. Started once and
    left up for the whole run (a standing condition, not a fault: it is
    never healed)."""

    def __init__(self, tmp, masters, seed, up_ms, down_ms):
        self.up_ms, self.down_ms = up_ms, down_ms
        self.ports = [testproc.free_port() for _ in masters]
        self.log = os.path.join(tmp, "slowlink.log")
        self.stats_path = os.path.join(tmp, "slowlink.json")
        argv = [sys.executable, os.path.join(HERE, "slowlink.py"), "--seed", str(seed),
                "--up-ms", "%g,%g" % tuple(up_ms), "--down-ms", "%g,%g" % tuple(down_ms),
                "--stats", self.stats_path] + [f"{p}:{m.port}" for p, m in zip(self.ports, masters)]
        self.proc = SPAWNER.call(lambda: testproc.spawn(argv, self.log))
        deadline = time.monotonic() + 10
        while "ready" not in open(self.log, errors="replace").read():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"slowlink.py did not start: {open(self.log, errors='replace').read()[-1500:]}")
            time.sleep(0.02)

    def stats(self):
        """Its last account (connections, chunks, mean and largest delay),
        or {} when it wrote none."""
        try:
            return json.loads(open(self.stats_path).read())
        except (OSError, ValueError):
            return {}

    def died(self):
        return self.proc.poll() is not None


class Cluster:
    """Five masters and ninst instances; slow: None, or dict(inst, seed,
    up_ms, down_ms): that instance reaches every master through a SlowLink."""

    def __init__(self, tmp, bin_path, ninst=3, env_extra=None, slow=None):
        self.tmp = tmp
        self.masters = [Master(tmp, i) for i in range(5)]
        self.slow_inst, self.link = None, None
        if slow is not None:
            self.slow_inst = slow["inst"]
            self.link = SlowLink(tmp, self.masters, slow["seed"], slow["up_ms"], slow["down_ms"])
        self.insts = [Instance(tmp, i, bin_path, self.masters, env_extra,
                               self.link.ports if i == self.slow_inst else None) for i in range(ninst)]
        for inst in self.insts:
            inst.start()

    def stop_all(self):
        stop_all()


def stop_all():
    """Every child of this run, paused or not, killed and reaped."""
    for p in testproc.children:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGKILL)
            except OSError:
                pass
    for p in testproc.children:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass
    cgroup_sweep()


def sigterm_raises():
    """meson's timeout sends SIGTERM: make it an exception, so that finally
    blocks kill the processes."""
    def on_term(sig, frame):
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, on_term)


# ---- a CPU quota, as Kubernetes sets one (cgroup v1's cpu controller) ----

def cgroup_available():
    """None when a quota can be set here, else why not."""
    if not os.path.exists(os.path.join(CG_ROOT, "cpu.cfs_quota_us")):
        return "the cgroup v1 cpu controller is not mounted at " + CG_ROOT
    if not os.access(os.path.join(CG_ROOT, "cgroup.procs"), os.W_OK):
        return "the cgroup v1 cpu controller is not writable (not root)"
    return None


def _cg_origin(pid):
    """The cpu cgroup pid is in now (the folder under CG_ROOT)."""
    for line in open(f"/proc/{pid}/cgroup"):
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            return os.path.join(CG_ROOT, parts[2].lstrip("/"))
    return CG_ROOT


class CpuQuota:
    """pid limited to millis thousandths of a CPU until undo()."""

    def __init__(self, pid, millis, tag):
        self.pid = pid
        self.origin = _cg_origin(pid)
        self.dir = os.path.join(CG_ROOT, f"{CG_PREFIX}{os.getpid()}-{tag}")
        os.mkdir(self.dir)
        with open(os.path.join(self.dir, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(self.dir, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(millis * 100))
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def throttled(self):
        try:
            for line in open(os.path.join(self.dir, "cpu.stat")):
                if line.startswith("nr_throttled"):
                    return int(line.split()[1])
        except OSError:
            pass
        return -1

    def undo(self):
        try:
            with open(os.path.join(self.origin, "cgroup.procs"), "w") as f:
                f.write(str(self.pid))
        except OSError:
            pass   # the process is gone
        _cg_remove(self.dir)


def _cg_remove(d):
    try:
        for pid in open(os.path.join(d, "cgroup.procs")).read().split():
            try:
                with open(os.path.join(CG_ROOT, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass
        os.rmdir(d)
    except OSError:
        pass


def cgroup_sweep():
    """Removes this suite's cgroups left by this run, or by an earlier one
    whose processes are gone."""
    if cgroup_available():
        return
    for e in os.listdir(CG_ROOT):
        if not e.startswith(CG_PREFIX):
            continue
        owner = e[len(CG_PREFIX):].split("-")[0]
        if owner == str(os.getpid()) or not os.path.exists(f"/proc/{owner}"):
            _cg_remove(os.path.join(CG_ROOT, e))


def readyz(inst, timeout=2):
    a = httpraw.request(inst.port, "GET", "/readyz", timeout=timeout)
    return a.status, json.loads(a.body or b"{}")
