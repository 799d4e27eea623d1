"""The nemesis clients: threads that each draw a random mix of every
operation from a seeded generator, on a small pool of shared names (so that
they contend) and on private names of their own (the probes, probes.py).

Each operation draws everything it may need from a generator of its own,
seeded from the client's, so that a replay (--seed) runs the same
operations with the same parameters whatever the answers were.

The Ctx is shared by every client thread: the history and the cluster are
thread-safe, stop is an Event, and names() is read only."""
import contextlib
import random
import threading
import time

import api
import cluster
import faults
import probes
from api import q
from history import now

SHARED_LOCKS = ["nm-s0", "nm-s1", "nm-s2"]
DAPR_RESOURCES = ["nm-d0", "nm-d1"]
ELECTIONS = ["nm-e0", "nm-e1"]
SEMAPHORES = [("nm-sem0", 2), ("nm-sem1", 3)]
TTLS = [1000, 1500, 2000, 3000, 4000]


class Ctx:
    def __init__(self, hist, clu, seed, grpc_mods, stop=None):
        self.hist, self.clu, self.seed = hist, clu, seed
        self.grpc_mods = grpc_mods
        self.stop = stop or threading.Event()
        self.ninst = len(clu.insts)
        self.stall_settle_s = STALL_SETTLE_MS / 1000.0
        # The faults' plan, when it started and when the run ends (the run
        # sets them; the aimed probes look for quiet stretches in it).
        self.plan, self.t0, self.end = [], now(), None

    def quiet(self, a, b, insts=(), names=()):
        """No planned fault touches [a, b] for these instances or names."""
        return faults.quiet(self.plan, self.t0, a, b, insts, names)

    def next_quiet(self, a, length, insts=(), names=(), lead=0.0):
        """The earliest t >= a such that [t, t + length] is quiet, no master
        sits out a quarantine in the lead before it, and it ends half a
        second before the run does; None when there is none."""
        cands = [a] + [self.t0 + f["at"] + f["dur"] + faults.settle_s(f["kind"]) + 0.5 + 1e-3 for f in self.plan]
        for t in sorted(x for x in cands if x >= a):
            if self.end is not None and t + length > self.end - 0.5:
                return None
            if self.quiet(t, t + length, insts, names) and \
                    faults.quiet(self.plan, self.t0, t - lead, t, kinds=faults.DATA_LOSS):
                return t
        return None

    def sleep(self, s):
        """False when the run is stopping."""
        return not self.stop.wait(max(0.0, s))

    def plant(self, c, master, key, px, **tags):
        """A foreign value under key on one master, where the key is free
        (a client's doing, recorded as an operation, not a fault)."""
        m = self.clu.masters[master]
        i = self.hist.invoke(c.cid, "plant", master=master, key=key, px=px, **tags)
        try:
            r = m.cmd("SET", cluster.KEY_PREFIX.encode() + key.encode(), b"foreign-value", "NX", "PX", px)
            self.hist.complete(i, 200, reply=r)
        except (OSError, RuntimeError, EOFError) as e:
            self.hist.complete(i, None, error=type(e).__name__)

    def peek(self, c, name, **tags):
        """The value under name's key on every master, read directly
        (GET, no script): a string, None where the key is absent, "!down"
        where the master did not answer. Recorded as an operation "peek"
        (the checker tells the released grant's copies from others')."""
        i = self.hist.invoke(c.cid, "peek", name=name, **tags)
        values = []
        for m in self.clu.masters:
            try:
                values.append(m.cmd("GET", cluster.KEY_PREFIX + name, timeout=0.5))
            except (OSError, RuntimeError, EOFError):
                values.append(DOWN)
        self.hist.complete(i, 200, values=values)
        return values

    @contextlib.contextmanager
    def stall(self, inst, dur, grants):
        """Instance inst stopped (SIGSTOP) for dur seconds from now, for a
        round of aimed probes (of the streams grants, their ids): recorded
        as a fault stall_instance on that instance, settling in
        STALL_SETTLE_MS, and marked aimed=grants (their own judgements
        account for it). Yields False, and stops nothing, when the
        instance is down."""
        i = self.clu.insts[inst]
        if i.expect_dead or i.proc is None or i.proc.poll() is not None:
            yield False
            return
        fid = f"stall-{grants[0]}"
        self.hist.fault(fid, "begin", "stall_instance", scope="inst", inst=inst, dur=round(dur, 3), aimed=grants)
        t0 = now()
        i.pause()
        try:
            yield True
        finally:
            time.sleep(max(0.0, t0 + dur - now()))
            i.resume()
            self.hist.fault(fid, "end", "stall_instance", settle_ms=int(self.stall_settle_s * 1000))


