"""The nemesis checker: pure functions over a run's history (history.py's
records, a list of dicts), no I/O. check(records) returns
{"violations": [...], "stats": {...}}; each violation names its property,
says what happened and lists the records involved.

Safety (exact; this file):
  mutual_exclusion   no two holders of a lock (Dapr's included) or an
                     election within what they were told;
  semaphore_limit    never more permits of a semaphore relied on at once
                     than its limit, and one holder per slot;
  leader_per_term    no two campaigns elected with one term;
  fence_order        a grant whose request was sent after another grant of
                     that name (slot, election) was answered has a higher
                     fence (term); an extension reports its grant's fence;
  extend_after_release  no token extended (PATCH 200, a proclaim 204) when
                     the call was sent after its release (or resign) or a
                     force of its name was answered 204.
Liveness (checker_live.py): L1, L2, L3, judged only where no fault touched.

A holder's window: from when it read its grant (the answer; a stream's
acquired/elected event) to the earliest of its release (or resign, unlock,
the close of its stream) being sent, the end of the validity it was told
(acquire: sent + validity_ms; extension: the PATCH sent + validity_ms; a
stream event: read + validity_ms; Dapr: sent + expiryInSeconds; each
validity told replaces the one before from when it was read, so an
extension to a shorter ttl shortens the window, and an extension answered
otherwise than 200 caps it at the PATCH sent + the ttl it asked), reading
409 not_held to an extension (redlockd then frees what the token held), a
force
of its name, and reading lost/released/resigned. A force ends the claims of
every grant that may have preceded it, from when it was sent, unless it was
refused (4xx): a force without an answer, or answered 503, may still have
run on the masters."""
import bisect

INF = float("inf")
FORCE_LATE_S = 10.0   # an unanswered force may still run this long after it was sent
GRANT_EVENTS = ("acquired", "elected")
TERMINAL = ("lost", "released", "resigned")


# ---- the history as operations ----

def build(records):
    ops, faults, meta, t_end = {}, {}, {}, 0.0
    for r in records:
        t_end = max(t_end, r.get("t") or 0.0)
        ty = r.get("type")
        if ty == "meta":
            meta.update(r)
        elif ty == "invoke":
            op = dict(r)
            op.update(t0=r["t"], t1=None, status=None, res={}, events=[])
            ops[r["id"]] = op
        elif ty == "complete" and r["id"] in ops:
            op = ops[r["id"]]
            op.update(t1=r["t"], status=r.get("status"), res=r)
        elif ty == "event" and r["id"] in ops:
            ops[r["id"]]["events"].append(r)
        elif ty == "fault":
            f = faults.setdefault(r["fid"], dict(fid=r["fid"], kind=r["kind"], begin=None, end=None,
                                                 settle_ms=0, scope="all"))
            if r["phase"] == "begin":
                f.update({k: v for k, v in r.items() if k not in ("type", "phase", "t")})
                f["begin"] = r["t"]
            elif r["phase"] == "end":
                f["end"] = r["t"]
                f["settle_ms"] = r.get("settle_ms", f.get("settle_ms", 0))
    for f in faults.values():
        if f["begin"] is None:
            f["begin"] = 0.0
        if f["end"] is None:
            f["end"] = t_end
    return dict(ops=ops, faults=sorted(faults.values(), key=lambda f: f["begin"]), meta=meta, t_end=t_end)


def show(op, upto=6):
    """A short account of an operation and its first events, for reports."""
    keys = ("name", "inst", "token", "tokens", "ttl_ms", "wait_ms", "probe", "owner", "expiry_s")
    s = f"#{op['id']} c{op.get('client')} {op['op']}" + "".join(
        f" {k}={op[k]}" for k in keys if op.get(k) not in (None, "", 0))
    s += f" sent={op['t0']:.4f}"
    if op["t1"] is not None:
        res = {k: v for k, v in op["res"].items() if k not in ("type", "id", "t", "status")}
        s += f" -> {op['status']} {res} at {op['t1']:.4f}"
    else:
        s += " -> no answer"
    for e in op["events"][:upto]:
        f = {k: v for k, v in e.items() if k not in ("type", "id", "t", "event")}
        s += f"\n      read {e['t']:.4f} {e['event']} {f}"
    if len(op["events"]) > upto:
        s += f"\n      ... {len(op['events']) - upto} more events"
    return s


def violation(prop, msg, ops=()):
    return dict(property=prop, message=msg, ops=[show(o) for o in ops], op_ids=[o["id"] for o in ops])


# ---- grants and their windows ----

