"""The nemesis's faults: a schedule drawn from the seed alone (plan), then
played by one thread (Nemesis) that records each fault's begin and end in
the history.

Kinds: SIGSTOP/SIGCONT of one or two masters, and briefly of three (a
majority outage: 503s); a master restarted empty (killed, its data
removed, started again on its port); FLUSHALL; SCRIPT FLUSH; maxmemory
below used_memory (noeviction: writes refused) then restored; a foreign
value planted on a minority of the masters for a shared name; SIGSTOP of a
redlockd instance; SIGKILL of one and its restart; a CPU quota of 100m on
one (cgroup v1).

The plan keeps at most two masters faulty at a time (a minority), counting
a master that lost its data as faulty for its restart quarantine, except
for the brief three-master pauses, which it plays only while no master is
in quarantine. Kinds are drawn from a bag that holds each once (pauses of
one or two masters twice), refilled when empty, so that a run of 45 s
sees nearly every kind. Instance faults come one at a time, so two of three
instances always serve. Faults follow one another with gaps of 0.5 to
2.5 s, or (CALM of them) 5 to 8 s, in which nothing is wrong but the
quarantine left by data loss: liveness is judged there."""
import random
import threading

import cluster
from history import now

KINDS = [  # (kind, how many in each round of the bag)
    ("pause_masters", 2), ("pause_majority", 1), ("restart_empty", 1), ("flushall", 1), ("script_flush", 1),
    ("maxmemory", 1), ("plant_foreign", 1), ("pause_instance", 1), ("kill_instance", 1), ("cpu_quota", 1),
    ("sighup_instance", 1),
]
DATA_LOSS = ("restart_empty", "flushall")
AIM_GAP_S = 10.0   # a gap left for aimed probes, from when the fault before it has settled
CALM = 0.35   # the share of gaps that are long (5 to 8 s), so that liveness can be judged


def quarantine_s():
    return cluster.quarantine_ms() / 1000.0 + 2.0


def plan(seed, seconds, ninst, shared, aim_every=None):
    """The faults of a run, from the seed alone: a list of dicts with "at"
    (seconds from the start), "kind", "dur" and the targets. shared: the
    names a foreign value may be planted for, as (route kind, name,
    limit or None). aim_every: every so many seconds, once no master is in
    quarantine, the gap after a fault is made AIM_GAP_S long once the fault
    has settled (room for a round of aimed probes, probes.l1_aimed)."""
    r = random.Random(f"{seed}:faults")
    out = []
    t = r.uniform(1.5, 3.0)
    lost = []   # (master, quarantine end)
    bag = []
    next_aim = t if aim_every else float("inf")
    while True:
        if not bag:   # every kind once (pauses of one or two masters twice), in a random order
            bag = [k for k, n in KINDS for _ in range(n)]
            r.shuffle(bag)
        kind = bag.pop()
        f = dict(kind=kind, at=round(t, 3))
        lost = [(m, e) for m, e in lost if e > t]
        quarantined = {m for m, _ in lost}
        sane = [m for m in range(5) if m not in quarantined]
        if kind == "pause_masters":
            k = r.choice([1, 2])
            f.update(masters=sorted(r.sample(range(5), k)), dur=round(r.uniform(0.3, 2.0), 3))
            if len(set(f["masters"]) | quarantined) > 2:
                f["masters"] = sorted(r.sample(sorted(quarantined), 1)) if quarantined else f["masters"][:1]
        elif kind == "pause_majority":
            f.update(masters=sorted(r.sample(range(5), 3)), dur=round(r.uniform(0.3, 1.0), 3))
            if quarantined:
                f.update(kind="pause_masters", masters=sorted(quarantined)[:1])
        elif kind in DATA_LOSS:
            m = r.choice(sane)
            f.update(masters=[m], dur=0.0)
            if len(quarantined) >= 2 or len(quarantined | {m}) > 2:
                f.update(kind="script_flush", masters=[m])
            else:
                lost.append((m, t + quarantine_s()))
        elif kind == "script_flush":
            f.update(masters=sorted(r.sample(range(5), r.choice([1, 5]))), dur=0.0)
        elif kind == "maxmemory":
            m = r.choice(range(5))
            f.update(masters=[m], dur=round(r.uniform(0.5, 2.0), 3))
            if len(quarantined | {m}) > 2:
                f.update(masters=[sorted(quarantined)[0]])
        elif kind == "plant_foreign":
            route, name, limit = r.choice(shared)
            key = name if route == "lock" else \
                name + "\x1f#election" if route == "election" else f"{name}\x1f#{r.randrange(limit)}"
            f.update(masters=sorted(r.sample(range(5), r.choice([1, 2]))), dur=round(r.uniform(0.5, 2.5), 3),
                     route=route, name=name, key=key)
        elif kind in ("pause_instance", "cpu_quota"):
            f.update(inst=r.randrange(ninst), dur=round(r.uniform(0.3, 2.0) if kind == "pause_instance"
                                                        else r.uniform(1.0, 3.0), 3))
        elif kind == "kill_instance":
            f.update(inst=r.randrange(ninst), dur=round(r.uniform(0.2, 1.0), 3))
        elif kind == "sighup_instance":
            f.update(inst=r.randrange(ninst), dur=0.0)
        gap = r.uniform(5.0, 8.0) if r.random() < CALM else r.uniform(0.5, 2.5)
        if t + f["dur"] > seconds - 2.0:
            break
        done = t + f["dur"]
        if done >= next_aim and all(e <= done for _, e in lost) and f["kind"] not in DATA_LOSS:
            gap = max(gap, settle_s(f["kind"]) + AIM_GAP_S)
            next_aim = done + gap + aim_every
        out.append(f)
        t += f["dur"] + gap
    return out


