"""The liveness probes (checker_live.py judges them), each on a private
name no other client touches, drawn into the random mix by the clients and
run alone by the negative controls:

  L1  a grant released (by its token, through any instance) or forced,
      then, a bound after the answer (after a stream's lost, a bound after
      the validity it last announced: free_from), an acquire of the name;
      on 409 an inspection at once. The grant is a plain acquire, or a held stream
      whose renewals are repairs: a foreign value planted on one master
      before the stream is taken, which expires, so the stream's renewals
      take that master back (docs/held-streams.md, "Leases that repair
      themselves"); released through ANOTHER instance than the one that
      keeps the stream, or force-released (which is also L3's probe: the
      stream must read lost, reason forced).
  L2  a holder, a waiter with a long wait_ms on another instance, the
      holder's early release: the waiter must be granted.

Tags in the history: the probe's acquire {"probe":"L1","ref":release or
force id,"grant":grant id}, its inspection {"probe":"L1i","ref":probe id};
the force {"probe":"L3","stream":stream id}; each of the waiter's tries
{"probe":"L2","holder":holder id,"attempt":n}, the holder's release
{"probe":"L2rel","holder":holder id}."""
import threading
import time

import api
import checker_live
import cluster
from api import q
from history import now

L1_PROBE_TTL_MS = 1000
TERMINAL = {"released", "lost"}


def l1_probe(ctx, c, inst, name, rel_id, grant_id, ttl_ms, since=None, **tags):
    """Waits out the L1 bound from since (the release's answer; default
    now), then probes: an acquire, and on 409 an inspection."""
    bound = checker_live.l1_bound_ms(checker_live.bounds({}), ttl_ms) / 1000.0 + 0.05
    if not ctx.sleep((now() if since is None else since) + bound - now()):
        return None
    i, st, js = c.acquire(inst, name, L1_PROBE_TTL_MS, probe="L1", ref=rel_id, grant=grant_id, **tags)
    if st == 409:
        c.inspect(inst, name, probe="L1i", ref=i)
    elif st == 201:
        c.release(inst, name, js["token"])
    return st


def free_from(s, answered, ttl_ms):
    """When a released stream's name must be free from (L1's bound counts
    from there): the release's answer, unless the stream read lost first
    (any reason but forced): then what the token may still hold goes when
    the validity it last announced, plus the transit margin, has run out,
    never sooner (docs/held-streams.md), so from then if later. The
    checker applies the same rule (checker_live.free_from)."""
    with s.cv:
        evs = list(s.events)
    told = answered
    for t, kind, f in evs:
        if kind in ("acquired", "renewed"):
            told = t + (f.get("validity_ms") or 0) / 1000.0
        elif kind == "lost" and f.get("reason") != "forced":
            return max(answered, told + checker_live.transit_margin_ms(ttl_ms) / 1000.0)
        elif kind in TERMINAL:
            break
    return answered


def l1_plain(ctx, c, name, a, b, p, ttl_ms, hold_s):
    """A plain grant through a, released through b, probed through p."""
    g, st, js = c.acquire(a, name, ttl_ms)
    if st != 201:
        return None
    ctx.sleep(hold_s)
    rel, st, _ = c.release(b, name, js["token"])
    if st != 204:
        return None
    return l1_probe(ctx, c, p, name, rel, g, ttl_ms)


