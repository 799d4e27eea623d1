#!/usr/bin/env python3
"""Races where features meet (issue 40's review), each made to happen
every time, with real redis-server masters and real redlockd instances:

1. A held stream's renewal is a repair (one master holds another value),
   and it reaches the masters just after its token is released through
   another instance (or the name is forced there); its answer is read
   before the release's notices. The release (or the force) must win:
   the name is free again long before the repaired copy would expire.
2. An acquire on masters over maxmemory, whose name's queue holds an
   expired ticket, is refused there (OOM) and writes nothing.
(The third finding, a command answered NOSCRIPT that overtook the one
sent after it, is tested in-process on the pool itself:
tests/integration/masters/test_pool_order.c.)

Usage: test_races.py (REDLOCKD_BIN names the daemon)."""
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from races_harness import (DATA, DOWN, SUB, UP, Daemon, Gate, Master, check, fail,  # noqa: E402
                           failures, kill_all, log, wait_for)

ADMIN = "admin-token-of-the-race-tests"
SEP = "\x1f#"


def holders(masters, key, value):
    """How many masters hold value at key."""
    n = 0
    for m in masters:
        try:
            n += m.call("GET", key) == value
        except (OSError, RuntimeError):
            pass
    return n


def renewal_after_release(tmp, masters, force):
    what = "force" if force else "release"
    name = f"race-{what}"
    key = "lock:" + name
    ttl_ms = 9000
    gates = [Gate(m.port) for m in masters]
    y = Daemon(tmp, f"y-{what}", [m.port for m in masters], ["--admin-token-file", os.path.join(tmp, "admin")])
    y.wait_ready(5)
    # X reaches the masters through the gates; a long master timeout, so
    # that the bytes the gates hold make no master late.
    x = Daemon(tmp, f"x-{what}", [g.port for g in gates], ["--master-timeout-ms", "30000"])
    x.wait_ready(5)
    try:
        # Another value on one master: the stream's renewals are repairs.
        masters[4].call("SET", key, "someone-else", "PX", 60000)
        st = x.stream(f"/locks/{name}", {"hold": True, "ttl_ms": ttl_ms})
        ev = st.until("acquired", 10)
        if not ev:
            return
        # The first renewal finds the other value, so the next one is a
        # repair (an acquire is answered on a majority's yes, before the
        # fifth master says it holds another value).
        if not st.until("renewed", ttl_ms / 1000.0):
            return
        renewed_at = time.monotonic()
        token = ev["token"]
        check(holders(masters, key, token) == 4, f"{what}: the grant holds four masters")
        # Hold X's commands (its next renewal, a repair) and the notices
        # coming to X.
        for g in gates:
            g.close(DATA, UP)
            g.close(SUB, DOWN)
        if not wait_for(lambda: all(b"EVAL" in g.holding(DATA, UP) for g in gates[:4]),
                        ttl_ms / 1000.0 + 5, f"{what}: X's renewal at the gates"):
            return
        if force:
            a = y.req("DELETE", f"/locks/{name}?force=true", headers=[("Authorization", f"Bearer {ADMIN}")])
        else:
            a = y.req("DELETE", f"/locks/{name}", headers=[("Lock-Token", token)])
        check(a.status == 204, f"{what} through Y: {a.status} {a.body!r}")
        check(holders(masters, key, token) == 0, f"{what}: the token is gone from every master")
        # The renewal reaches the masters after the release, late in the
        # lease (so that what it takes back would outlive the lease by
        # most of a ttl); X reads its five answers before the release's
        # notices, in one turn of its loop (stopped while both arrive, it
        # reads its command connections first).
        wait_for(lambda: time.monotonic() >= renewed_at + 0.75 * ttl_ms / 1000.0, ttl_ms / 1000.0,
                 f"{what}: three quarters of the lease")
        for g in gates:
            g.close(DATA, DOWN)
            g.open(DATA, UP)
        wait_for(lambda: holders(masters, key, token) >= 3 and all(g.holding(DATA, DOWN) for g in gates), 10,
                 f"{what}: the repair on the masters")
        repaired_at = time.monotonic()
        retaken = holders(masters, key, token)
        check(retaken >= 3, f"{what}: the race did not happen: the repair took {retaken} masters back")
        x.pause()
        try:
            for g in gates:
                g.open(DATA, DOWN)
                g.open(SUB, DOWN)
            wait_for(lambda: not any(g.holding(k, DOWN) for g in gates for k in (DATA, SUB)), 5,
                     f"{what}: the answers and notices on their way to X")
            time.sleep(0.1)
        finally:
            x.resume()
        end = st.until("lost", 10)   # the repair took nothing that votes: the lease is lost
        log(f"{what}: the stream ended {end}")
        st.close()
        # The release (or force) wins: the name is free again, through Y,
        # while the repaired copy would still live.
        deadline = repaired_at + ttl_ms / 1000.0 - 1.5
        got = None
        while time.monotonic() < deadline:
            a = y.req("POST", f"/locks/{name}", {"ttl_ms": 1000})
            if a.status == 201:
                got = time.monotonic()
                break
            time.sleep(0.05)
        log(f"{what}: the repair took {retaken} masters back; acquired through Y "
            + (f"{(got - repaired_at) * 1000:.0f} ms after the repair" if got else "never before it expired"))
        check(got is not None, f"{what}: the name stayed taken by the repaired copy of the released grant "
              f"({holders(masters, key, token)} masters still hold its token)")
    finally:
        for g in gates:
            g.stop()
        x.stop()
        y.stop()