DOWN = "!down"   # a peek's value where the master did not answer
STALL_SETTLE_MS = 500   # an aimed stall (0.25-0.35 s) may still be felt this long after it


def other(r, ninst, not_this):
    return r.choice([k for k in range(ninst) if k != not_this])


# ---- the operations; each takes (ctx, client, its own generator, n) ----

def op_lock(ctx, c, r, n):
    name, a, ttl = r.choice(SHARED_LOCKS), r.randrange(ctx.ninst), r.choice(TTLS)
    wait = r.choice([0, 0, r.randint(100, 1500)])
    look, ext, rel = r.random() < 0.3, r.random() < 0.4, r.random() < 0.85
    b, d, hold1, hold2, ttl2 = r.randrange(ctx.ninst), r.randrange(ctx.ninst), r.uniform(0, ttl / 2000.0), \
        r.uniform(0, 0.4), r.choice(TTLS)
    _, st, js = c.acquire(a, name, ttl, wait)
    if st != 201:
        return
    if look:
        c.inspect(b, name)
    ctx.sleep(hold1)
    if ext:
        c.extend(b, name, js["token"], ttl2)
        ctx.sleep(hold2)
    if rel:
        c.release(d, name, js["token"])


def op_inspect(ctx, c, r, n):
    c.inspect(r.randrange(ctx.ninst), r.choice(SHARED_LOCKS + [api.dapr_name(x) for x in DAPR_RESOURCES]))


def run_stream(ctx, c, r, s, kind, name, token, a, hb_ms, dur, end):
    """Holds an open stream for dur seconds (heartbeats every third of
    hb_ms, stopped half way when end is "hb_stop"), then ends it: "close",
    "delete" through another instance, "delete_same" through the one that
    keeps it; the stream is closed in every case."""
    t_end = now() + dur
    while now() < t_end and not s.terminal():
        if hb_ms and not (end == "hb_stop" and now() > t_end - dur / 2):
            c.heartbeat(r.randrange(ctx.ninst), kind, name, token)
            step = hb_ms / 3000.0
        else:
            step = 0.2
        if not ctx.sleep(min(step, max(0.0, t_end - now()))):
            break
    if not s.terminal() and end in ("delete", "delete_same") and not ctx.stop.is_set():
        inst = a if end == "delete_same" else other(r, ctx.ninst, a)
        if kind == "lock":
            c.release(inst, name, token)
        elif kind == "semaphore":
            c.sem_release(inst, name, [token])
        else:
            c.resign(inst, name, token)
        s.wait_for({"released", "resigned", "lost"}, 3.0)
    s.close()


def op_hold(ctx, c, r, n):
    private = r.random() < 0.4
    name = f"nm-h{c.cid}-{n}" if private else r.choice(SHARED_LOCKS)
    plant, m, px = private and r.random() < 0.7, r.randrange(5), r.randint(600, 2000)
    a, ttl = r.randrange(ctx.ninst), r.choice([1000, 1500, 2000, 3000])
    hb = r.choice([0, 0, 500, 800])
    wait = r.choice([0, 0, 1000])
    dur = r.uniform(0.5, 4.0)
    end = r.choice(["close", "delete", "delete_same", "hb_stop" if hb else "close"])
    if plant:
        ctx.plant(c, m, name, px)
    body = {"hold": True, "ttl_ms": ttl}
    if wait:
        body["wait_ms"] = wait
    if hb:
        body["heartbeat_ms"] = hb
    s = c.stream("hold", a, f"/locks/{q(name)}", body,
                 dict(kind="lock", name=name, ttl_ms=ttl, wait_ms=wait, heartbeat_ms=hb), timeout=8.0)
    if not s.ok:
        return
    ev = s.wait_for({"acquired"}, 5.0)
    if ev is None:
        s.close()
        return
    run_stream(ctx, c, r, s, "lock", name, ev[3]["token"], a, hb, dur, end)


def op_force(ctx, c, r, n):
    kind = r.choice(["lock", "lock", "election", "semaphore"])
    pool = {"lock": SHARED_LOCKS + [api.dapr_name(x) for x in DAPR_RESOURCES], "election": ELECTIONS,
            "semaphore": [s for s, _ in SEMAPHORES]}[kind]
    c.force(r.randrange(ctx.ninst), kind, r.choice(pool))


