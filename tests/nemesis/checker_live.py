"""The nemesis checker's liveness properties (pure, like checker.py), each
judged only where no fault touched its window; every timing bound is
generous, so that a busy 2-core machine never trips one.

  L1  after a release or force was answered 204, an acquire probe sent a
      bound later must not find the name held by the released grant: a 409
      whose inspection (GET at once) shows the released grant's fence is a
      violation (a repair keeps its fence, so a lock that comes back is
      caught exactly), and so is a 409 where every master's value, read
      directly at once (a peek, the aimed probes'), shows copies of the
      released grant's token without which the name would have been
      granted (a majority of masters free or holding only that token).
      bound = drift (1% of ttl + 2 ms) + a round trip + the master
      timeout + slack, counted from the answer; for a held stream that
      read lost (any reason but forced) before its end, from the end of
      the validity it last announced plus the transit margin if later
      (docs/held-streams.md: what the token may still hold goes then).
  L2  a waiter (wait_ms) for a name whose holder released it well within
      the wait is granted within the wait (asking again after a 503, as
      clients do).
  L3  a stream whose lock was forced (answered 204) reads lost (reason
      forced, where the probe says so; else any last event or its end)
      within a bound; a stream whose told validity ran out reads another
      event (a renewal, lost, its end) within validity + slack.

A fault touches a window when [begin, end + settle] meets it and it
concerns the window's operations: a master's fault concerns every name, an
instance's only operations through that instance, a planted value only its
names."""

DEFAULTS = dict(l1_slack_ms=1000, rtt_ms=50, master_timeout_ms=100, drift_factor=0.01,
                l2_slack_ms=3000, l3_force_ms=3000, l3_slack_ms=3000)
TRANSIT_MARGIN_MS = 500   # HOLD_TRANSIT_MARGIN_MS (src/recipes/hold.h): at most a fifth of the ttl
PEEK_DOWN = "!down"   # a peek's value where the master did not answer (workload.DOWN)
VALIDITY_EVENTS = ("acquired", "elected", "renewed")
ENDS = ("lost", "released", "resigned", "end", "close")


def bounds(meta):
    b = dict(DEFAULTS)
    b.update({k: meta[k] for k in DEFAULTS if k in meta})
    return b


def l1_bound_ms(b, ttl_ms):
    return b["drift_factor"] * ttl_ms + 2 + b["rtt_ms"] + b["master_timeout_ms"] + b["l1_slack_ms"]


def touched(m, a, b, insts=(), names=(), ignore=()):
    """The first fault whose effect meets [a, b] and concerns these
    instances or names, or None; faults whose fid is in ignore do not
    count."""
    for f in m["faults"]:
        if f["begin"] > b:
            break
        if f["end"] + f.get("settle_ms", 0) / 1000.0 < a or f["fid"] in ignore:
            continue
        scope = f.get("scope", "all")
        if scope == "all" or (scope == "inst" and f.get("inst") in insts) or \
                (scope == "names" and set(f.get("names") or ()) & set(names)):
            return f
    return None


def _insts(*ops):
    return {o.get("inst") for o in ops if o is not None}


def _fence_of(op):
    if op["op"] == "acquire":
        return op["res"].get("fence")
    ev = next((e for e in op["events"] if e["event"] in ("acquired", "elected")), None)
    return None if ev is None else ev.get("fence", ev.get("term"))


def _token_of(op):
    if op["op"] == "acquire":
        return op["res"].get("token")
    ev = next((e for e in op["events"] if e["event"] in ("acquired", "elected")), None)
    return None if ev is None else ev.get("token")


def copies_of(peek, token):
    """(copies of token, free masters) in a peek's values (PEEK_DOWN where
    a master did not answer). A value is the token's when it is the token
    or the token and a grant's suffix (byte 0x1f, scripts.h)."""
    vals = peek["res"].get("values") or []
    mine = sum(1 for v in vals if token and v is not None and (v == token or v.startswith(token + "\x1f")))
    return mine, sum(1 for v in vals if v is None)


