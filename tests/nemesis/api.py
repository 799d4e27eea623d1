"""Every call the nemesis makes, each recorded in the history as it is sent
and as it is answered (history.py): redlockd's HTTP routes, Dapr's lock API
over HTTP and gRPC, and held streams whose events a thread of their own
reads and stamps with the time they were read.

A Client belongs to one client thread (its gRPC channels too); a Stream's
reader thread touches only its own socket and the shared history."""
import json
import socket
import threading
import urllib.parse

import cluster
import httpraw
from history import now

ERRORS = (OSError, TimeoutError, EOFError, ValueError)
DAPR_STORE = "lockstore"
BIG = 1e6   # a stream reader's read timeout: it is woken by shutdown()


def q(name):
    return urllib.parse.quote(name, safe="")


def dapr_name(resource):
    """The native lock of a Dapr resource (keyPrefix name, no app id)."""
    return f"{DAPR_STORE}||{resource}"


def _json(a):
    try:
        return json.loads(a.body.decode()) if a.body else None
    except ValueError:
        return None


class Client:
    def __init__(self, hist, clu, cid, grpc_mods=None, token=cluster.CLIENT_TOKEN):
        self.hist, self.clu, self.cid = hist, clu, cid
        self.token = token
        self.grpc_mods = grpc_mods
        self.channels = {}

    def port(self, inst):
        return self.clu.insts[inst].port

    # ---- plain HTTP calls ----

    def call(self, op, inst, method, path, body=None, headers=(), timeout=5.0, rec=None, pick=None):
        """One request on its own connection. Returns (id, status, json);
        status None when no answer came (the call's effect is unknown)."""
        hs = list(headers)
        if not any(k == "Authorization" for k, _ in hs):
            hs.append(("Authorization", f"Bearer {self.token}"))
        data = None
        if body is not None:
            data = json.dumps(body)
            hs.append(("Content-Type", "application/json"))
        i = self.hist.invoke(self.cid, op, inst=inst, **(rec or {}))
        try:
            a = httpraw.request(self.port(inst), method, path, hs, data, timeout=timeout)
        except ERRORS as e:
            self.hist.complete(i, None, error=type(e).__name__)
            return i, None, None
        js = _json(a)
        out = {}
        if isinstance(js, dict) and "error" in js:
            out["error"] = js["error"]
            if "reason" in js:
                out["reason"] = js["reason"]
            if a.status >= 500 and js.get("message"):
                out["message"] = str(js["message"])[:300]
        if pick and a.status < 300 and js is not None:
            out.update(pick(js))
        self.hist.complete(i, a.status, **out)
        return i, a.status, js

    def acquire(self, inst, name, ttl_ms, wait_ms=0, **tags):
        body = {"ttl_ms": ttl_ms}
        if wait_ms:
            body["wait_ms"] = wait_ms
        return self.call("acquire", inst, "POST", f"/locks/{q(name)}", body,
                         timeout=5.0 + wait_ms / 1000.0,
                         rec=dict(kind="lock", name=name, ttl_ms=ttl_ms, wait_ms=wait_ms, **tags),
                         pick=lambda j: dict(token=j.get("token"), fence=j.get("fence"),
                                             validity_ms=j.get("validity_ms")))

    def extend(self, inst, name, token, ttl_ms, **tags):
        return self.call("extend", inst, "PATCH", f"/locks/{q(name)}", {"ttl_ms": ttl_ms},
                         headers=[("Lock-Token", token)],
                         rec=dict(kind="lock", name=name, token=token, ttl_ms=ttl_ms, **tags),
                         pick=lambda j: dict(fence=j.get("fence"), validity_ms=j.get("validity_ms")))

    def release(self, inst, name, token, **tags):
        return self.call("release", inst, "DELETE", f"/locks/{q(name)}", headers=[("Lock-Token", token)],
                         rec=dict(kind="lock", name=name, token=token, **tags))

    def inspect(self, inst, name, **tags):
        return self.call("inspect", inst, "GET", f"/locks/{q(name)}",
                         rec=dict(kind="lock", name=name, **tags),
                         pick=lambda j: dict(held=j.get("held"), fence=j.get("fence"),
                                             validity_ms=j.get("validity_ms")))

    def force(self, inst, kind, name, **tags):
        return self.call("force", inst, "DELETE", f"/{kind}s/{q(name)}?force=true",
                         headers=[("Authorization", f"Bearer {cluster.ADMIN_TOKEN}")],
                         rec=dict(kind=kind, name=name, **tags))

    def heartbeat(self, inst, kind, name, token):
        return self.call("heartbeat", inst, "PUT", f"/{kind}s/{q(name)}/heartbeat",
                         headers=[("Lock-Token", token)], rec=dict(kind=kind, name=name, token=token))

    # ---- elections ----

    def resign(self, inst, name, token):
        return self.call("resign", inst, "DELETE", f"/elections/{q(name)}", headers=[("Lock-Token", token)],
                         rec=dict(kind="election", name=name, token=token))

    def proclaim(self, inst, name, token, value):
        return self.call("proclaim", inst, "PUT", f"/elections/{q(name)}/value", {"value": value},
                         headers=[("Lock-Token", token)],
                         rec=dict(kind="election", name=name, token=token, value=value))

    def election_get(self, inst, name):
        return self.call("election_get", inst, "GET", f"/elections/{q(name)}",
                         rec=dict(kind="election", name=name),
                         pick=lambda j: dict(leader=j.get("leader"), term=j.get("term"),
                                             validity_ms=j.get("validity_ms")))

    # ---- semaphores ----

    def sem_acquire(self, inst, name, limit, permits, ttl_ms, wait_ms=0):
        body = {"limit": limit, "permits": permits, "ttl_ms": ttl_ms}
        if wait_ms:
            body["wait_ms"] = wait_ms
        return self.call("sem_acquire", inst, "POST", f"/semaphores/{q(name)}", body,
                         timeout=5.0 + wait_ms / 1000.0,
                         rec=dict(kind="semaphore", name=name, limit=limit, permits=permits,
                                  ttl_ms=ttl_ms, wait_ms=wait_ms),
                         pick=lambda j: dict(granted=_permits(j), validity_ms=j.get("validity_ms")))

    def sem_extend(self, inst, name, tokens, ttl_ms):
        return self.call("sem_extend", inst, "PATCH", f"/semaphores/{q(name)}", {"ttl_ms": ttl_ms},
                         headers=[("Lock-Token", ",".join(tokens))],
                         rec=dict(kind="semaphore", name=name, tokens=tokens, ttl_ms=ttl_ms),
                         pick=lambda j: dict(granted=_permits(j), validity_ms=j.get("validity_ms")))

    def sem_release(self, inst, name, tokens):
        return self.call("sem_release", inst, "DELETE", f"/semaphores/{q(name)}",
                         headers=[("Lock-Token", ",".join(tokens))],
                         rec=dict(kind="semaphore", name=name, tokens=tokens))

    def sem_get(self, inst, name, limit):
        return self.call("sem_get", inst, "GET", f"/semaphores/{q(name)}?limit={limit}",
                         rec=dict(kind="semaphore", name=name),
                         pick=lambda j: dict(holders=len(j.get("holders") or []), limit=j.get("limit")))

    # ---- listings ----

    def listing(self, inst, route, prefix, limit, cursor):
        qs = {"limit": str(limit)}
        if prefix:
            qs["prefix"] = prefix
        if cursor:
            qs["cursor"] = cursor
        path = f"/{route}?" + urllib.parse.urlencode(qs, quote_via=urllib.parse.quote)
        return self.call("list", inst, "GET", path,
                         rec=dict(route=route, prefix=prefix, limit=limit, cursor=cursor),
                         pick=lambda j: dict(entries=len(j.get(route) or []), next=j.get("next")))

    # ---- Dapr's lock API ----

    def dapr_lock(self, inst, via, resource, owner, expiry_s, **tags):
        rec = dict(kind="lock", name=dapr_name(resource), resource=resource, owner=owner,
                   expiry_s=expiry_s, via=via, **tags)
        if via == "http":
            return self.call("dapr_lock", inst, "POST", f"/v1.0-alpha1/lock/{DAPR_STORE}",
                             {"resourceId": resource, "lockOwner": owner, "expiryInSeconds": expiry_s},
                             rec=rec, pick=lambda j: dict(success=j.get("success")))
        pb, _ = self.grpc_mods
        return self._grpc("dapr_lock", inst, rec, lambda s: s.TryLockAlpha1(pb.TryLockRequest(
            store_name=DAPR_STORE, resource_id=resource, lock_owner=owner, expiry_in_seconds=expiry_s),
            timeout=5, metadata=[("dapr-api-token", self.token)]), lambda r: dict(success=r.success))

    def dapr_unlock(self, inst, via, resource, owner):
        rec = dict(kind="lock", name=dapr_name(resource), resource=resource, owner=owner, via=via)
        if via == "http":
            return self.call("dapr_unlock", inst, "POST", f"/v1.0-alpha1/unlock/{DAPR_STORE}",
                             {"resourceId": resource, "lockOwner": owner},
                             rec=rec, pick=lambda j: dict(unlock=j.get("status")))
        pb, _ = self.grpc_mods
        return self._grpc("dapr_unlock", inst, rec, lambda s: s.UnlockAlpha1(pb.UnlockRequest(
            store_name=DAPR_STORE, resource_id=resource, lock_owner=owner), timeout=5,
            metadata=[("dapr-api-token", self.token)]),
            lambda r: dict(unlock=int(r.status)))

    def _grpc(self, op, inst, rec, fn, pick):
        import grpc
        _, pbg = self.grpc_mods
        if inst not in self.channels:
            ch = grpc.insecure_channel(f"127.0.0.1:{self.clu.insts[inst].gport}")
            self.channels[inst] = (ch, pbg.DaprStub(ch))
        i = self.hist.invoke(self.cid, op, inst=inst, **rec)
        try:
            r = fn(self.channels[inst][1])
        except grpc.RpcError as e:
            # INTERNAL is redlockd's answer without a quorum (HTTP's 500);
            # the other codes say no answer came (UNAVAILABLE: refused).
            code = e.code().name
            self.hist.complete(i, 500 if code == "INTERNAL" else None, error=code)
            return i, None, None
        out = pick(r)
        self.hist.complete(i, 200, **out)
        return i, 200, out

    def close(self):
        for ch, _ in self.channels.values():
            ch.close()
        self.channels.clear()

    # ---- held streams ----

    def stream(self, op, inst, path, body, rec, timeout=8.0):
        return Stream(self, op, inst, path, body, rec, timeout)