def op_campaign(ctx, c, r, n):
    name, a, ttl = r.choice(ELECTIONS), r.randrange(ctx.ninst), r.choice([1000, 1500, 2500])
    hb = r.choice([0, 0, 600])
    wait, lead = r.uniform(1.0, 4.0), r.uniform(0.3, 2.5)
    proclaim, b = r.random() < 0.5, r.randrange(ctx.ninst)
    end = r.choice(["close", "delete", "delete_same", "hb_stop" if hb else "delete"])
    body = {"candidate": f"c{c.cid}", "value": f"v{n}", "ttl_ms": ttl}
    if hb:
        body["heartbeat_ms"] = hb
    s = c.stream("campaign", a, f"/elections/{q(name)}", body,
                 dict(kind="election", name=name, ttl_ms=ttl, heartbeat_ms=hb), timeout=8.0)
    if not s.ok:
        return
    ev = s.wait_for({"elected"}, wait)
    if ev is None:
        s.close()
        return
    token = ev[3]["token"]
    if proclaim and ctx.sleep(lead / 3):
        c.proclaim(b, name, token, f"p{n}")
    run_stream(ctx, c, r, s, "election", name, token, a, hb, lead, end)


def op_election_get(ctx, c, r, n):
    c.election_get(r.randrange(ctx.ninst), r.choice(ELECTIONS))


def op_sem(ctx, c, r, n):
    name, limit = r.choice(SEMAPHORES)
    permits = r.choice([1, 1, r.randint(1, limit)])
    a, ttl, wait = r.randrange(ctx.ninst), r.choice(TTLS), r.choice([0, 0, r.randint(100, 1500)])
    ext, rel = r.random() < 0.4, r.random() < 0.85
    b, d, hold1, hold2, ttl2 = r.randrange(ctx.ninst), r.randrange(ctx.ninst), r.uniform(0, ttl / 2000.0), \
        r.uniform(0, 0.4), r.choice(TTLS)
    _, st, js = c.sem_acquire(a, name, limit, permits, ttl, wait)
    if st != 201:
        return
    tokens = [p["token"] for p in js["permits"]]
    ctx.sleep(hold1)
    if ext:
        c.sem_extend(b, name, tokens, ttl2)
        ctx.sleep(hold2)
    if rel:
        c.sem_release(d, name, tokens)


def op_sem_hold(ctx, c, r, n):
    name, limit = r.choice(SEMAPHORES)
    a, ttl, hb = r.randrange(ctx.ninst), r.choice([1000, 2000, 3000]), r.choice([0, 0, 600])
    dur = r.uniform(0.5, 3.0)
    end = r.choice(["close", "delete", "hb_stop" if hb else "delete_same"])
    body = {"limit": limit, "hold": True, "ttl_ms": ttl}
    if hb:
        body["heartbeat_ms"] = hb
    s = c.stream("sem_hold", a, f"/semaphores/{q(name)}", body,
                 dict(kind="semaphore", name=name, limit=limit, ttl_ms=ttl, heartbeat_ms=hb), timeout=8.0)
    if not s.ok:
        return
    ev = s.wait_for({"acquired"}, 5.0)
    if ev is None:
        s.close()
        return
    run_stream(ctx, c, r, s, "semaphore", name, ev[3]["token"], a, hb, dur, end)


def op_sem_get(ctx, c, r, n):
    name, limit = r.choice(SEMAPHORES)
    c.sem_get(r.randrange(ctx.ninst), name, limit)


def op_dapr(ctx, c, r, n):
    res, owner = r.choice(DAPR_RESOURCES), f"o{c.cid}-{n}"
    a, b = r.randrange(ctx.ninst), r.randrange(ctx.ninst)
    via_lock, via_unlock = r.choice(["http", "grpc"]), r.choice(["http", "grpc"])
    expiry, hold, unlock = r.randint(1, 4), r.uniform(0, 1.0), r.random() < 0.85
    _, st, out = c.dapr_lock(a, via_lock, res, owner, expiry)
    if st != 200 or not out or out.get("success") is not True:
        return
    ctx.sleep(hold)
    if unlock:
        c.dapr_unlock(b, via_unlock, res, owner)


def op_listing(ctx, c, r, n):
    route = r.choice(["locks", "elections", "semaphores"])
    prefix, limit, a = r.choice(["nm-", "", "nm-s", "lockstore"]), r.randint(1, 5), r.randrange(ctx.ninst)
    cursor = None
    for _ in range(40):
        _, st, js = c.listing(a, route, prefix, limit, cursor)
        if st != 200 or not js or not js.get("next"):
            return
        cursor = js["next"]
        if ctx.stop.is_set():
            return