def oom_behind_expired_tickets(tmp, masters):
    name = "race-oom"
    key = "lock:" + name
    d = Daemon(tmp, "oom", [m.port for m in masters])
    d.wait_ready(5)
    try:
        for m in masters[:3]:
            m.call("ZADD", key + SEP + "queue", 1, "an-expired-ticket")
            m.call("ZADD", key + SEP + "qdl", 1, "an-expired-ticket")
            m.call("CONFIG", "SET", "maxmemory", 1)
        a = d.req("POST", f"/locks/{name}", {"ttl_ms": 30000})
        written = sum(m.call("EXISTS", key) for m in masters[:3])
        for m in masters[:3]:
            m.call("CONFIG", "SET", "maxmemory", 0)
        log(f"oom: acquire on three masters over maxmemory: {a.status}; lock written on {written} of them")
        check(a.status == 503, f"oom: acquire over maxmemory on three masters answered {a.status} {a.body!r}")
        check(written == 0, f"oom: the lock was written on {written} masters over maxmemory")
        metrics = d.req("GET", "/metrics").body.decode()
        refusing = [m for m in masters[:3]
                    if f'redlockd_master_refusals_total{{master="127.0.0.1:{m.port}"}} 0' in metrics]
        check(not refusing, f"oom: masters over maxmemory counted no refusal: {[m.port for m in refusing]}")
        a = d.req("POST", f"/locks/{name}", {"ttl_ms": 1000})
        check(a.status == 201, f"oom: after maxmemory was restored: {a.status} {a.body!r}")
    finally:
        for m in masters[:3]:
            m.call("CONFIG", "SET", "maxmemory", 0)
        d.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="redlockd-races-")
    with open(os.path.join(tmp, "admin"), "w") as f:
        f.write(ADMIN + "\n")
    masters = []
    try:
        masters = [Master(tmp, i) for i in range(5)]
        for force in (False, True):
            renewal_after_release(tmp, masters, force)
        oom_behind_expired_tickets(tmp, masters)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        fail(f"the test itself failed: {e!r}")
    finally:
        kill_all()
        if not failures:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s); logs in {tmp}", flush=True)
        for f_ in failures:
            print("  " + f_, flush=True)
        return 1
    print("all race tests passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