def _grant(key, op, token, fence, t_read, end_s, limit=None, slot=None):
    return dict(key=key, op=op, token=token, fence=fence, t_inv=op["t0"], t_read=t_read,
                iv=[(t_read, end_s)], end=INF, limit=limit, slot=slot)


def _stream_grant(key, op, ev, fence, limit=None):
    """A stream's grant with a window per event it read until its last."""
    g = _grant(key, op, ev.get("token"), fence, ev["t"], ev["t"] + ev.get("validity_ms", 0) / 1000.0,
               limit=limit, slot=ev.get("slot"))
    for e in op["events"]:   # the client's close ends it, wherever it was recorded
        if e["event"] == "close":
            g["end"] = min(g["end"], e["t"])
    after = False
    for e in op["events"]:
        if e is ev:
            after = True
            continue
        if not after:
            continue
        if e["event"] == "renewed":
            g["iv"].append((e["t"], e["t"] + e.get("validity_ms", 0) / 1000.0))
        elif e["event"] in TERMINAL or e["event"] == "close":
            g["end"] = min(g["end"], e["t"])
            break
    return g


def grants_of(m):
    """Every grant the clients read, with its windows (ends not yet applied
    for releases and forces)."""
    out = []
    for op in m["ops"].values():
        name, o = op.get("name"), op["op"]
        if o == "acquire" and op["status"] == 201 and op["res"].get("token"):
            v = op["res"].get("validity_ms") or 0
            out.append(_grant(("lock", name), op, op["res"]["token"], op["res"].get("fence"), op["t1"],
                              op["t0"] + v / 1000.0))
        elif o == "dapr_lock" and op["status"] == 200 and op["res"].get("success") is True:
            out.append(_grant(("lock", name), op, "dapr:" + op["owner"], None, op["t1"],
                              op["t0"] + op["expiry_s"]))
        elif o == "sem_acquire" and op["status"] == 201:
            for p in op["res"].get("granted") or []:
                out.append(_grant(("slot", name, p["slot"]), op, p["token"], p.get("fence"), op["t1"],
                                  op["t0"] + (p.get("validity_ms") or 0) / 1000.0,
                                  limit=op.get("limit"), slot=p["slot"]))
        elif o in ("hold", "campaign", "sem_hold") and op["status"] == 201:
            ev = next((e for e in op["events"] if e["event"] in GRANT_EVENTS), None)
            if ev is None:
                continue
            if o == "hold":
                out.append(_stream_grant(("lock", name), op, ev, ev.get("fence")))
            elif o == "campaign":
                out.append(_stream_grant(("election", name), op, ev, ev.get("term")))
            else:
                out.append(_stream_grant(("slot", name, ev.get("slot")), op, ev, ev.get("fence"),
                                         limit=op.get("limit")))
    return out


def _token_uses(m):
    """token -> the operations that end or extend it."""
    ends, exts = {}, {}
    for op in m["ops"].values():
        o = op["op"]
        if o in ("release", "resign"):
            ends.setdefault(op["token"], []).append(op)
        elif o == "sem_release":
            for t in op.get("tokens") or []:
                ends.setdefault(t, []).append(op)
        elif o == "dapr_unlock":
            ends.setdefault("dapr:" + op["owner"], []).append(op)
        elif o in ("extend", "proclaim"):
            exts.setdefault(op["token"], []).append(op)
        elif o == "sem_extend":
            for t in op.get("tokens") or []:
                exts.setdefault(t, []).append(op)
    return ends, exts


def forces_of(m):
    """(kind, name) -> forces that may have run (not refused with a 4xx)."""
    out = {}
    for op in m["ops"].values():
        if op["op"] == "force" and not (op["status"] is not None and 400 <= op["status"] < 500):
            out.setdefault((op["kind"], op["name"]), []).append(op)
    return out


def _force_hits(f, g):
    """A force may have ended g: g's request was sent before the force was
    answered (or, unanswered, before it could still have run)."""
    limit = f["t1"] if f["t1"] is not None else f["t0"] + FORCE_LATE_S
    return g["t_inv"] < limit


def _kind_of(key):
    return {"lock": "lock", "election": "election", "slot": "semaphore"}[key[0]]


def _windows(iv, caps, end):
    """The windows a holder relied on: each validity it was told (read, end)
    holds until the next one was read (an extension to a shorter ttl
    shortens it); an extension not answered 200 may still have been made,
    so what was told before it was sent holds at most until it was sent
    plus the ttl it asked for; nothing after end."""
    out = []
    for k, (s, e) in enumerate(iv):
        if k + 1 < len(iv):
            e = min(e, iv[k + 1][0])
        for sent, until in caps:
            if s < sent:
                e = min(e, until)
        e = min(e, end)
        if s < e:
            out.append((s, e))
    return out


