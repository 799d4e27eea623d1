#!/usr/bin/env python3
"""The nemesis checker's negative controls: each runs redlockd with one
test hook, REDLOCKD_TEST_BREAK=<rule>, that breaks exactly one rule, and a
short directed schedule under which the checker MUST report that rule's
property, by construction, never by chance:

  double_grant  an acquire that would answer 409 answers 201: two holders
                (mutual_exclusion);
  over_limit    a semaphore acquire that would answer 409 answers 201:
                two permits of a semaphore of one (semaphore_limit);
  stale_fence   every fence and term is 1: a later grant with no higher
                fence, two leaders with one term (fence_order,
                leader_per_term);
  release_noop  a release by token answers 204 and releases nothing: an
                extension after it succeeds, and the released grant still
                holds the name a bound later (extend_after_release, L1);
  no_wake       a waiting acquire is never woken: it answers 409 when its
                wait runs out though the name was freed (L2);
  silent_loss   a held stream whose lock is lost ends without lost (L3);
  no_rights     a principal may do anything to any name: the outsider
                takes a name that is not its own (rights).

The test passes when the checker reports the property (and exits 1 with
the report when it does not, or when the binary lacks the hook). With
--without-hook the same schedule runs on the plain binary and must come
out clean, with the property judged: the violation is then the hook's
doing, not the schedule's (suite nemesis-long).

usage: controls.py RULE [--without-hook] [--out DIR] [--root SRC]   (env REDLOCKD_BIN)"""
import argparse
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import api  # noqa: E402
import checker  # noqa: E402
import cluster  # noqa: E402
import history  # noqa: E402
import nemesis  # noqa: E402
import probes  # noqa: E402
import report  # noqa: E402

JUDGED = {"L1": "L1_judged", "L2": "L2_judged", "L3": "L3_forced_judged"}


def double_grant(ctx, c):
    _, s1, g1 = c.acquire(0, "nc-double", 4000)
    _, s2, g2 = c.acquire(1, "nc-double", 4000)
    ctx.sleep(0.3)   # both hold
    for st, g in ((s1, g1), (s2, g2)):
        if st == 201:
            c.release(2, "nc-double", g["token"])


def over_limit(ctx, c):
    _, s1, g1 = c.sem_acquire(0, "nc-limit", 1, 1, 4000)
    _, s2, g2 = c.sem_acquire(1, "nc-limit", 1, 1, 4000)
    ctx.sleep(0.3)
    for st, g in ((s1, g1), (s2, g2)):
        if st == 201:
            c.sem_release(2, "nc-limit", [p["token"] for p in g["permits"]])


def stale_fence(ctx, c):
    for inst in (0, 1):
        _, st, g = c.acquire(inst, "nc-fence", 2000)
        if st == 201:
            c.release(inst, "nc-fence", g["token"])
    for inst, cand in ((0, "a"), (1, "b")):
        s = c.stream("campaign", inst, "/elections/nc-term", {"candidate": cand, "value": "v", "ttl_ms": 1000},
                     dict(kind="election", name="nc-term", ttl_ms=1000))
        if s.ok:
            ev = s.wait_for({"elected"}, 5.0)
            if ev is not None:
                c.resign(2, "nc-term", ev[3]["token"])
                s.wait_for({"resigned", "lost"}, 3.0)
        s.close()


def release_noop(ctx, c):
    _, st, g = c.acquire(0, "nc-noop", 4000)
    if st == 201:
        c.release(1, "nc-noop", g["token"])
        c.extend(2, "nc-noop", g["token"], 4000)
    probes.l1_plain(ctx, c, "nc-noop-l1", 0, 1, 2, 4000, 0.1)


def no_wake(ctx, c):
    probes.l2_once(ctx, c, "nc-wake", 0, 1, 2, wait_ms=4500, release_after_s=0.5)


def silent_loss(ctx, c):
    probes.l1_stream(ctx, c, "nc-silent", 0, 1, 2, 1500, None, 0, 1, "force")


def no_rights(ctx, c, r=None):
    o = api.Client(ctx.hist, ctx.clu, 0, None, token=cluster.OUTSIDER_TOKEN)
    _, st, js = o.call("trespass", 0, "POST", "/locks/nc-rights", {"ttl_ms": 2000}, rec=dict(what="acquire",
                                                                                          name="nc-rights"))
    if st == 201 and js:
        c.release(0, "nc-rights", js["token"])


RULES = {  # rule -> (directed schedule, the properties the checker must report)
    "double_grant": (double_grant, ["mutual_exclusion"]),
    "over_limit": (over_limit, ["semaphore_limit"]),
    "stale_fence": (stale_fence, ["fence_order", "leader_per_term"]),
    "release_noop": (release_noop, ["extend_after_release", "L1"]),
    "no_wake": (no_wake, ["L2"]),
    "silent_loss": (silent_loss, ["L3"]),
    "no_rights": (no_rights, ["rights"]),
}


def hook_present(bin_path, rule):
    data = open(bin_path, "rb").read()
    return b"REDLOCKD_TEST_BREAK" in data and rule.encode() in data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rule", choices=sorted(RULES))
    ap.add_argument("--without-hook", action="store_true")
    ap.add_argument("--out", default=os.getcwd())
    ap.add_argument("--root", default=os.path.join(HERE, "..", ".."))
    a = ap.parse_args()
    cluster.sigterm_raises()
    os.makedirs(a.out, exist_ok=True)
    bin_path = os.environ.get("REDLOCKD_BIN", "redlockd")
    fn, want = RULES[a.rule]
    if not hook_present(bin_path, a.rule):
        print(f"control {a.rule}: FAILED: {bin_path} has no REDLOCKD_TEST_BREAK={a.rule} hook", flush=True)
        return 1
    hooked = not a.without_hook
    grpc_mods = nemesis.grpc_stubs(a.root, a.out)
    env = {"REDLOCKD_TEST_BREAK": a.rule} if hooked else None
    print(f"control {a.rule}: " + (f"REDLOCKD_TEST_BREAK={a.rule}; the checker must report {want}" if hooked
                                   else "without the hook: the directed schedule must come out clean"), flush=True)
    path, problems, _, tmp = nemesis.run_one(a.rule, 0, 1, a.out, grpc_mods, bin_path=bin_path, env_extra=env,
                                        directed=lambda ctx: fn(ctx, api.Client(ctx.hist, ctx.clu, 0, grpc_mods)))
    records = history.load(path)
    res = checker.check(records)
    found = sorted({v["property"] for v in res["violations"]})
    print(report.tables(records, res, {}, a.rule, 0))
    for v in res["violations"]:
        print(report.show_violation(v))
    for p in problems:
        print(f"PROBLEM: {p}")
    nemesis.done(tmp, bool(problems))
    if problems:
        return 1
    if not hooked:
        if found:
            print(f"control {a.rule}: FAILED: the schedule alone, without the hook, gave {found}")
            return 1
        unjudged = [p for p in want if p in JUDGED and res["stats"].get(JUDGED[p], 0) == 0]
        if unjudged:
            print(f"control {a.rule}: FAILED: the schedule gave the checker nothing to judge for {unjudged}")
            return 1
        print(f"control {a.rule}: passed: the schedule is clean without the hook, {want} judged")
        return 0
    missing = [p for p in want if p not in found]
    if missing:
        print(f"control {a.rule}: FAILED: the checker did not report {missing} (it found {found or 'nothing'})")
        return 1
    print(f"control {a.rule}: passed: the checker reported {found} and exits non-zero on this history")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"control: interrupted ({e}); every process was killed", flush=True)
        sys.exit(1)
