#!/usr/bin/env python3
"""The seeded nemesis (issue 40): five redis-server masters, three redlockd
instances on them, client threads issuing a random mix of every operation
(locks, held streams with repairs and heartbeats, force release, elections,
semaphores, Dapr's lock API over HTTP and gRPC, listings) while a fault
thread pauses, kills, empties, flushes and starves masters and instances;
every call, answer, stream event and fault goes to a history (JSON lines in
the output folder) that checker.py judges afterwards.

usage: nemesis.py [--seed S] [--seconds N | --minutes N] [--short]
                  [--clients K] [--out DIR] [--root SRC] [--keep]
       nemesis.py --check HISTORY.jsonl

--short (meson's form): the fixed seeds and one random seed, SHORT_SECONDS
each. --seed S replays seed S: the same operations with the same
parameters and the same faults at the same times. Every run prints its
seed. Exit status 1 on any violation, any error of the test itself, or a
redlockd that died without being killed. Env REDLOCKD_BIN: the daemon."""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checker  # noqa: E402
import cluster  # noqa: E402
import faults  # noqa: E402
import history  # noqa: E402
import report  # noqa: E402
import workload  # noqa: E402
from history import now  # noqa: E402

FIXED_SEEDS = [1, 2]
SHORT_SECONDS = 42
CLIENTS = 12
AIM_EVERY_S = 14            # the fault plan leaves a gap for a round of aimed probes this often
AIMERS = 1                  # threads of aimed L1 probes (probes.l1_aimed), a round at a time
# The slow link's delay per chunk (ms) towards the masters and back: a
# repair is in flight 10-50 ms, and a round trip stays under the master
# timeout (100 ms).
SLOW_UP_MS, SLOW_DOWN_MS = (10.0, 50.0), (5.0, 30.0)


def log(msg):
    print(msg, flush=True)


def grpc_stubs(root, out):
    """dapr_lock_pb2 and dapr_lock_pb2_grpc generated from api/dapr_lock.proto
    into out (as tests/dapr_grpc does)."""
    from grpc_tools import protoc
    d = os.path.join(out, "grpc-stubs")
    os.makedirs(d, exist_ok=True)
    api_dir = os.path.join(root, "api")
    rc = protoc.main(["protoc", f"-I{api_dir}", f"--python_out={d}", f"--grpc_python_out={d}",
                      os.path.join(api_dir, "dapr_lock.proto")])
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({rc})")
    sys.path.insert(0, d)
    import dapr_lock_pb2
    import dapr_lock_pb2_grpc
    return dapr_lock_pb2, dapr_lock_pb2_grpc


def shared_names():
    return ([("lock", n, None) for n in workload.SHARED_LOCKS]
            + [("election", n, None) for n in workload.ELECTIONS]
            + [("semaphore", n, lim) for n, lim in workload.SEMAPHORES])


def slow_link(seed):
    """The standing slow link of a run: which instance reaches the masters
    through it (from the seed) and its delays."""
    return dict(inst=random.Random(f"{seed}:slowlink").randrange(3), seed=seed,
                up_ms=SLOW_UP_MS, down_ms=SLOW_DOWN_MS)


def meta_bounds():
    c = cluster.CONF
    return dict(master_timeout_ms=c["master_timeout_ms"], drift_factor=c["drift_factor"])


def audit_problems(clu):
    """Every instance's audit log: each line JSON with its fields, and no
    token anywhere in it (reopened by SIGHUP faults along the way)."""
    out, lines = [], 0
    tokens = (cluster.CLIENT_TOKEN, cluster.OUTSIDER_TOKEN, cluster.ADMIN_TOKEN)
    for i in clu.insts:
        if not os.path.exists(i.audit):
            out.append(f"redlockd {i.i} wrote no audit log")
            continue
        text = open(i.audit, errors="replace").read()
        if any(t in text for t in tokens):
            out.append(f"redlockd {i.i}'s audit log holds a token")
        for line in text.splitlines():
            lines += 1
            try:
                ev = json.loads(line)
            except ValueError:
                out.append(f"redlockd {i.i}'s audit log has a line that is not JSON: {line[:200]!r}")
                break
            if not all(k in ev for k in ("time", "event", "client", "route", "outcome")):
                out.append(f"redlockd {i.i}'s audit line lacks a field: {line[:200]!r}")
                break
    if lines == 0:
        out.append("the audit logs are empty")
    return out


