"""The liveness probes (checker_live.py judges them), each on a private
name no other client touches, drawn into the random mix by the clients and
run alone by the negative controls:

  L1  a grant released (by its token, through any instance) or forced,
      then, a bound after the answer (after a stream's lost, a bound after
      the validity it last announced: free_from), an acquire of the name;
      on 409 an inspection at once. The grant is a plain acquire, or a
      held stream whose renewals are repairs: a foreign value planted on
      one master before the stream is taken, which expires, so the
      stream's renewals take that master back (docs/held-streams.md,
      "Leases that repair themselves"); released through ANOTHER instance
      than the one that keeps the stream, or force-released (which is also
      L3's probe: the stream must read lost, reason forced).
  L1, aimed (l1_aimed, a thread of its own: workload.aimer): rounds of
      held streams through the instance behind the slow link, each released
      (or forced) while its repair is in flight, the instance stalled
      meanwhile; on 409 every master's value is read too.
  L2  a holder, a waiter with a long wait_ms on another instance, the
      holder's early release: the waiter must be granted.

Tags in the history: the probe's acquire {"probe":"L1","ref":release or
force id,"grant":grant id}, its inspection {"probe":"L1i","ref":probe id};
the force {"probe":"L3","stream":stream id}; each of the waiter's tries
{"probe":"L2","holder":holder id,"attempt":n}, the holder's release
{"probe":"L2rel","holder":holder id}. The aimed probes' streams, releases,
forces and acquires carry "aimed": true (a release or force also "due":
when the repair was expected to leave); the peek while the instance is
stalled {"probe":"L1r","ref":release id,"grant":stream id}, the one after
a 409 {"probe":"L1p","ref":probe id}; each stall is a fault stall_instance
{"aimed":[stream id]}."""
import threading
import time

import api
import checker_live
import cluster
from api import q
from history import now

L1_PROBE_TTL_MS = 1000
TERMINAL = {"released", "lost"}


def l1_probe(ctx, c, inst, name, rel_id, grant_id, ttl_ms, since=None, peek=False, **tags):
    """Waits out the L1 bound from since (the release's answer; default
    now), then probes: an acquire, and on 409 an inspection and, with peek,
    every master's value read directly."""
    bound = checker_live.l1_bound_ms(checker_live.bounds({}), ttl_ms) / 1000.0 + 0.05
    if not ctx.sleep((now() if since is None else since) + bound - now()):
        return None
    i, st, js = c.acquire(inst, name, L1_PROBE_TTL_MS, probe="L1", ref=rel_id, grant=grant_id, **tags)
    if st == 409:
        c.inspect(inst, name, probe="L1i", ref=i)
        if peek:
            ctx.peek(c, name, probe="L1p", ref=i)
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


# ---- the aimed L1 probes: releases that land while repairs are in flight ----

AIM_STREAMS = 3                  # streams of one aimed round, each stalled for once
AIM_SPACING_S = 0.6              # between their grants (and so their renewals): a stall ends before the next
AIM_FORCE_SHARE = 1 / 6          # the rest are released with their token (a force also deletes the planted
                                 # values, so it is seen only when the repairs took three masters back)
AIM_TTL_MS = 4000                # the longest ttl the cluster allows (see l1_aimed)
AIM_AFTER_MS = (30.0, 75.0)      # a stall begins this long after its stream's repair is expected to leave
AIM_STALL_S = (0.25, 0.35)       # how long the instance behind the slow link is stopped
AIM_WAKE_S = 0.001               # the renewer wakes this late (its wait is in whole milliseconds)
AIM_PLANT_PX = 60000             # the planted values outlive the round
AIM_RACE_PEEK_S = 0.06           # after the answer, while the instance is still stopped
AIM_MAX_RENEWALS = 12            # renewals waited for a quiet moment, at most
AIM_QUIET_S = 4.2                # from the last stall, the round's judgements need this long without faults