def op_trespass(ctx, c, r, n):
    """The outsider (a principal that may lock and read names under
    outside/ only) tries the clients' names: every call must be refused 403
    and change nothing; a listing shows it only its own names; its own
    name it may take (property "rights")."""
    o = api.Client(ctx.hist, ctx.clu, c.cid, ctx.grpc_mods, token=cluster.OUTSIDER_TOKEN)
    a, name = r.randrange(ctx.ninst), r.choice(SHARED_LOCKS)
    what = r.choice(["acquire", "release", "extend", "force", "campaign", "semaphore", "dapr", "list", "own"])
    tok = [("Lock-Token", "x" * 22)]
    calls = {
        "acquire": ("POST", f"/locks/{q(name)}", {"ttl_ms": 2000}, []),
        "release": ("DELETE", f"/locks/{q(name)}", None, tok),
        "extend": ("PATCH", f"/locks/{q(name)}", {"ttl_ms": 2000}, tok),
        "force": ("DELETE", f"/locks/{q(name)}?force=true", None, []),
        "campaign": ("POST", f"/elections/{q(r.choice(ELECTIONS))}", {"candidate": "outsider"}, []),
        "semaphore": ("POST", f"/semaphores/{q(SEMAPHORES[0][0])}", {"limit": SEMAPHORES[0][1]}, []),
        "dapr": ("POST", f"/v1.0-alpha1/lock/{api.DAPR_STORE}",
                 {"resourceId": r.choice(DAPR_RESOURCES), "lockOwner": "outsider", "expiryInSeconds": 2}, []),
        "list": ("GET", "/locks?limit=1000", None, []),
        "own": ("POST", f"/locks/{q(cluster.OUTSIDE_PREFIX + str(r.randrange(3)))}", {"ttl_ms": 500}, []),
    }
    m, path, body, hd = calls[what]
    pick = (lambda j: dict(names=[x.get("name") for x in j.get("locks") or []])) if what == "list" else None
    o.call("trespass", a, m, path, body, headers=hd, rec=dict(what=what, name=name), pick=pick)
    o.close()


OPS = [  # (name, weight, function)
    ("lock", 14, op_lock), ("inspect", 2, op_inspect), ("hold", 6, op_hold), ("force", 1, op_force),
    ("campaign", 5, op_campaign), ("election_get", 2, op_election_get), ("sem", 6, op_sem),
    ("sem_hold", 3, op_sem_hold), ("sem_get", 1, op_sem_get), ("dapr", 7, op_dapr),
    ("listing", 2, op_listing), ("probe_l1", 3, probes.probe_l1), ("probe_l2", 2, probes.probe_l2),
    ("trespass", 2, op_trespass),
]


def aimer(ctx, aid, cid, stats):
    """One aimer thread: aimed L1 probes (probes.l1_aimed) back to back
    until ctx.stop, each drawn from a generator of its own, seeded from
    the aimer's (as the clients' operations are)."""
    rng = random.Random(f"{ctx.seed}:aimer:{aid}")
    c = api.Client(ctx.hist, ctx.clu, cid, ctx.grpc_mods)
    n = 0
    try:
        while not ctx.stop.is_set():
            sub = random.Random(rng.getrandbits(64))
            n += 1
            try:
                probes.l1_aimed(ctx, c, sub, n)
            except Exception as e:  # noqa: BLE001 - a bug of the test, not of the service
                stats.setdefault("client_errors", []).append(f"aimer {aid}: {e!r}")
                if len(stats["client_errors"]) > 20:
                    ctx.stop.set()
            ctx.sleep(sub.uniform(0, 0.2))
    finally:
        c.close()


def client(ctx, cid, stats):
    """One client thread: operations until ctx.stop."""
    rng = random.Random(f"{ctx.seed}:client:{cid}")
    c = api.Client(ctx.hist, ctx.clu, cid, ctx.grpc_mods)
    names = [o[0] for o in OPS]
    weights = [o[1] for o in OPS]
    fns = {o[0]: o[2] for o in OPS}
    n = 0
    try:
        while not ctx.stop.is_set():
            kind = rng.choices(names, weights)[0]
            sub = random.Random(rng.getrandbits(64))
            n += 1
            try:
                fns[kind](ctx, c, sub, n)
            except Exception as e:  # noqa: BLE001 - a bug of the test, not of the service
                stats.setdefault("client_errors", []).append(f"client {cid} {kind}: {e!r}")
                if len(stats["client_errors"]) > 20:
                    ctx.stop.set()
            ctx.sleep(sub.uniform(0, 0.05))
    finally:
        c.close()