def transit_margin_ms(ttl_ms):
    """What a held stream's events announce less than the validity
    obtained (hold.c: a fifth of the ttl, at most HOLD_TRANSIT_MARGIN_MS)."""
    return min(ttl_ms // 5, TRANSIT_MARGIN_MS)


def free_from(b, grant, rel):
    """When the released grant's name must be free from: the release's
    answer, or for a stream that read lost (any reason but forced) before
    its end, the end of the validity it last announced plus the transit
    margin, if later (probes.free_from does the same)."""
    told = rel["t1"]
    for e in grant["events"]:
        if e["event"] in ("acquired", "renewed"):
            told = e["t"] + (e.get("validity_ms") or 0) / 1000.0
        elif e["event"] == "lost" and e.get("reason") != "forced":
            return max(rel["t1"], told + transit_margin_ms(grant.get("ttl_ms") or 0) / 1000.0)
        elif e["event"] in ENDS:
            break
    return rel["t1"]


def l1(m, b, stat):
    from checker import violation
    out = []
    ops = m["ops"]
    follow = {o["ref"]: o for o in ops.values() if o.get("probe") == "L1i"}
    peeks = {o["ref"]: o for o in ops.values() if o.get("probe") == "L1p" and o["status"] == 200}
    for r in ops.values():   # the aimed probes' peek after the release: did a repair land after it?
        if r.get("probe") == "L1r" and r["status"] == 200 and r.get("grant") in ops:
            stat["L1_aimed_raced"] += copies_of(r, _token_of(ops[r["grant"]]))[0] > 0
    for p in ops.values():
        if p.get("probe") != "L1" or p["op"] != "acquire":
            continue
        rel, grant = ops.get(p.get("ref")), ops.get(p.get("grant"))
        insp, peek = follow.get(p["id"]), peeks.get(p["id"])
        if rel is None or grant is None or rel["status"] != 204 or p["t1"] is None:
            continue
        bound = l1_bound_ms(b, grant.get("ttl_ms") or 0) / 1000.0
        since = free_from(b, grant, rel)
        # An aimed probe's stalls (its round's: SIGSTOP of an instance for
        # at most a few hundred ms) keep it from being judged no more: what
        # a stopped instance owes is late by the stall, so the bound counts
        # from the end of the last one sent before the probe, plus its
        # settling time.
        own = [f for f in m["faults"] if f["kind"] == "stall_instance"
               and f.get("inst") in _insts(grant, rel, p, insp)] if p.get("aimed") else []
        for f in own:
            if f["begin"] <= p["t0"]:
                since = max(since, f["end"] + f.get("settle_ms", 0) / 1000.0)
        if p["t0"] - since < bound:
            continue
        end = max(x["t1"] for x in (p, insp, peek) if x is not None and x["t1"] is not None)
        # An aimed probe is judged from its release on (a fault settled
        # by then cannot touch it); the others from their grant.
        begin = rel["t0"] if p.get("aimed") else grant["t0"]
        if touched(m, begin, end, _insts(grant, rel, p, insp), [p["name"]], {f["fid"] for f in own}):
            continue
        seen = (insp is not None and insp["status"] == 200) or peek is not None
        if p["status"] != 201 and (p["status"] != 409 or not seen):
            continue
        stat["L1_judged"] += 1
        stat["L1_repaired_judged"] += bool(p.get("repaired"))
        stat["L1_aimed_judged"] += bool(p.get("aimed"))
        if p["status"] == 201:
            continue
        fence, token = _fence_of(grant), _token_of(grant)
        late = f"(probe sent {(p['t0'] - rel['t1']) * 1000:.0f} ms after, bound {bound * 1000:.0f} ms" + \
            (f" from {(since - rel['t1']) * 1000:.0f} ms after: a lost stream's validity, or its stall)"
             if since > rel["t1"] else ")")
        if insp is not None and insp["status"] == 200 and insp["res"].get("held") and fence is not None \
                and insp["res"].get("fence") == fence:
            out.append(violation("L1", f"{p['name']!r} still held by the released grant (fence {fence}) "
                                 f"{(insp['t1'] - rel['t1']) * 1000:.0f} ms after its {rel['op']} was "
                                 f"answered 204 {late}", [grant, rel, p, insp]))
            continue
        if peek is None:
            continue
        mine, free = copies_of(peek, token)
        quorum = len(peek["res"].get("values") or []) // 2 + 1
        if mine > 0 and mine + free >= quorum:
            out.append(violation("L1", f"{p['name']!r} refused {(p['t1'] - rel['t1']) * 1000:.0f} ms after its "
                                 f"{rel['op']} was answered 204 {late}: {mine} master(s) still held the released "
                                 f"grant's token and {free} were free, a majority without it (peek at "
                                 f"{peek['t0']:.4f}: {peek['res'].get('values')})",
                                 [x for x in (grant, rel, p, insp, peek) if x is not None]))
    return out


def l2(m, b, stat):
    """A waiter's tries (it asks again after a 503 or no answer) are judged
    together: one must be granted."""
    from checker import violation
    out = []
    ops = m["ops"]
    rels = {o["holder"]: o for o in ops.values() if o.get("probe") == "L2rel"}
    tries = {}
    for w in sorted(ops.values(), key=lambda o: o["t0"]):
        if w.get("probe") == "L2":
            tries.setdefault(w["holder"], []).append(w)
    for hid, ws in tries.items():
        rel, holder, w = rels.get(hid), ops.get(hid), ws[0]
        if rel is None or rel["status"] != 204 or holder is None:
            continue
        wait_end = w["t0"] + w["wait_ms"] / 1000.0
        if rel["t1"] + b["l2_slack_ms"] / 1000.0 > wait_end:
            continue
        last = ws[-1]
        end = last["t1"] if last["t1"] is not None else wait_end
        if touched(m, holder["t0"], max(end, rel["t1"]), _insts(holder, rel, *ws), [w["name"]]):
            continue
        stat["L2_judged"] += 1
        if not any(x["status"] == 201 for x in ws):
            told = ", ".join(f"{x['status']} {x['res'].get('error', '')}".strip() for x in ws)
            out.append(violation("L2", f"a waiter for {w['name']!r} (wait_ms {w['wait_ms']}) was not granted "
                                 f"({told}), though its holder's release was answered 204 "
                                 f"{(wait_end - rel['t1']) * 1000:.0f} ms before the wait ran out, every "
                                 f"master up", [holder, rel] + ws))
    return out


def _holding_at(s, t):
    """The stream had read its grant before t, and nothing that ends it."""
    granted = False
    for e in s["events"]:
        if e["t"] >= t:
            break
        if e["event"] in ("acquired", "elected"):
            granted = True
        elif e["event"] in ENDS:
            return False
    return granted


def l3(m, b, stat):
    from checker import violation
    out = []
    ops = m["ops"]
    streams = {}
    for s in ops.values():
        if s["op"] in ("hold", "campaign", "sem_hold") and s["status"] == 201:
            streams.setdefault((s["kind"], s["name"]), []).append(s)
    fb = b["l3_force_ms"] / 1000.0
    for f in ops.values():
        if f["op"] != "force" or f["status"] != 204:
            continue
        for s in streams.get((f["kind"], f["name"]), []):
            if not _holding_at(s, f["t0"]):
                continue
            deadline = f["t1"] + fb
            after = [e for e in s["events"] if e["t"] >= f["t0"]]
            first_end = next((e for e in after if e["event"] in ENDS), None)
            if first_end is None and deadline > m["t_end"]:
                continue   # the history ended first
            if touched(m, s["t0"], deadline, _insts(s, f), [f["name"]]):
                continue
            if first_end is not None and first_end["event"] == "close" and first_end["t"] <= deadline:
                continue   # the client left first: nothing to judge
            stat["L3_forced_judged"] += 1
            strict = f.get("probe") == "L3" and f.get("stream") == s["id"]
            ok = first_end is not None and first_end["t"] <= deadline
            if ok and strict:
                ok = first_end["event"] == "lost" and first_end.get("reason") == "forced"
            if not ok:
                told = "nothing" if first_end is None else \
                    f"{first_end['event']} {first_end.get('reason', '')} at {first_end['t']:.4f}"
                out.append(violation("L3", f"a stream of the {f['kind']} {f['name']!r} read {told} after a "
                                     f"force answered 204 at {f['t1']:.4f}; it must read "
                                     + ("lost (forced)" if strict else "its last event")
                                     + f" within {fb * 1000:.0f} ms", [s, f]))
    sl = b["l3_slack_ms"] / 1000.0
    for group in streams.values():
        for s in group:
            evs = s["events"]
            for k, e in enumerate(evs):
                if e["event"] not in VALIDITY_EVENTS:
                    continue
                deadline = e["t"] + e.get("validity_ms", 0) / 1000.0 + sl
                nxt = evs[k + 1] if k + 1 < len(evs) else None
                if nxt is None and deadline > m["t_end"]:
                    continue   # the history ended first
                if touched(m, e["t"], deadline, _insts(s), [s["name"]]):
                    continue
                stat["L3_validity_judged"] += 1
                if nxt is not None and nxt["t"] <= deadline:
                    continue
                out.append(violation("L3", f"a stream of the {s['kind']} {s['name']!r} read "
                                     f"{e['event']} (validity {e.get('validity_ms')} ms) at {e['t']:.4f}, then "
                                     + ("nothing" if nxt is None else f"{nxt['event']} at {nxt['t']:.4f}")
                                     + f": past its validity + {sl * 1000:.0f} ms", [s]))
                break
    return out


def check(m, grants):
    b = bounds(m["meta"])
    stat = dict(L1_judged=0, L1_repaired_judged=0, L1_aimed_judged=0, L1_aimed_raced=0, L2_judged=0,
                L3_forced_judged=0, L3_validity_judged=0)
    out = l1(m, b, stat) + l2(m, b, stat) + l3(m, b, stat)
    return out, stat