def sent_at(t_read, fields, ttl_ms):
    """When the extension (or acquire) an event reports was sent, from when
    the event was read and the validity it announces: redlockd announces
    ttl - elapsed - drift - transit margin, counted from when it sent,
    less the time since (elapsed again, and the event's way to the client,
    about a millisecond), so elapsed is half of what is missing."""
    drift = checker_live.DEFAULTS["drift_factor"] * ttl_ms + 2
    missing = ttl_ms - drift - checker_live.transit_margin_ms(ttl_ms) - (fields.get("validity_ms") or 0)
    return t_read - max(0.0, missing) / 2000.0


def _in_parallel(fns):
    """Runs each function on a thread of its own; their results, in order."""
    out = [None] * len(fns)

    def run(k):
        out[k] = fns[k]()
    ts = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def l1_aimed(ctx, c, r, n):
    """One round of aimed L1 probes: releases timed to land while held
    streams' repairs are in flight. AIM_STREAMS streams are taken through
    the instance X behind the slow link (cluster.py's SlowLink: its
    commands, their answers and its release notices each cross it with
    delays of their own), 0.6 s apart, each after a foreign value
    was planted on two masters for its name, so that its renewals after the
    first are repairs (script_renew takes the free masters back). When a
    stream's next renewal is expected to leave (the last one's sending
    time, read from its event's announced validity, plus a third of the
    ttl) and no planned fault is near (ctx.quiet), X stalls 30-75 ms after
    that: it is stopped (SIGSTOP) for 250-350 ms, as a process descheduled
    or paused by its runtime is, and the stream's token releases it (or an
    operator forces it) through another instance at once; then the next
    stream's turn. When every copy of the repair had left X and one had not
    yet reached its master, it reaches that master after the release and
    takes it back, and X wakes to the repair's answers and the release's
    notices at once, as in tests/races. (Without the stall X reads a
    release's notice before a repair's last answer: the notice leaves a
    master before the repair gets there, and the extension waits for every
    master. The copies leave X up to a round trip after the renewal, when
    their master has answered what X sent it before: group commit,
    master_conn.c; a copy still held at the stall leaves after it, and its
    answer comes after the notices.)

    Then, as a client does, each stream is read to its end and closed, and
    L1's acquire goes a bound after the name must be free: the answer, or
    after a lost, the end of the validity last announced (free_from), and
    not before the last stall's end plus its settling time (the checker
    uses the same). On a 409 every master's value is read (a peek), so the
    checker can tell the released grant's copies from the planted ones.
    The ttl is the longest allowed: a repaired copy outlives the announced
    validity by about a third of the ttl, which must exceed L1's bound.

    The round waits for a stretch of the run that the fault plan leaves
    quiet for X and the other instance (ctx.next_quiet; faults.plan leaves
    one every AIM_EVERY_S), so that L1 can be judged. Each stall is
    recorded as a fault (stall_instance, on X), so that it keeps every
    other judgement through X out of its way; the aimed probes' judgements
    account for it instead. A peek while X is still stopped reads whether a
    repair landed after the release (a copy of the token back on a
    master): the checker counts those as having met the race. Returns the
    number of L1 probes sent."""
    x = ctx.clu.slow_inst
    if x is None:
        return 0
    b = r.choice([k for k in range(ctx.ninst) if k != x])
    ttl = AIM_TTL_MS
    names = [f"nm-a{c.cid}-{n}-{j}" for j in range(AIM_STREAMS)]
    plan = [dict(name=nm, planted=sorted(r.sample(range(5), 2)), after=r.uniform(*AIM_AFTER_MS) / 1000.0,
                 stall=r.uniform(*AIM_STALL_S), end="force" if r.random() < AIM_FORCE_SHARE else "release")
            for nm in names]
    # Taken so that the second renewal (the first that is surely a repair)
    # of the first stream leaves half a second into the next quiet stretch
    # (the stalls, AIM_QUIET_S after the last, half a second to spare),
    # while no master sits out a quarantine (the grants need the three
    # unplanted masters).
    spread = (AIM_STREAMS - 1) * AIM_SPACING_S
    lead = 2 * ttl / 3000.0 + 0.1
    quiet = ctx.next_quiet(now() + lead, spread + AIM_QUIET_S + 1.0, {x, b}, names, lead=lead + spread)
    if quiet is None:
        ctx.sleep(1.0)
        return 0
    if not ctx.sleep(quiet + 0.5 - lead - now()):
        return 0
    for a in plan:
        for m in a["planted"]:
            ctx.plant(c, m, a["name"], AIM_PLANT_PX, probe="plant")

    def take(j, a):
        time.sleep(j * AIM_SPACING_S)
        return c.stream("hold", x, f"/locks/{q(a['name'])}", {"hold": True, "ttl_ms": ttl},
                        dict(kind="lock", name=a["name"], ttl_ms=ttl, aimed=True), timeout=8.0)
    streams = _in_parallel([lambda j=j, a=a: take(j, a) for j, a in enumerate(plan)])
    try:
        return _aimed_round(ctx, c, x, b, ttl, plan, streams)
    finally:
        for s in streams:
            s.close()