SETTLE_MS = {  # how long after its end a fault may still be felt (liveness is not judged then)
    "pause_masters": 2000, "pause_majority": 2500, "script_flush": 1000, "maxmemory": 1500,
    "plant_foreign": 500, "pause_instance": 1500, "kill_instance": 1500, "cpu_quota": 1500, "sighup_instance": 200,
}


def settle_s(kind):
    """How long after its end a fault of kind may still be felt (s)."""
    return quarantine_s() if kind in DATA_LOSS else SETTLE_MS[kind] / 1000.0


def quiet(plan, t0, a, b, insts=(), names=(), kinds=None):
    """Whether no planned fault (plan played from t0; of kinds, when given)
    touches [a, b] for these instances or names, as the checker would judge
    it (checker_live.touched), with half a second either side for a fault
    played late."""
    for f in plan:
        if kinds is not None and f["kind"] not in kinds:
            continue
        begin = t0 + f["at"] - 0.5
        end = t0 + f["at"] + f["dur"] + settle_s(f["kind"]) + 0.5
        if end < a or begin > b:
            continue
        if "inst" in f and f["inst"] not in insts:
            continue
        if f["kind"] == "plant_foreign" and f["name"] not in names:
            continue
        return False
    return True


class Nemesis(threading.Thread):
    """Plays a plan against the cluster, from t0 (a monotonic time)."""

    def __init__(self, hist, clu, faults, t0, stop, log=print):
        super().__init__(daemon=True, name="nemesis")
        self.hist, self.clu, self.faults, self.t0, self.stop = hist, clu, faults, t0, stop
        self.log = log
        self.counts = {}
        self.skipped = {}
        self.errors = []
        self.cg_why = cluster.cgroup_available()
        self.quota = None

    def run(self):
        for fid, f in enumerate(self.faults, 1):
            if self.stop.wait(max(0.0, self.t0 + f["at"] - now())):
                return
            try:
                self.play(fid, f)
            except Exception as e:  # noqa: BLE001 - a fault that could not be played
                self.errors.append(f"fault {fid} {f['kind']}: {e!r}")

    def _begin(self, fid, f, **scope):
        self.counts[f["kind"]] = self.counts.get(f["kind"], 0) + 1
        self.hist.fault(fid, "begin", f["kind"], dur=f["dur"], **scope)

    def _end(self, fid, f, settle_ms):
        self.hist.fault(fid, "end", f["kind"], settle_ms=settle_ms)

    def _hold(self, dur):
        """Sleeps for dur, shorter when the run stops (the fault is then
        healed at once)."""
        self.stop.wait(dur)

    def play(self, fid, f):
        kind = f["kind"]
        ms = [self.clu.masters[i] for i in f.get("masters", [])]
        if kind in ("pause_masters", "pause_majority"):
            self._begin(fid, f, scope="all", masters=f["masters"])
            for m in ms:
                m.pause()
            self._hold(f["dur"])
            for m in ms:
                m.resume()
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "restart_empty":
            self._begin(fid, f, scope="all", masters=f["masters"])
            ms[0].restart_empty()
            self._end(fid, f, int(quarantine_s() * 1000))
        elif kind == "flushall":
            self._begin(fid, f, scope="all", masters=f["masters"])
            ms[0].cmd("FLUSHALL")
            self._end(fid, f, int(quarantine_s() * 1000))
        elif kind == "script_flush":
            self._begin(fid, f, scope="all", masters=f["masters"])
            for m in ms:
                m.cmd("SCRIPT", "FLUSH")
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "maxmemory":
            m = ms[0]
            info = m.cmd("INFO", "memory")
            used = int(next(x for x in info.split("\r\n") if x.startswith("used_memory:")).split(":")[1])
            self._begin(fid, f, scope="all", masters=f["masters"], maxmemory=used // 2)
            m.cmd("CONFIG", "SET", "maxmemory", str(used // 2))
            try:
                self._hold(f["dur"])
            finally:
                m.cmd("CONFIG", "SET", "maxmemory", "0")
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "plant_foreign":
            px = int(f["dur"] * 1000)
            self._begin(fid, f, scope="names", names=[f["name"]], route=f["route"], masters=f["masters"])
            for m in ms:
                m.cmd("SET", cluster.KEY_PREFIX.encode() + f["key"].encode(), f"foreign-{fid}".encode(),
                      "NX", "PX", px)
            self._hold(f["dur"])
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "pause_instance":
            inst = self.clu.insts[f["inst"]]
            self._begin(fid, f, scope="inst", inst=f["inst"])
            inst.pause()
            self._hold(f["dur"])
            inst.resume()
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "kill_instance":
            inst = self.clu.insts[f["inst"]]
            self._begin(fid, f, scope="inst", inst=f["inst"])
            inst.kill()
            self._hold(f["dur"])
            inst.start(ready=False)
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "sighup_instance":
            # Its principals reloaded and its audit log reopened, while it serves.
            inst = self.clu.insts[f["inst"]]
            self._begin(fid, f, scope="inst", inst=f["inst"])
            inst.sighup()
            self._end(fid, f, SETTLE_MS[kind])
        elif kind == "cpu_quota":
            if self.cg_why:
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
                if self.skipped[kind] == 1:
                    self.log(f"note: cpu_quota faults skipped: {self.cg_why}")
                return
            inst = self.clu.insts[f["inst"]]
            self._begin(fid, f, scope="inst", inst=f["inst"], millis=100)
            self.quota = cluster.CpuQuota(inst.proc.pid, 100, str(fid))
            try:
                self._hold(f["dur"])
            finally:
                throttled = self.quota.throttled()
                self.quota.undo()
                self.quota = None
            self._end(fid, f, SETTLE_MS[kind])
            self.hist.fault(fid, "note", kind, throttled=throttled)