def run_one(seed, seconds, clients, out, grpc_mods, bin_path=None, env_extra=None, directed=None):
    """One run: the cluster, the clients (or directed(ctx) alone) and the
    faults of seed for seconds. Returns (path of the history, problems:
    the test's own errors and deaths, counts of faults, the folder of the
    processes' logs and data: the caller removes it with done())."""
    bin_path = bin_path or os.environ.get("REDLOCKD_BIN", "redlockd")
    path = os.path.join(out, f"nemesis-{seed}.jsonl" if directed is None else f"control-{seed}.jsonl")
    tmp = tempfile.mkdtemp(prefix=f"nemesis-{seed}-")
    problems, fcounts = [], {}
    hist = history.History(path)
    try:
        t_start = now()
        slow = None if directed is not None else slow_link(seed)
        clu = cluster.Cluster(tmp, bin_path, env_extra=env_extra, slow=slow)
        log(f"  cluster up in {now() - t_start:.1f} s: masters "
            f"{[m.port for m in clu.masters]}, redlockd {[i.port for i in clu.insts]} "
            f"(gRPC {[i.gport for i in clu.insts]})"
            + ("" if slow is None else f"; redlockd {slow['inst']} behind a slow link ({report.ms_range(slow['up_ms'])}"
               f" a chunk towards the masters, {report.ms_range(slow['down_ms'])} back)"))
        plan = [] if directed is not None else faults.plan(seed, seconds, len(clu.insts), shared_names(),
                                                          AIM_EVERY_S if slow is not None else None)
        hist.meta(seed=seed, seconds=seconds, clients=clients, conf=cluster.CONF, plan=plan,
                  wall=time.time(),   # the wall clock at t (the logs' clock: to line them up)
                  slow_link=None if slow is None else {k: slow[k] for k in ("inst", "up_ms", "down_ms")},
                  **meta_bounds())
        stop = threading.Event()
        ctx = workload.Ctx(hist, clu, seed, grpc_mods, stop)
        t0 = now()
        ctx.plan, ctx.t0, ctx.end = plan, t0, t0 + seconds
        nem = faults.Nemesis(hist, clu, plan, t0, stop, log=log)
        nem.start()
        cstats = {}
        if directed is not None:
            directed(ctx)
        else:
            threads = [threading.Thread(target=workload.client, args=(ctx, cid, cstats), daemon=True)
                       for cid in range(clients)]
            threads += [threading.Thread(target=workload.aimer, args=(ctx, aid, clients + aid, cstats),
                                         daemon=True, name=f"aimer-{aid}") for aid in range(AIMERS)]
            for t in threads:
                t.start()
            while now() < t0 + seconds and not stop.is_set():
                time.sleep(0.25)
                if any(i.died() for i in clu.insts):
                    break
        stop.set()
        nem.join(30)
        if directed is None:
            for t in threads:
                t.join(max(0.1, t0 + seconds + 40 - now()))
                if t.is_alive():
                    problems.append(f"a client thread did not stop ({t.name})")
        problems += nem.errors + cstats.get("client_errors", [])
        for i in clu.insts:
            d = i.died()
            if d:
                problems.append(f"redlockd {i.i} exited by itself with status {d[0]}; its log ends:\n{d[1]}")
        for m in clu.masters:
            if m.proc.poll() is not None:
                problems.append(f"redis-server {m.i} (port {m.port}) exited by itself: {m.proc.returncode}")
        problems += audit_problems(clu)
        if clu.link is not None:
            if clu.link.died():
                problems.append("the slow link exited by itself: "
                                + open(clu.link.log, errors="replace").read()[-1500:])
            hist.meta(slow_link_stats=clu.link.stats())
        fcounts = dict(nem.counts)
        for k, v in nem.skipped.items():
            fcounts[k + " (skipped)"] = v
    except BaseException:
        log(f"  processes' logs and data kept in {tmp}")
        raise
    finally:
        hist.close()
        cluster.stop_all()
    return path, problems, fcounts, tmp


def done(tmp, keep):
    """The processes' logs and data: kept when asked or when the run failed."""
    if keep:
        log(f"  processes' logs and data kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def judge(path, seed, seconds, fcounts, problems):
    records = history.load(path)
    res = checker.check(records)
    log(report.tables(records, res, fcounts, seed, seconds))
    for v in res["violations"][:30]:
        log(report.show_violation(v))
    if len(res["violations"]) > 30:
        log(f"... and {len(res['violations']) - 30} more violations")
    for p in problems:
        log(f"PROBLEM: {p}")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--minutes", type=float)
    ap.add_argument("--short", action="store_true")
    ap.add_argument("--clients", type=int, default=CLIENTS)
    ap.add_argument("--out", default=os.getcwd())
    ap.add_argument("--root", default=os.path.join(HERE, "..", ".."))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--check")
    a = ap.parse_args()
    if a.check:
        res = judge(a.check, "?", 0, {}, [])
        return 1 if res["violations"] else 0
    cluster.sigterm_raises()
    cluster.cgroup_sweep()
    os.makedirs(a.out, exist_ok=True)
    seconds = a.minutes * 60 if a.minutes else a.seconds or SHORT_SECONDS
    if a.seed is not None:
        seeds = [a.seed]
    elif a.short:
        seeds = FIXED_SEEDS + [random.SystemRandom().randrange(1, 1 << 31)]
    else:
        seeds = [random.SystemRandom().randrange(1, 1 << 31)]
    grpc_mods = grpc_stubs(a.root, a.out)
    t_all = time.monotonic()
    total, bad = report.Totals(), False
    for seed in seeds:
        log(f"nemesis: seed {seed}, {seconds:.0f} s, {a.clients} clients "
            f"(replay: nemesis.py --seed {seed} --seconds {seconds:.0f})")
        path, problems, fcounts, tmp = run_one(seed, seconds, a.clients, a.out, grpc_mods)
        res = judge(path, seed, seconds, fcounts, problems)
        total.add(history.load(path), res, fcounts)
        done(tmp, a.keep or res["violations"] or problems)
        if res["violations"] or problems:
            bad = True
            log(f"nemesis: seed {seed} FAILED ({len(res['violations'])} violations, "
                f"{len(problems)} problems); history {path}")
        else:
            log(f"nemesis: seed {seed} passed; history {path}")
    if len(seeds) > 1:
        log(total.table(seeds, seconds))
    for miss in total.missing():
        bad = True
        log(f"PROBLEM: no operation of kind {miss} was run: the mix lost one")
    log(f"nemesis: {len(seeds)} run(s) in {time.monotonic() - t_all:.0f} s, seeds {seeds}: "
        + ("FAILED" if bad else "passed"))
    with open(os.path.join(a.out, "nemesis-table.md"), "w") as f:
        f.write(total.table(seeds, seconds) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"nemesis: interrupted ({e}); every process was killed", flush=True)
        sys.exit(1)