def windows(m, grants):
    """Applies ends (releases, forces) and extensions to each grant; sets
    g["win"], its list of (start, end) windows, non-empty ones only."""
    ends, exts = _token_uses(m)
    forces = forces_of(m)
    by_token = {}
    for g in grants:
        by_token.setdefault((g["key"][0], g["key"][1], g["token"]), g)
        for r in ends.get(g["token"], []):
            if r["t0"] >= g["t_inv"]:
                g["end"] = min(g["end"], r["t0"])
        for f in forces.get((_kind_of(g["key"]), g["key"][1]), []):
            if _force_hits(f, g):
                g["end"] = min(g["end"], max(f["t0"], g["t_read"]))
        caps = []   # (sent, sent + ttl_ms asked) of extensions not answered 200
        for x in exts.get(g["token"], []):
            if x["t0"] < g["t_inv"] or x["op"] == "proclaim":
                continue
            told = None
            if x["status"] == 200 and x["op"] == "extend":
                told = x["res"].get("validity_ms") or 0
            elif x["status"] == 200:
                told = next((p.get("validity_ms") or 0 for p in x["res"].get("granted") or []
                             if p.get("token") == g["token"] or
                             (p.get("token") is None and p.get("slot") == g["slot"])), None)
            if told is not None:
                g["iv"].append((x["t1"], x["t0"] + told / 1000.0))
                continue
            if x.get("ttl_ms"):
                caps.append((x["t0"], x["t0"] + x["ttl_ms"] / 1000.0))
            if x["status"] == 409:   # not_held: the holder learns it lost the lock
                g["end"] = min(g["end"], x["t1"])
        g["win"] = _windows(sorted(g["iv"]), caps, g["end"])
    return by_token


# ---- safety properties ----

def mutual_exclusion(grants):
    """Overlapping windows of two different grants of one key. Slots are
    reported as semaphore_limit (one holder per slot)."""
    out = []
    by_key = {}
    for g in grants:
        for s, e in g["win"]:
            by_key.setdefault(g["key"], []).append((s, e, g))
    for key, ivs in by_key.items():
        ivs.sort(key=lambda x: x[0])
        active, seen = [], set()
        for s, e, g in ivs:
            active = [a for a in active if a[1] > s]
            for a in active:
                if a[2] is not g and (id(a[2]), id(g)) not in seen:
                    seen.add((id(a[2]), id(g)))
                    prop = "semaphore_limit" if key[0] == "slot" else "mutual_exclusion"
                    what = f"slot {key[2]} of semaphore {key[1]!r}" if key[0] == "slot" else \
                        f"{key[0]} {key[1]!r}"
                    out.append(violation(prop, f"two holders of {what} at once: "
                                         f"[{a[0]:.4f}, {a[1]:.4f}] and [{s:.4f}, {e:.4f}] overlap "
                                         f"by {(min(a[1], e) - s) * 1000:.1f} ms", [a[2]["op"], g["op"]]))
            active.append((s, e, g))
    return out


def semaphore_limit(grants):
    """More permits of one semaphore relied on at once than its limit."""
    out = []
    by_name = {}
    for g in grants:
        if g["key"][0] == "slot":
            by_name.setdefault(g["key"][1], []).append(g)
    for name, gs in by_name.items():
        limit = max(g["limit"] or 0 for g in gs)
        pts = []
        for g in gs:
            for s, e in g["win"]:
                pts.append((s, 1, g))
                pts.append((e, -1, g))
        pts.sort(key=lambda p: (p[0], p[1]))   # an end before a start at one instant
        active, reported = {}, False   # id(grant) -> [open windows, grant]
        for t, d, g in pts:
            a = active.setdefault(id(g), [0, g])
            a[0] += d
            if a[0] <= 0:
                active.pop(id(g))
                continue
            if len(active) > limit and not reported:
                reported = True
                holders = [x[1] for x in active.values()]
                out.append(violation("semaphore_limit", f"{len(holders)} permits of semaphore {name!r} "
                                     f"(limit {limit}) relied on at once at {t:.4f}",
                                     [x["op"] for x in holders]))
    return out


