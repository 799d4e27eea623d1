#!/usr/bin/env python3
"""A slow link: a TCP proxy that delays every chunk it forwards, each way,
by a delay drawn from a seeded generator (uniform in [lo, hi] ms, one
range towards the masters, one back), and keeps each direction of each
connection in order (a chunk leaves no sooner than the one before it). The nemesis puts one redlockd instance
behind it, in front of all five masters, for a whole run: that instance's
commands, replies and release notices (its pub/sub connections) all cross
the slow link, each connection with delays of its own, as on a congested
network; the other instances talk to the masters directly.

netem is not available on these machines (docs/safety.md); this is the
stand-in. A process of its own, so that the nemesis's threads (and their
GIL) do not add to its delays.

usage: slowlink.py --seed S --up-ms LO,HI --down-ms LO,HI --stats FILE LISTEN:UPSTREAM ...
Prints "ready" once every port listens. Every second (and at SIGTERM) it
writes one line of JSON to FILE: connections accepted, chunks forwarded
each way, their mean and largest delay in ms."""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import sys

CHUNK = 65536


class Link:
    def __init__(self, seed, up_ms, down_ms, stats_path):
        self.rng = random.Random(f"{seed}:slowlink")
        self.ranges = {"up": up_ms, "down": down_ms}
        self.stats_path = stats_path
        self.conns = 0
        self.n = dict(up=0, down=0)
        self.sum = dict(up=0.0, down=0.0)
        self.max = dict(up=0.0, down=0.0)

    def delay(self, way):
        lo, hi = self.ranges[way]
        d = self.rng.uniform(lo, hi) / 1000.0
        self.n[way] += 1
        self.sum[way] += d
        self.max[way] = max(self.max[way], d)
        return d

    def write_stats(self):
        s = dict(connections=self.conns)
        for way in ("up", "down"):
            s[way] = dict(chunks=self.n[way], range_ms=list(self.ranges[way]),
                          mean_ms=round(self.sum[way] * 1000 / self.n[way], 2) if self.n[way] else 0.0,
                          max_ms=round(self.max[way] * 1000, 2))
        tmp = self.stats_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(s) + "\n")
        os.replace(tmp, self.stats_path)

    async def pump(self, way, reader, writer):
        """One direction ("up": towards the master): each chunk read is
        written when its delay has passed, in order; EOF is passed on (a
        half-close) after the last."""
        loop = asyncio.get_running_loop()
        q = asyncio.Queue()

        async def send():
            while True:
                at, data = await q.get()
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        last = 0.0
        try:
            while True:
                data = await reader.read(CHUNK)
                at = max(loop.time() + self.delay(way), last)
                last = at
                q.put_nowait((at, data or None))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()

    async def serve(self, down_r, down_w, upstream):
        self.conns += 1
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            down_w.close()
            return
        for w in (down_w, up_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(self.pump("up", down_r, up_w), self.pump("down", up_r, down_w))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (down_w, up_w):
                try:
                    w.close()
                except OSError:
                    pass


async def main_async(a):
    link = Link(a.seed, a.up_ms, a.down_ms, a.stats)
    servers = []
    for pair in a.pairs:
        listen, upstream = (int(x) for x in pair.split(":"))
        servers.append(await asyncio.start_server(
            lambda r, w, up=upstream: link.serve(r, w, up), "127.0.0.1", listen, reuse_address=True))
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        link.write_stats()
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
    link.write_stats()


def ms_range(text):
    lo, hi = (float(x) for x in text.split(","))
    if not 0 <= lo <= hi:
        raise ValueError(text)
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", required=True)
    ap.add_argument("--up-ms", type=ms_range, required=True, help="LO,HI towards the masters")
    ap.add_argument("--down-ms", type=ms_range, required=True, help="LO,HI back")
    ap.add_argument("--stats", required=True)
    ap.add_argument("pairs", nargs="+")
    a = ap.parse_args()
    asyncio.run(main_async(a))


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    main()