def _renewed(a, ttl):
    """Waits for a's next renewal; False when its stream ended."""
    ev = a["s"].wait_for({"renewed"}, ttl / 1000.0 + 2.0, start=a["k"] + 1)
    if ev is None:
        return False
    a["k"] = ev[0]
    a["sent"].append(sent_at(ev[1], ev[3], ttl))
    return True


def _aimed_round(ctx, c, x, b, ttl, plan, streams):
    live = []
    for a, s in zip(plan, streams):
        ev = s.wait_for({"acquired"}, 5.0) if s.ok else None
        if ev is not None:
            a.update(s=s, token=ev[3]["token"], k=ev[0], sent=[sent_at(ev[1], ev[3], ttl)])
            live.append(a)
    for _ in range(AIM_MAX_RENEWALS):
        live = [a for a in live if _renewed(a, ttl)]
        if not live or ctx.stop.is_set():
            return 0
        if len(live[0]["sent"]) < 3:
            continue   # the first renewal may be a plain extension (the grant was answered before the planted masters)
        # Each next renewal leaves a third of the ttl after the last (the
        # renewer wakes then, a millisecond late at most), or up to 50 ms
        # sooner when a pass for another hold comes first (seldom, as
        # measured); those not yet read this turn (a later grant) leave a
        # turn later.
        for a in live:
            a["due"] = a["sent"][-1] + ttl / 3000.0 + AIM_WAKE_S
            a["at"] = a["due"] + a["after"]
        first, last = min(a["at"] for a in live), max(a["at"] for a in live)
        if ctx.end is not None and last + AIM_QUIET_S > ctx.end - 0.3:
            return 0   # (the run ends first)
        if first > now() + 0.05 and ctx.quiet(first - 0.3, last + AIM_QUIET_S, {x, b}, [a["name"] for a in live]):
            break
    else:
        return 0
    done = []
    for a in sorted(live, key=lambda a: a["at"]):
        if not ctx.sleep(a["at"] - now()):
            return 0
        if a["s"].terminal():
            continue
        with ctx.stall(x, a["stall"], [a["s"].id]) as stalled:
            if not stalled:
                return 0
            if a["end"] == "force":
                rel, st, _ = c.force(b, "lock", a["name"], aimed=True, stream=a["s"].id, due=a["due"])
            else:
                rel, st, _ = c.release(b, a["name"], a["token"], aimed=True, due=a["due"])
            a.update(rel=rel, st=st, answered=now())
            if st == 204:
                ctx.sleep(a["answered"] + AIM_RACE_PEEK_S - now())
                ctx.peek(c, a["name"], probe="L1r", ref=rel, grant=a["s"].id)
                done.append(a)
    stall_end = now()
    for a in done:
        a["s"].wait_for(TERMINAL, ttl / 1000.0 + 1.0, start=a["k"] + 1)
        a["s"].close()
        a["since"] = max(free_from(a["s"], a["answered"], ttl), stall_end + ctx.stall_settle_s)
    sent = 0
    for a in sorted(done, key=lambda a: a["since"]):
        if l1_probe(ctx, c, b, a["name"], a["rel"], a["s"].id, ttl, since=a["since"], peek=True,
                    aimed=True) is not None:
            sent += 1
    return sent
