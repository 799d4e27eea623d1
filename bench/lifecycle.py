#!/usr/bin/env python3
"""What waiting, release notices and idle connections cost, measured against
real masters and the real binary (loopback only, bounded, cleans up).

  bench/lifecycle.py [--bin build/src/redlockd] [--waiters 500] [--instances 50] [--holds 1000]

Prints one line per measurement:
  - script calls per second on the masters while N acquires wait on a name
    held for a minute;
  - bytes each master sends, Redis CPU and redlockd CPU per acquire+release
    cycle, with 1 and with 1 + --instances redlockd on the same masters;
  - redlockd's RSS idle, with 1,000 idle connections, and after they close;
  - redlockd's RSS and CPU with --holds held streams renewing (ttl 3 s).
Run it with the binary of another commit (--bin) to compare.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/src/redlockd")
ap.add_argument("--waiters", type=int, default=500)
ap.add_argument("--instances", type=int, default=50)
ap.add_argument("--cycles", type=int, default=2000)
ap.add_argument("--holds", type=int, default=1000)
args = ap.parse_args()

procs = []
tmp = tempfile.mkdtemp(prefix="redlockd-lifecycle-")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(argv, log):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    procs.append(p)
    return p


def redis(port, *cmd):
    return subprocess.run(["redis-cli", "-p", str(port)] + list(cmd), capture_output=True, text=True).stdout


def info(port, section):
    out = {}
    for line in redis(port, "INFO", section).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def http(port, method, path, body=None, headers=None, timeout=30):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body.encode() if body else None,
                                 method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def redlockd(masters, extra=()):
    port = free_port()
    p = start([args.bin, "--listen", f"127.0.0.1:{port}", "--masters", masters, "--log-level", "error",
               "--master-timeout-ms", "1000", *extra], os.path.join(tmp, f"redlockd-{port}.log"))
    for _ in range(200):
        try:
            if http(port, "GET", "/readyz")[0] == 200:
                return p, port
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"redlockd on {port} did not become ready")


try:
    ports = [free_port() for _ in range(5)]
    for i, p in enumerate(ports):
        d = os.path.join(tmp, f"m{i}")
        os.mkdir(d)
        start(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--dir", d, "--save", "",
               "--appendonly", "no"], os.path.join(d, "log"))
    for p in ports:
        for _ in range(100):
            if redis(p, "PING").strip() == "PONG":
                break
            time.sleep(0.05)
    masters = ",".join(f"127.0.0.1:{p}" for p in ports)
    d, port = redlockd(masters)

    # 1. Waiters on a name held for a minute.
    st, body = http(port, "POST", "/locks/held", '{"ttl_ms":60000}')
    assert st == 201, body
    socks = []
    for _ in range(args.waiters):
        s = socket.create_connection(("127.0.0.1", port))
        b = '{"wait_ms":20000}'
        s.sendall(f"POST /locks/held HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(b)}\r\n\r\n{b}".encode())
        socks.append(s)
    time.sleep(1.5)

    def calls():
        n = 0
        for p in ports:
            for k, v in info(p, "commandstats").items():
                if k in ("cmdstat_evalsha", "cmdstat_eval"):
                    n += int(v.split("calls=")[1].split(",")[0])
        return n
    c0, t0, cpu0 = calls(), time.time(), cpu_s(d.pid)
    time.sleep(3)
    c1, t1, cpu1 = calls(), time.time(), cpu_s(d.pid)
    print(f"{args.waiters} waiters: {(c1 - c0) / (t1 - t0):.0f} script calls/s over 5 masters, "
          f"redlockd {100 * (cpu1 - cpu0) / (t1 - t0):.1f}% of a core")
    for s in socks:
        s.close()
    d.kill()   # each measurement gets a fresh process
    d.wait()
    d, port = redlockd(masters)

    # 2. Releases with idle instances on the same masters.
    def cycles(n):
        out0 = sum(int(info(p, "stats")["total_net_output_bytes"]) for p in ports)
        rcpu0 = sum(float(info(p, "cpu")["used_cpu_sys"]) + float(info(p, "cpu")["used_cpu_user"]) for p in ports)
        dcpu0 = cpu_s(d.pid)
        for _ in range(n):
            st, body = http(port, "POST", "/locks/cyc")
            tok = json.loads(body)["token"]
            http(port, "DELETE", "/locks/cyc", headers={"Lock-Token": tok})
        out1 = sum(int(info(p, "stats")["total_net_output_bytes"]) for p in ports)
        rcpu1 = sum(float(info(p, "cpu")["used_cpu_sys"]) + float(info(p, "cpu")["used_cpu_user"]) for p in ports)
        dcpu1 = cpu_s(d.pid)
        return (out1 - out0) / n / len(ports), (rcpu1 - rcpu0) / n * 1e6, (dcpu1 - dcpu0) / n * 1e6
    cycles(200)   # warm up
    b, r, c = cycles(args.cycles)
    print(f"1 instance: {b:.0f} bytes sent per master, Redis CPU {r:.0f} us (all 5), "
          f"redlockd CPU {c:.0f} us per acquire+release")
    idle = [redlockd(masters) for _ in range(args.instances)]
    time.sleep(1)
    b, r, c = cycles(args.cycles)
    print(f"{1 + args.instances} instances: {b:.0f} bytes sent per master, Redis CPU {r:.0f} us (all 5), "
          f"redlockd CPU {c:.0f} us per acquire+release")
    for p, _ in idle:
        p.send_signal(signal.SIGTERM)
    for p, _ in idle:
        p.wait(timeout=20)

    # 3. Idle connections.
    d.kill()
    d.wait()
    d, port = redlockd(masters)
    base = rss_kb(d.pid)
    conns = []
    for _ in range(1000):
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            conns.append(s)
        except OSError:
            break
    time.sleep(1)
    full = rss_kb(d.pid)
    for s in conns:
        s.close()
    time.sleep(1.5)
    print(f"RSS: {base} KiB idle, {full} KiB with {len(conns)} idle connections "
          f"({(full - base) / max(1, len(conns)):.1f} KiB each), {rss_kb(d.pid)} KiB after they closed")

    # 4. Held streams: --holds streams on distinct names, each renewed
    # every third of its ttl, against the same number of idle connections
    # measured above (the connection is most of a stream's cost).
    d.kill()
    d.wait()
    d, port = redlockd(masters, ("--max-holds", str(args.holds), "--max-connections", str(args.holds + 64),
                                 "--max-connections-per-ip", str(args.holds + 64)))
    time.sleep(0.5)
    base = rss_kb(d.pid)
    streams = []
    body = b'{"hold":true,"ttl_ms":3000}'
    for i in range(args.holds):
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /locks/bench-hold-%d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (i, len(body), body))
            streams.append(s)
        except OSError:
            break
    granted = 0
    for s in streams:
        s.settimeout(5)
        try:
            granted += b" 201 " in s.recv(4096)
        except OSError:
            pass
    time.sleep(3.5)   # a full ttl: every stream renewed at least twice
    full = rss_kb(d.pid)
    c0 = cpu_s(d.pid)
    time.sleep(5)
    per_s = (cpu_s(d.pid) - c0) / 5
    for s in streams:
        s.close()
    time.sleep(1.5)
    print(f"held streams: {granted} of {len(streams)} granted; RSS {base} KiB before, {full} KiB with them "
          f"({(full - base) / max(1, granted):.1f} KiB each, connection included), {rss_kb(d.pid)} KiB "
          f"after they closed; redlockd CPU {per_s * 100:.1f}% of a core renewing them every second")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