def l1_stream(ctx, c, name, a, b, p, ttl_ms, plant_master, plant_px, renewals, end):
    """A held stream through a (a foreign value planted on one master
    first, unless plant_master is None), ended after `renewals` renewals by
    a release ("release") or a force ("force") through b, then probed
    through p. Returns the probe's status (None when it did not get so
    far)."""
    if plant_master is not None:
        ctx.plant(c, plant_master, name, plant_px, probe="plant")
    s = c.stream("hold", a, f"/locks/{q(name)}", {"hold": True, "ttl_ms": ttl_ms},
                 dict(kind="lock", name=name, ttl_ms=ttl_ms), timeout=8.0)
    if not s.ok:
        return None
    try:
        ev = s.wait_for({"acquired"}, 5.0)
        if ev is None:
            return None
        k = ev[0]
        for _ in range(renewals):
            ev = s.wait_for({"renewed"}, ttl_ms / 1000.0 + 2.0, start=k + 1)
            if ev is None or ctx.stop.is_set():
                return None
            k = ev[0]
        token = s.events[0][2]["token"] if s.events and s.events[0][1] == "acquired" else None
        if token is None:
            return None
        repaired = None
        if plant_master is not None:   # did a renewal take the planted master back?
            try:
                repaired = ctx.clu.masters[plant_master].cmd("GET", cluster.KEY_PREFIX + name, timeout=1.0) == token
            except (OSError, RuntimeError, EOFError):
                pass
        if end == "force":
            rel, st, _ = c.force(b, "lock", name, probe="L3", stream=s.id)
        else:
            rel, st, _ = c.release(b, name, token)
        answered = now()
        s.wait_for(TERMINAL, 4.0 if end == "force" else 3.0)
        s.close()   # as a client does once it has read the end (the name is free from the close)
        if st != 204:
            return None
        return l1_probe(ctx, c, p, name, rel, s.id, ttl_ms, since=free_from(s, answered, ttl_ms),
                        **({} if repaired is None else {"repaired": repaired}))
    finally:
        s.close()


def probe_l1(ctx, c, r, n):
    name = f"nm-p{c.cid}-{n}"
    variant = r.choice(["plain", "stream_release", "stream_release", "stream_force"])
    a = r.randrange(ctx.ninst)
    b = r.choice([k for k in range(ctx.ninst) if k != a])
    p = r.randrange(ctx.ninst)
    ttl = r.choice([1000, 1500, 2000])
    plant = r.randrange(5) if r.random() < 0.8 else None
    px, renewals, hold = r.randint(700, 1400), r.randint(2, 4), r.uniform(0, 0.3)
    if r.random() < 0.75:   # mostly after the planted value expired and a renewal took its master back
        renewals = max(renewals, int(px * 3 / ttl) + 2)
    if variant == "plain":
        l1_plain(ctx, c, name, a, r.randrange(ctx.ninst), p, ttl, hold)
    else:
        l1_stream(ctx, c, name, a, b, p, ttl, plant, px, renewals,
                  "force" if variant == "stream_force" else "release")


def l2_once(ctx, c, name, a, b, d, wait_ms, release_after_s, holder_ttl_ms=4000):
    """A holder through a, a waiter through b, the holder's release through
    d after release_after_s. The waiter asks again, for what is left of its
    wait, after a 503 or no answer (as a client does: 503 says try again;
    a busy machine can make the masters miss their timeout). Returns the
    waiter's last status."""
    h, st, js = c.acquire(a, name, holder_ttl_ms)
    if st != 201:
        return None
    c2 = api.Client(ctx.hist, ctx.clu, c.cid, ctx.grpc_mods)
    box = {}

    def waiter():
        deadline = now() + wait_ms / 1000.0
        tries = 0
        while True:
            left = wait_ms if tries == 0 else int((deadline - now()) * 1000)
            res = c2.acquire(b, name, 2000, wait_ms=max(left, 1), probe="L2", holder=h, attempt=tries)
            box["res"] = res
            tries += 1
            if res[1] not in (503, None) or deadline - now() < 0.1:
                return
            time.sleep(0.05)
    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    ctx.sleep(release_after_s)   # not cut short: the waiter is judged on its release
    c.release(d, name, js["token"], probe="L2rel", holder=h)
    t.join(wait_ms / 1000.0 + 20.0)
    res = box.get("res")
    if res and res[1] == 201:
        c.release(b, name, res[2]["token"])
    return res[1] if res else None


def probe_l2(ctx, c, r, n):
    name = f"nm-w{c.cid}-{n}"
    a = r.randrange(ctx.ninst)
    b = r.choice([k for k in range(ctx.ninst) if k != a])
    d = r.randrange(ctx.ninst)
    l2_once(ctx, c, name, a, b, d, 8000, r.uniform(0.8, 1.2))
