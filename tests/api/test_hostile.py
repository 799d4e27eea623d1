#!/usr/bin/env python3
"""Hostile input against the running service (issue 27).

Starts five redis-server masters on free loopback ports and redlockd over
them (a 60 s request timeout, so that "answered" and "left waiting for the
request timeout" differ: every read here gives up after 20 s), and sends
what a careless or hostile client sends:

1. strict JSON on every body-taking route: raw control bytes inside strings,
   duplicate keys, integers written as fractions, exponents or out of range,
   invalid UTF-8; each is 400 with a JSON body that names the field, and
   nothing changes on any master;
2. every integer in every answer and event is an integer literal (decoded
   with a parse_float that fails);
3. framing: Transfer-Encoding other than chunked, a chunk over the body
   limit, an obs-folded Content-Length, HTTP/1.1 without Host, garbage
   request lines;
4. a 503 names the true cause, as /readyz gives it (masters refusing the
   connection; masters asking for a password that redlockd does not send);
5. at SIGTERM a waiting acquire (lock or semaphore) answers 503
   shutting_down;
6. a semaphore's 409 locked carries the holder's remaining time.

After every hostile case of 1 and 3 each master's keys and values (DUMP,
TTL ignored) are compared with what they were before the request; whatever
a case changed is put back, so the cases do not disturb one another.

usage: test_hostile.py [SECTION...]   (env REDLOCKD_BIN: the daemon;
SECTION: 1 to 6, all by default)
"""
import os
import shutil
import signal
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_harness import Daemon, Master, children, log, order, record, results  # noqa: E402
from hostile_json import section_integers, section_strict_json  # noqa: E402
from hostile_wire import section_causes, section_framing, section_retry_after, section_shutdown  # noqa: E402


def main():
    wanted = set(sys.argv[1:]) or {"1", "2", "3", "4", "5", "6"}
    tmp = tempfile.mkdtemp(prefix="redlockd-hostile-")
    ok = False
    try:
        masters = [Master(tmp, f"m{i}") for i in range(5)]
        D = Daemon(tmp, "D", [m.port for m in masters])
        D.wait_ready(5)
        log(f"masters {[m.port for m in masters]}, redlockd on {D.port}")
        for sec, name, fn in [("1", "strict JSON", lambda: section_strict_json(D, masters)),
                              ("3", "framing", lambda: section_framing(D, masters)),
                              ("2", "integer literals", lambda: section_integers(D)),
                              ("6", "semaphore retry_after_ms", lambda: section_retry_after(D)),
                              ("4", "true causes in 503", lambda: section_causes(tmp)),
                              ("5", "waiters at SIGTERM", lambda: section_shutdown(tmp, D, masters))]:
            if sec not in wanted:
                continue
            log(f"== {sec}: {name}")
            try:
                fn()
            except Exception:  # noqa: BLE001
                record(f"{sec} {name}: the section itself", [traceback.format_exc()])
        probs = D.stop()
        if probs:
            record("redlockd D exits 0 at SIGTERM, no sanitizer report", probs)
        ok = all(not p for p in results.values())
    finally:
        for p in children:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"logs kept in {tmp}")
    failed = [c for c in order if results[c]]
    print("\n==== hostile input: %d cases, %d failed ====" % (len(order), len(failed)))
    for c in order:
        print(("PASS  " if not results[c] else "FAIL  ") + c)
    sys.exit(0 if not failed and order else 1)


if __name__ == "__main__":
    main()