def leader_per_term(grants):
    out = []
    terms = {}
    for g in grants:
        if g["key"][0] == "election" and g["fence"] is not None:
            terms.setdefault((g["key"][1], g["fence"]), []).append(g)
    for (name, term), gs in terms.items():
        if len({g["op"]["id"] for g in gs}) > 1:
            out.append(violation("leader_per_term", f"{len(gs)} campaigns of election {name!r} elected "
                                 f"with one term {term}", [g["op"] for g in gs]))
    return out


def fence_order(m, grants, by_token):
    """Fences (terms) strictly increase in real time per key; an extension
    reports its grant's fence."""
    out = []
    by_key = {}
    for g in grants:
        if g["fence"] is not None:
            by_key.setdefault(g["key"], []).append(g)
    for key, gs in by_key.items():
        answered = sorted(gs, key=lambda g: g["t_read"])
        reads = [g["t_read"] for g in answered]
        best = []   # best[i]: the grant with the highest fence among answered[:i+1]
        for g in answered:
            best.append(g if not best or g["fence"] > best[-1]["fence"] else best[-1])
        for g in gs:
            k = bisect.bisect_left(reads, g["t_inv"])
            if k == 0:
                continue
            b = best[k - 1]
            if b["fence"] >= g["fence"]:
                out.append(violation("fence_order", f"{key[0]} {key[1]!r}"
                                     + (f" slot {key[2]}" if key[0] == "slot" else "")
                                     + f": fence {g['fence']} granted to a request sent after a grant "
                                     f"with fence {b['fence']} was answered", [b["op"], g["op"]]))
    for op in m["ops"].values():
        if op["op"] == "extend" and op["status"] == 200:
            g = by_token.get(("lock", op["name"], op["token"]))
            f = op["res"].get("fence")
            if g is not None and g["fence"] is not None and f is not None and f != g["fence"]:
                out.append(violation("fence_order", f"an extension of lock {op['name']!r} reported fence "
                                     f"{f}, its grant's is {g['fence']}", [g["op"], op]))
    return out


def extend_after_release(m, grants):
    out = []
    ends, exts = _token_uses(m)
    forces = forces_of(m)
    for g in grants:
        kind = _kind_of(g["key"])
        for x in exts.get(g["token"], []):
            if x["t0"] < g["t_inv"] or x["status"] not in (200, 204):
                continue
            if x["op"] == "proclaim" and x["status"] != 204 or x["op"] != "proclaim" and x["status"] != 200:
                continue
            why = None
            for r in ends.get(g["token"], []):
                if r["op"] in ("release", "resign", "sem_release") and r["status"] == 204 and \
                        r["t1"] is not None and r["t1"] < x["t0"] and r["t0"] >= g["t_inv"]:
                    why = r
                    break
            if why is None:
                for f in forces.get((kind, g["key"][1]), []):
                    if f["status"] == 204 and f["t0"] > g["t_read"] and f["t1"] < x["t0"]:
                        why = f
                        break
            if why is not None:
                out.append(violation("extend_after_release",
                                     f"{x['op']} of a {kind} token of {g['key'][1]!r} answered "
                                     f"{x['status']}, sent {(x['t0'] - why['t1']) * 1000:.1f} ms after its "
                                     f"{why['op']} was answered 204", [g["op"], why, x]))
    return out


def rights(m):
    """The outsider's calls on names that are not its own were refused
    (403, or no answer while its instance was down), and a listing showed
    it only names under its prefix."""
    v = []
    for op in m["ops"].values():
        if op["op"] != "trespass" or op["t1"] is None:
            continue
        if op.get("what") == "own":
            ok = op["status"] in (201, 409, 503, None)
        elif op.get("what") == "list":
            names = op["res"].get("names") or []
            ok = op["status"] in (200, 503, None) and all(str(n).startswith("outside/") for n in names)
        else:
            ok = op["status"] in (403, None)
        if not ok:
            v.append(violation("rights", f"the outsider's {op.get('what')} answered {op['status']}", [op]))
    return v


def check(records, live=True):
    m = build(records)
    grants = grants_of(m)
    by_token = windows(m, grants)
    v = []
    v += mutual_exclusion(grants)
    v += semaphore_limit(grants)
    v += leader_per_term(grants)
    v += fence_order(m, grants, by_token)
    v += extend_after_release(m, grants)
    v += rights(m)
    stats = dict(grants=len(grants), ops=len(m["ops"]), faults=len(m["faults"]))
    if live:
        import checker_live
        lv, ls = checker_live.check(m, grants)
        v += lv
        stats.update(ls)
    return dict(violations=v, stats=stats)


def properties():
    return ["mutual_exclusion", "semaphore_limit", "leader_per_term", "fence_order",
            "extend_after_release", "rights", "L1", "L2", "L3"]