def _permits(j):
    return [dict(slot=p.get("slot"), token=p.get("token"), fence=p.get("fence"),
                 validity_ms=p.get("validity_ms")) for p in (j.get("permits") or [])]


class Stream:
    """A request answered with a held stream (a lock's or a permit's hold, a
    campaign). Its events are recorded by a reader thread, stamped with the
    time they were read; close() records "close" before the socket goes."""

    def __init__(self, c, op, inst, path, body, rec, timeout):
        self.hist = c.hist
        self.events = []
        self.cv = threading.Condition()
        self.ended = False
        self.closed = False
        self.ok = False
        self.s = None
        self.id = c.hist.invoke(c.cid, op, inst=inst, **rec)
        try:
            self.s = httpraw.Stream(c.port(inst), "POST", path, [("Content-Type", "application/json"),
                                    ("Authorization", f"Bearer {c.token}")], json.dumps(body), timeout)
        except ERRORS as e:
            c.hist.complete(self.id, None, error=type(e).__name__)
            self.ended = True
            return
        a = self.s.answer
        if a.status == 201 and self.s.chunked:
            c.hist.complete(self.id, 201)
            self.ok = True
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
        else:
            js = _json(a)
            c.hist.complete(self.id, a.status, **({"error": js.get("error")} if isinstance(js, dict) else {}))
            self.ended = True
            self.s.close()

    def _read(self):
        while True:
            try:
                line = self.s.next_line(BIG)
            except ERRORS as e:
                self._end(type(e).__name__)
                return
            t = now()
            if line is None:
                self._end(None)
                return
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                self.hist.event(self.id, "garbage", t=t, line=line[:200].decode("latin-1"))
                continue
            kind = ev.pop("event", "?")
            ev.pop("name", None)
            with self.cv:
                if self.closed:   # the client had left: it never saw this line
                    return
                self.hist.event(self.id, kind, t=t, **ev)
                self.events.append((t, kind, ev))
                self.cv.notify_all()

    def _end(self, err):
        with self.cv:
            if not self.closed:
                self.hist.event(self.id, "end", **({"error": err} if err else {}))
            self.ended = True
            self.cv.notify_all()

    def wait_for(self, kinds, timeout, start=0):
        """The first event at index >= start whose kind is in kinds, or None
        (the stream ended, or timeout). Returns (index, t, kind, fields)."""
        deadline = now() + timeout
        with self.cv:
            while True:
                for k in range(start, len(self.events)):
                    if self.events[k][1] in kinds:
                        return (k,) + self.events[k]
                left = deadline - now()
                if self.ended or left <= 0:
                    return None
                self.cv.wait(min(left, 0.5))

    def terminal(self):
        with self.cv:
            return self.ended or any(e[1] in ("lost", "released", "resigned") for e in self.events)

    def close(self):
        """The client closes the stream (which releases): recorded first."""
        with self.cv:
            if self.closed or self.s is None:
                return
            self.closed = True
            if not self.ended:
                self.hist.event(self.id, "close")
        try:
            self.s.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.s.close()
