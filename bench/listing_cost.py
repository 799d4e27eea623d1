#!/usr/bin/env python3
"""listing_cost.py - what a listing (GET /locks, issue 32) costs, and what it
does to the acquires served meanwhile.

    python3 bench/listing_cost.py build/src/redlockd [--locks 10000] [--seconds 8] [--clients 2]

Starts five redis-server masters and redlockd, takes --locks locks (held for
the whole run), then, for each page size (100 and 1,000):
  * walks the listing alone, page after page to next == null, several times:
    the time of a walk, per 1,000 locks listed, and per page;
  * runs --clients clients doing acquire + release of names of their own for
    --seconds, first with nothing else, then while another client walks the
    listing again and again: the acquires' p50, p99 and max, and how many.
It is a measurement, not a test: compare the two runs of one invocation
(this machine's absolute figures move by 30% from run to run).
"""
import argparse, contextlib, http.client, json, multiprocessing, os, statistics, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_local import redis_server  # noqa: E402


def free_port():
    import socket
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Client:
    """One keep-alive connection."""

    def __init__(self, port):
        self.c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)

    def req(self, method, path, body=None, headers=None):
        self.c.request(method, path, body=body, headers=headers or {})
        r = self.c.getresponse()
        return r.status, r.read()


def fill(port, n, threads=4):
    def part(k):
        c = Client(port)
        for i in range(k, n, threads):
            st, _ = c.req('POST', f'/locks/held-{i:05d}', '{"ttl_ms":600000}')
            if st != 201:
                raise SystemExit(f'acquire held-{i:05d}: {st}')
    ts = [threading.Thread(target=part, args=(k,)) for k in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]


def walk(c, limit):
    """One walk: (seconds, names, pages)."""
    t0, cur, names, pages = time.perf_counter(), None, 0, 0
    while True:
        st, body = c.req('GET', f'/locks?limit={limit}' + (f'&cursor={cur}' if cur else ''))
        if st != 200:
            raise SystemExit(f'GET /locks: {st} {body[:200]!r}')
        d = json.loads(body)
        names += len(d['locks'])
        pages += 1
        cur = d['next']
        if not cur:
            return time.perf_counter() - t0, names, pages


def walker(port, limit, stop, walks):
    w = Client(port)
    while not stop.is_set():
        walk(w, limit)
        with walks.get_lock():
            walks.value += 1


def acquirers(port, clients, seconds, stop_walk=None):
    lat, lock = [], threading.Lock()
    end = time.monotonic() + seconds

    def run(k):
        c, mine, i = Client(port), [], 0
        while time.monotonic() < end:
            name = f'work-{k}-{i % 50}'
            i += 1
            t0 = time.perf_counter()
            st, body = c.req('POST', f'/locks/{name}', '{"ttl_ms":10000}')
            mine.append(time.perf_counter() - t0)
            if st != 201:
                raise SystemExit(f'acquire {name}: {st} {body[:200]!r}')
            tok = json.loads(body)['token']
            c.req('DELETE', f'/locks/{name}', headers={'Lock-Token': tok})
        with lock:
            lat.extend(mine)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    if stop_walk:
        stop_walk.set()
    lat.sort()
    return lat


def pct(v, p):
    return v[min(len(v) - 1, int(len(v) * p))] * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('redlockd')
    ap.add_argument('--locks', type=int, default=10000)
    ap.add_argument('--seconds', type=float, default=8)
    ap.add_argument('--clients', type=int, default=2)
    ap.add_argument('--walks', type=int, default=5)
    a = ap.parse_args()
    with contextlib.ExitStack() as stack:
        ports = [stack.enter_context(redis_server()) for _ in range(5)]
        http_port = free_port()
        rl = subprocess.Popen([a.redlockd, '--listen', f'127.0.0.1:{http_port}', '--masters',
                               ','.join(f'127.0.0.1:{p}' for p in ports), '--log-level', 'warn'],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(lambda: (rl.terminate(), rl.wait()))
        for _ in range(200):
            try:
                if Client(http_port).req('GET', '/readyz')[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        t0 = time.perf_counter()
        fill(http_port, a.locks)
        print(f'{a.locks} locks taken in {time.perf_counter() - t0:.1f} s')
        for limit in (100, 1000):
            c = Client(http_port)
            runs = [walk(c, limit) for _ in range(a.walks)]
            secs = statistics.median(r[0] for r in runs)
            names, pages = runs[0][1], runs[0][2]
            if any(r[1] != a.locks for r in runs):
                raise SystemExit(f'a walk listed {[r[1] for r in runs]} of {a.locks}')
            print(f'limit {limit}: a walk of {names} locks in {pages} pages: {secs * 1000:.0f} ms median of '
                  f'{a.walks} ({secs * 1000 / (names / 1000):.1f} ms per 1,000 locks, '
                  f'{secs * 1000 / pages:.1f} ms per page)')
            alone = acquirers(http_port, a.clients, a.seconds)
            # The walker in a process of its own: its JSON parsing must not
            # hold this process's lock on the interpreter while acquires are
            # timed.
            stop, walks = multiprocessing.Event(), multiprocessing.Value('i', 0)
            wp = multiprocessing.Process(target=walker, args=(http_port, limit, stop, walks))
            wp.start()
            during = acquirers(http_port, a.clients, a.seconds, stop)
            wp.join()
            walks = [walks.value]
            for what, v in (('alone', alone), ('while listing', during)):
                print(f'  acquires {what:14s}: {len(v):6d}, p50 {pct(v, .5):6.2f} ms, p99 {pct(v, .99):6.2f} ms, '
                      f'max {v[-1] * 1000:6.1f} ms')
            print(f'  ({walks[0]} walks meanwhile; p99 while listing / alone: '
                  f'{pct(during, .99) / pct(alone, .99):.2f})')


if __name__ == '__main__':
    main()
