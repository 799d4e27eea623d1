"""The nemesis's tables: operations run by kind (with their answers),
faults injected by kind, violations by property and what liveness could be
judged; per run and for all runs of a command."""
import checker

EXPECTED_OPS = [
    "acquire", "extend", "release", "inspect", "hold", "heartbeat", "force", "campaign", "resign",
    "proclaim", "election_get", "sem_acquire", "sem_extend", "sem_release", "sem_hold", "sem_get",
    "dapr_lock/http", "dapr_lock/grpc", "dapr_unlock/http", "dapr_unlock/grpc", "list", "plant",
]
COLS = ["sent", "2xx", "409", "503", "other", "no answer"]
JUDGED = ["L1_judged", "L1_repaired_judged", "L1_aimed_judged", "L2_judged", "L3_forced_judged",
          "L3_validity_judged"]
AIMED = ["streams", "released", "forced", "raced", "judged"]


def op_kind(r):
    k = r["op"]
    return f"{k}/{r['via']}" if r.get("via") else k


def op_counts(records):
    invokes = {r["id"]: op_kind(r) for r in records if r.get("type") == "invoke"}
    counts = {}
    for k in invokes.values():
        counts.setdefault(k, dict.fromkeys(COLS, 0))["sent"] += 1
    answered = set()
    for r in records:
        if r.get("type") != "complete" or r["id"] not in invokes:
            continue
        answered.add(r["id"])
        c, s = counts[invokes[r["id"]]], r.get("status")
        col = "no answer" if s is None else "2xx" if 200 <= s < 300 else \
            "409" if s == 409 else "503" if s == 503 else "other"
        c[col] += 1
    for i, k in invokes.items():
        if i not in answered:
            counts[k]["no answer"] += 1
    return counts


def fault_counts(records):
    out = {}
    for r in records:
        if r.get("type") == "fault" and r.get("phase") == "begin":
            out[r["kind"]] = out.get(r["kind"], 0) + 1
    return out


def aimed_counts(records, stats):
    """The aimed L1 probes (probes.l1_aimed): streams taken through the
    slow link, releases and forces of them answered 204, those that met
    the race (a peek after the answer found a repair had put the token
    back on a master), and those L1 judged."""
    inv = {r["id"]: r for r in records if r.get("type") == "invoke"}
    done = {r["id"]: r.get("status") for r in records if r.get("type") == "complete"}
    out = dict.fromkeys(AIMED, 0)
    for i, r in inv.items():
        if not r.get("aimed"):
            continue
        if r["op"] == "hold":
            out["streams"] += 1
        elif r["op"] in ("release", "force") and done.get(i) == 204:
            out["released" if r["op"] == "release" else "forced"] += 1
    out["raced"] = stats.get("L1_aimed_raced", 0)
    out["judged"] = stats.get("L1_aimed_judged", 0)
    return out


def ms_range(r):
    return f"{r[0]:g}-{r[1]:g} ms"


def _meta(records):
    meta = {}
    for r in records:
        if r.get("type") == "meta":
            meta.update(r)
    return meta


def has_slow_link(records):
    return bool(_meta(records).get("slow_link"))


def slow_link_line(records):
    meta = _meta(records)
    sl, st = meta.get("slow_link"), meta.get("slow_link_stats") or {}
    if not sl:
        return "slow link: none"
    way = lambda w: ms_range(sl[w + "_ms"]) + \
        (f" ({st[w]['chunks']} chunks, mean {st[w]['mean_ms']} ms)" if w in st else "")  # noqa: E731
    return (f"slow link: redlockd {sl['inst']} to every master, a chunk delayed {way('up')} towards the masters "
            f"and {way('down')} back; {st.get('connections', '?')} connections")


def _aimed_line(a):
    return (f"aimed L1 probes: {a['streams']} streams through the slow link, {a['released']} released and "
            f"{a['forced']} forced (204), {a['raced']} met the race (a repair landed after the release), "
            f"{a['judged']} judged")


def _table(head, rows):
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    line = lambda xs: "| " + " | ".join(str(x).ljust(n) if i == 0 else str(x).rjust(n)  # noqa: E731
                                       for i, (x, n) in enumerate(zip(xs, w))) + " |"
    return "\n".join([line(head), "|" + "|".join(("-" * (n + 1) + ":") if i else "-" * (n + 2)
                                                 for i, n in enumerate(w)) + "|"] + [line(r) for r in rows])


def _ops_table(counts):
    rows = [[k] + [c[col] for col in COLS] for k, c in sorted(counts.items())]
    rows.append(["**all**"] + [sum(c[col] for c in counts.values()) for col in COLS])
    return _table(["operation"] + COLS, rows)


def _faults_table(fcounts):
    rows = [[k, v] for k, v in sorted(fcounts.items())] or [["(none)", 0]]
    rows.append(["**all**", sum(v for _, v in rows)])
    return _table(["fault", "injected"], rows)


def _violations_table(vcounts, judged):
    rows = [[p, vcounts.get(p, 0)] for p in checker.properties()]
    t = _table(["property", "violations"], rows)
    return t + "\n\nliveness judged (no fault near): " + ", ".join(f"{k[:-7]} {judged.get(k, 0)}"
                                                                   for k in JUDGED)


def tables(records, res, fcounts, seed, seconds):
    vcounts = {}
    for v in res["violations"]:
        vcounts[v["property"]] = vcounts.get(v["property"], 0) + 1
    fc = dict(fault_counts(records))
    for k, v in fcounts.items():
        if k.endswith("(skipped)"):
            fc[k] = v
    return (f"\nseed {seed}, {seconds:.0f} s: {res['stats']['grants']} grants\n\n"
            + _ops_table(op_counts(records)) + "\n\n" + _faults_table(fc) + "\n\n"
            + _violations_table(vcounts, res["stats"]) + "\n"
            + ("" if not has_slow_link(records) else
               slow_link_line(records) + "\n" + _aimed_line(aimed_counts(records, res["stats"])) + "\n"))


def show_violation(v):
    return f"\nVIOLATION {v['property']}: {v['message']}\n" + "\n".join("    " + o for o in v["ops"])


class Totals:
    def __init__(self):
        self.ops, self.faults, self.viol, self.judged = {}, {}, {}, {}
        self.aimed = dict.fromkeys(AIMED, 0)

    def add(self, records, res, fcounts):
        for k, c in op_counts(records).items():
            t = self.ops.setdefault(k, dict.fromkeys(COLS, 0))
            for col in COLS:
                t[col] += c[col]
        fc = dict(fault_counts(records))
        fc.update({k: v for k, v in fcounts.items() if k.endswith("(skipped)")})
        for k, v in fc.items():
            self.faults[k] = self.faults.get(k, 0) + v
        for v in res["violations"]:
            self.viol[v["property"]] = self.viol.get(v["property"], 0) + 1
        for k in JUDGED:
            self.judged[k] = self.judged.get(k, 0) + res["stats"].get(k, 0)
        for k, v in aimed_counts(records, res["stats"]).items():
            self.aimed[k] += v

    def table(self, seeds, seconds):
        return (f"\nall runs (seeds {seeds}, {seconds:.0f} s each)\n\n" + _ops_table(self.ops) + "\n\n"
                + _faults_table(self.faults) + "\n\n" + _violations_table(self.viol, self.judged) + "\n"
                + _aimed_line(self.aimed) + "\n")

    def missing(self):
        return [k for k in EXPECTED_OPS if self.ops.get(k, {}).get("sent", 0) == 0]
