#!/usr/bin/env python3
"""A stand-in for the listeners redlockd is gaining (issue 43): a Unix socket,
and HTTPS that may ask for a client certificate. It accepts there and passes
every byte on to a real redlockd's TCP port, both ways, so `redlock` talks
HTTP (held streams too) to the real service through the new kind of
listener. Closing either side closes the other, as a listener of redlockd's
own would: a held stream's lock is released when redlock goes.

usage: cli_proxy.py LISTEN TARGET LOG [--cert F --key F [--client-ca F]]
  LISTEN  unix:/PATH (the socket file, made here) or tls:HOST:PORT (needs
          --cert and --key; --client-ca F: a client certificate signed by F
          is required, the handshake fails without one)
  TARGET  HOST:PORT of redlockd
  LOG     written as it happens: READY once listening; per connection
          CONN (with the client certificate's CN for tls:, or -) or
          HANDSHAKE_FAILED <why>; per request it carries REQ <method> <path>,
          HOST <value> and AUTH <value> (the Authorization header), so a
          test sees what redlock sent through this listener.

When the daemon serves these listeners itself, the tests point redlock at
it instead (tests/integration/cli/cli_harness.h: cli_proxy_start).
"""
import argparse
import os
import socket
import ssl
import sys
import threading

log_lock = threading.Lock()


def log(path, line):
    with log_lock, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def watch_requests(path, buf):
    """Logs the request lines and the headers of interest in buf's whole
    lines; returns what is left of an unfinished line."""
    *lines, rest = buf.split(b"\n")
    for raw in lines:
        line = raw.rstrip(b"\r").decode("latin-1")
        method = line.split(" ", 1)[0]
        if method in ("GET", "POST", "PUT", "PATCH", "DELETE") and line.endswith(" HTTP/1.1"):
            log(path, "REQ " + line[: -len(" HTTP/1.1")])
        elif line.lower().startswith("host:"):
            log(path, "HOST " + line[5:].strip())
        elif line.lower().startswith("authorization:"):
            log(path, "AUTH " + line[14:].strip())
    return rest[-8192:]


def pump(src, dst, log_path, closing):
    pending = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if log_path:
                pending = watch_requests(log_path, pending + data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        closing()


def serve(conn, args, ctx):
    peer = "-"
    if ctx:
        try:
            conn = ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log(args.log, "HANDSHAKE_FAILED " + str(e).replace("\n", " "))
            conn.close()
            return
        cert = conn.getpeercert()
        for rdn in (cert or {}).get("subject", ()):
            for k, v in rdn:
                if k == "commonName":
                    peer = v
    host, port = args.target.rsplit(":", 1)
    try:
        up = socket.create_connection((host, int(port)))
    except OSError as e:
        log(args.log, "TARGET_FAILED " + str(e))
        conn.close()
        return
    log(args.log, "CONN " + peer)
    done = threading.Event()

    def closing():
        if done.is_set():
            return
        done.set()
        for s in (conn, up):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    threading.Thread(target=pump, args=(conn, up, args.log, closing), daemon=True).start()
    pump(up, conn, None, closing)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("listen")
    p.add_argument("target")
    p.add_argument("log")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--client-ca")
    args = p.parse_args()
    ctx = None
    if args.listen.startswith("unix:"):
        path = args.listen[5:]
        if os.path.exists(path):
            os.unlink(path)
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(path)
    elif args.listen.startswith("tls:"):
        host, port = args.listen[4:].rsplit(":", 1)
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((host, int(port)))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        if args.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.client_ca)
    else:
        sys.exit("LISTEN is unix:/PATH or tls:HOST:PORT")
    lsock.listen(64)
    log(args.log, "READY")
    while True:
        conn, _ = lsock.accept()
        threading.Thread(target=serve, args=(conn, args, ctx), daemon=True).start()


if __name__ == "__main__":
    main()
