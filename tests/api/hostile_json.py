#!/usr/bin/env python3
"""Sections 1 and 2 of the hostile-input test (test_hostile.py runs them):
strict JSON on every body-taking route, and every integer an integer
literal."""
from hostile_harness import *  # noqa: F401,F403


# ---- 1: strict JSON ----

def acquire(D, name, body):
    a = D.req("POST", f"/locks/{name}", body)
    if a.status != 201:
        raise RuntimeError(f"set-up: acquire {name} answered {a.status} {a.body[:200]!r}")
    return a.json()["token"]


class Targets:
    """What a case needs to exist first (a lock, a permit, a leader, a Dapr
    lock), made before the case's first snapshot and given up after it.
    Both wait for every master: a grant or a release answers once a majority
    said yes, and a late master's write must not land inside a case."""

    def __init__(self, D, masters):
        self.D, self.masters, self.n = D, masters, 0

    def on_every_master(self, key, present, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((m.r().call("EXISTS", key) == 1) == present for m in self.masters):
                return
            time.sleep(0.01)
        raise RuntimeError(f"set-up: {key} {'missing on' if present else 'still on'} some master after {timeout} s")

    def made(self, key, name, tok, undo):
        self.on_every_master(key, True)

        def undo_and_wait():
            undo()
            self.on_every_master(key, False)
        return {"name": name, "token": tok, "undo": undo_and_wait}

    def lock(self):
        self.n += 1
        name = f"tgt-lock-{self.n}"
        tok = acquire(self.D, name, {"ttl_ms": 60000})
        return self.made(PREFIX + name, name, tok,
                         lambda: self.D.req("DELETE", f"/locks/{name}", headers={"Lock-Token": tok}))

    def permit(self):
        self.n += 1
        name = f"tgt-sem-{self.n}"
        a = self.D.req("POST", f"/semaphores/{name}", {"limit": 1, "ttl_ms": 60000})
        if a.status != 201:
            raise RuntimeError(f"set-up: permit of {name}: {a.status} {a.body[:200]!r}")
        tok = a.json()["permits"][0]["token"]
        return self.made(PREFIX + name + "\x1f#0", name, tok,
                         lambda: self.D.req("DELETE", f"/semaphores/{name}", headers={"Lock-Token": tok}))

    def leader(self):
        self.n += 1
        name = f"tgt-el-{self.n}"
        s = httpraw.Stream(self.D.port, "POST", f"/elections/{name}", [("Content-Type", "application/json")],
                           json.dumps({"candidate": "pg-1", "value": "10.0.0.7:5432", "ttl_ms": 30000}), READ_S)
        tok = None
        try:
            for _ in range(2):
                ev = json.loads(s.next_line(5.0))
                if ev.get("event") == "elected":
                    tok = ev["token"]
        except Exception as e:  # noqa: BLE001
            s.close()
            raise RuntimeError(f"set-up: campaign {name}: {e!r}")
        if not tok:
            s.close()
            raise RuntimeError(f"set-up: campaign {name} was not elected")

        def undo():
            self.D.req("DELETE", f"/elections/{name}", headers={"Lock-Token": tok})
            s.close()
        self.on_every_master(PREFIX + name + "\x1f#election\x1f#owner", True)
        return self.made(PREFIX + name + "\x1f#election", name, tok, undo)

    def dapr_lock(self):
        self.n += 1
        rid = f"tgt-r-{self.n}"
        a = self.D.req("POST", LK, {"resourceId": rid, "lockOwner": "worker", "expiryInSeconds": 60})
        if a.status != 200 or a.json() != {"success": True}:
            raise RuntimeError(f"set-up: dapr lock {rid}: {a.status} {a.body[:200]!r}")
        return self.made(f"{PREFIX}{STORE}||{rid}", rid, "worker",
                         lambda: self.D.req("POST", UL, {"resourceId": rid, "lockOwner": "worker"}))


def hostile(D, masters, case, method, path, body, headers=(), field=None, dapr=False, status=400,
            code=None, target=None):
    """One hostile request: the answer is a JSON error and no master
    changed. path, body and headers may be functions of the target."""
    t = target() if target else None
    try:
        p = path(t) if callable(path) else path
        b = body(t) if callable(body) else body
        h = headers(t) if callable(headers) else headers
        before = snapshot(masters)
        t0 = time.monotonic()
        try:
            a = send(D.port, method, p, b, h)
            probs = json_error(a, status, code or ("ERR_MALFORMED_REQUEST" if dapr else "bad_request"),
                               field, dapr)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            probs = [f"no answer: {e!r}"]
        changed = compare(before, snapshot(masters), (time.monotonic() - t0) * 1000)
        probs += changed
        if changed:
            time.sleep(0.3)   # a stream closed above gives up what it held meanwhile
            restore(masters, before, (time.monotonic() - t0) * 1000)
        record(case, probs)
    finally:
        if t:
            t["undo"]()


def section_strict_json(D, masters):
    tg = Targets(D, masters)

    def H(t):
        return {"Lock-Token": t["token"]}

    def tokb(t):
        return t["token"].encode()

    # (label, method, path, body(t) -> bytes, headers, field, dapr, target)
    sites = []
    # Raw control bytes inside strings.
    for ctl in (0x00, 0x01, 0x1F):
        c = f"0x{ctl:02x}"
        bc = bytes([ctl])
        sites += [
            (f"owner with raw {c}", "POST", "/locks/hx-owner", b'{"owner":"web' + bc + b'-evil"}', (), "owner",
             False, None),
            (f"token with raw {c} (body)", "PATCH", lambda t: f"/locks/{t['name']}",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x","ttl_ms":5000}', (), "token", False, tg.lock),
            (f"token with raw {c} (body)", "DELETE", lambda t: f"/locks/{t['name']}",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x"}', (), "token", False, tg.lock),
            (f"candidate with raw {c}", "POST", "/elections/hx-el", b'{"candidate":"10.0.0.7' + bc + b':5432"}', (),
             "candidate", False, None),
            (f"value with raw {c}", "POST", "/elections/hx-el",
             b'{"candidate":"pg-1","value":"10.0.0.7' + bc + b':5432"}', (), "value", False, None),
            (f"value with raw {c}", "PUT", lambda t: f"/elections/{t['name']}/value",
             b'{"value":"10.0.0.7' + bc + b':5432"}', H, "value", False, tg.leader),
            (f"token with raw {c} (body)", "PUT", lambda t: f"/elections/{t['name']}/value",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x","value":"v2"}', (), "token", False, tg.leader),
            (f"owner with raw {c}", "POST", "/semaphores/hx-sem", b'{"limit":1,"owner":"web' + bc + b'-evil"}', (),
             "owner", False, None),
            (f"tokens with raw {c}", "DELETE", lambda t: f"/semaphores/{t['name']}",
             lambda t, bc=bc: b'{"tokens":["' + tokb(t) + bc + b'x"]}', (), "token", False, tg.permit),
            (f"token with raw {c} (body)", "DELETE", lambda t: f"/semaphores/{t['name']}",
             lambda t, bc=bc: b'{"token":"' + tokb(t) + bc + b'x"}', (), "token", False, tg.permit),
            (f"lockOwner with raw {c}", "POST", LK,
             b'{"resourceId":"hx-r","lockOwner":"worker' + bc + b'A","expiryInSeconds":60}', (), None, True, None),
            (f"resourceId with raw {c}", "POST", LK,
             b'{"resourceId":"hx-r' + bc + b'x","lockOwner":"worker","expiryInSeconds":60}', (), None, True, None),
            (f"lockOwner with raw {c} (another's lock)", "POST", UL,
             lambda t, bc=bc: b'{"resourceId":"' + t["name"].encode() + b'","lockOwner":"worker' + bc + b'B"}',
             (), None, True, tg.dapr_lock),
            (f"unknown field's string with raw {c}", "POST", "/locks/hx-unknown",
             b'{"note":"a' + bc + b'b","ttl_ms":5000}', (), None, False, None),
            (f"key with raw {c}", "POST", "/locks/hx-key", b'{"ttl_ms' + bc + b'x":1}', (), None, False, None),
        ]
        if ctl == 0x00:
            # Beyond the routes listed in the brief: the other two that take a
            # body with a token (the issue: every HTTP route).
            sites += [
                (f"tokens with raw {c}", "PATCH", lambda t: f"/semaphores/{t['name']}",
                 lambda t: b'{"tokens":["' + tokb(t) + b'\x00x"],"ttl_ms":5000}', (), "token", False, tg.permit),
                (f"token with raw {c} (body)", "DELETE", lambda t: f"/elections/{t['name']}",
                 lambda t: b'{"token":"' + tokb(t) + b'\x00x"}', (), "token", False, tg.leader),
            ]
    # Duplicate keys.
    sites += [
        ("duplicate ttl_ms", "POST", "/locks/hx-dup", b'{"ttl_ms":1000,"ttl_ms":-1}', (), "ttl_ms", False, None),
        ("duplicate ttl_ms", "PATCH", lambda t: f"/locks/{t['name']}", b'{"ttl_ms":1000,"ttl_ms":-1}', H,
         "ttl_ms", False, tg.lock),
        ("duplicate token", "DELETE", lambda t: f"/locks/{t['name']}",
         lambda t: b'{"token":"' + tokb(t) + b'","token":"x"}', (), "token", False, tg.lock),
        ("duplicate ttl_ms", "POST", "/elections/hx-dup", b'{"candidate":"a","ttl_ms":1000,"ttl_ms":-1}', (),
         "ttl_ms", False, None),
        ("duplicate candidate", "POST", "/elections/hx-dup", b'{"candidate":"a","candidate":"b"}', (),
         "candidate", False, None),
        ("duplicate value", "PUT", lambda t: f"/elections/{t['name']}/value", b'{"value":"a","value":"b"}', H,
         "value", False, tg.leader),
        ("duplicate ttl_ms", "POST", "/semaphores/hx-dup", b'{"limit":1,"ttl_ms":1000,"ttl_ms":-1}', (),
         "ttl_ms", False, None),
        ("duplicate limit", "POST", "/semaphores/hx-dup", b'{"limit":1,"limit":2}', (), "limit", False, None),
        ("duplicate tokens", "DELETE", lambda t: f"/semaphores/{t['name']}",
         lambda t: b'{"tokens":["' + tokb(t) + b'"],"tokens":["0:x"]}', (), "token", False, tg.permit),
        ("duplicate expiryInSeconds", "POST", LK,
         b'{"resourceId":"hx-dup","lockOwner":"o","expiryInSeconds":10,"expiryInSeconds":-1}', (),
         "expiryInSeconds", True, None),
        ("duplicate lockOwner", "POST", LK,
         b'{"resourceId":"hx-dup","lockOwner":"o","lockOwner":"p","expiryInSeconds":10}', (), None, True, None),
        ("duplicate lockOwner", "POST", UL,
         lambda t: b'{"resourceId":"' + t["name"].encode() + b'","lockOwner":"worker","lockOwner":"x"}', (), None,
         True, tg.dapr_lock),
    ]
    # Integers: a fraction, an exponent, out of range, negative.
    for v in ("1.0", "1e3", "1.5", "99999999999999999999", "-1"):
        vb = v.encode()
        sites += [
            (f"ttl_ms {v}", "POST", "/locks/hx-int", b'{"ttl_ms":' + vb + b'}', (), "ttl_ms", False, None),
            (f"wait_ms {v}", "POST", "/locks/hx-int", b'{"wait_ms":' + vb + b'}', (), "wait_ms", False, None),
            (f"ttl_ms {v}", "PATCH", lambda t: f"/locks/{t['name']}", b'{"ttl_ms":' + vb + b'}', H, "ttl_ms",
             False, tg.lock),
            (f"ttl_ms {v}", "POST", "/elections/hx-int", b'{"candidate":"a","ttl_ms":' + vb + b'}', (), "ttl_ms",
             False, None),
            (f"limit {v}", "POST", "/semaphores/hx-int", b'{"limit":' + vb + b'}', (), "limit", False, None),
            (f"permits {v}", "POST", "/semaphores/hx-int", b'{"limit":2,"permits":' + vb + b'}', (), "permits",
             False, None),
            (f"ttl_ms {v}", "POST", "/semaphores/hx-int", b'{"limit":1,"ttl_ms":' + vb + b'}', (), "ttl_ms",
             False, None),
            (f"wait_ms {v}", "POST", "/semaphores/hx-int", b'{"limit":1,"wait_ms":' + vb + b'}', (), "wait_ms",
             False, None),
            (f"expiryInSeconds {v}", "POST", LK,
             b'{"resourceId":"hx-int","lockOwner":"o","expiryInSeconds":' + vb + b'}', (), "expiryInSeconds",
             True, None),
        ]
    # Invalid UTF-8 inside a string (a lone lead byte, a stray continuation
    # byte, an overlong '/').
    for label, bad in (("lone lead byte", b"caf\xc3"), ("0xff", b"a\xffb"), ("overlong", b"a\xc0\xafb")):
        sites += [
            (f"owner with invalid UTF-8 ({label})", "POST", "/locks/hx-utf", b'{"owner":"' + bad + b'"}', (), None,
             False, None),
            (f"unknown field with invalid UTF-8 ({label})", "POST", "/locks/hx-utf",
             b'{"note":"' + bad + b'","ttl_ms":5000}', (), None, False, None),
            (f"value with invalid UTF-8 ({label})", "POST", "/elections/hx-utf",
             b'{"candidate":"a","value":"' + bad + b'"}', (), None, False, None),
            (f"value with invalid UTF-8 ({label})", "PUT", lambda t: f"/elections/{t['name']}/value",
             b'{"value":"' + bad + b'"}', H, None, False, tg.leader),
            (f"owner with invalid UTF-8 ({label})", "POST", "/semaphores/hx-utf",
             b'{"limit":1,"owner":"' + bad + b'"}', (), None, False, None),
            (f"lockOwner with invalid UTF-8 ({label})", "POST", LK,
             b'{"resourceId":"hx-utf","lockOwner":"' + bad + b'","expiryInSeconds":60}', (), None, True, None),
            (f"unknown field with invalid UTF-8 ({label})", "POST", UL,
             lambda t, bad=bad: b'{"resourceId":"' + t["name"].encode() + b'","lockOwner":"worker","note":"'
             + bad + b'"}', (), None, True, tg.dapr_lock),
        ]
    for label, method, path, body, headers, field, dapr, target in sites:
        route = route_of(method, path, target, tg)
        hostile(D, masters, f"1 {method} {route}: {label}", method, path, body, headers, field, dapr,
                target=target)
    dapr_owner_scenario(D, masters)


def route_of(method, path, target, tg):
    if isinstance(path, str):
        return re.sub(r"/(locks|elections|semaphores)/[^/]+", r"/\1/{name}", path)
    kind = {tg.lock: "locks", tg.permit: "semaphores", tg.leader: "elections", tg.dapr_lock: None}[target]
    if kind is None:
        return UL
    return f"/{kind}/{{name}}" + ("/value" if method == "PUT" else "")


def dapr_owner_scenario(D, masters):
    """Issue 27's Dapr case: owners "worker<NUL>A" and "worker<NUL>B" were
    one owner, and B's unlock released A's lock."""
    case = "1 Dapr: lock by worker<NUL>A, unlock by worker<NUL>B"
    r = "hx-dapr-r"
    before = snapshot(masters)
    t0 = time.monotonic()
    probs = []
    a = send(D.port, "POST", LK, b'{"resourceId":"' + r.encode() + b'","lockOwner":"worker\x00A",'
             b'"expiryInSeconds":60}')
    probs += ["lock: " + p for p in json_error(a, 400, "ERR_MALFORMED_REQUEST", dapr=True)]
    a = send(D.port, "POST", UL, b'{"resourceId":"' + r.encode() + b'","lockOwner":"worker\x00B"}')
    probs += ["unlock: " + p for p in json_error(a, 400, "ERR_MALFORMED_REQUEST", dapr=True)]
    g = D.req("GET", f"/locks/{STORE}%7C%7C{r}")
    if g.status != 200 or g.json().get("held") is not False:
        probs.append(f"the lock was taken: GET {g.status} {g.body[:200]!r}")
    changed = compare(before, snapshot(masters), (time.monotonic() - t0) * 1000)
    probs += changed
    if changed:
        restore(masters, before, (time.monotonic() - t0) * 1000)
    record(case, probs)

    # The control: plain owners workerA and workerB are two owners.
    case = "1 Dapr: lock by workerA, unlock by workerB (control)"
    probs = []
    a = D.req("POST", LK, {"resourceId": r, "lockOwner": "workerA", "expiryInSeconds": 60})
    if a.status != 200 or a.json() != {"success": True}:
        probs.append(f"lock by workerA: {a.status} {a.body[:200]!r}")
    a = D.req("POST", UL, {"resourceId": r, "lockOwner": "workerB"})
    if a.status != 200 or a.json() != {"status": 2}:   # LOCK_BELONGS_TO_OTHERS (docs/api.md)
        probs.append(f"unlock by workerB: {a.status} {a.body[:200]!r}, not {{\"status\": 2}}")
    g = D.req("GET", f"/locks/{STORE}%7C%7C{r}")
    if g.status != 200 or g.json().get("held") is not True:
        probs.append(f"workerA's lock is gone after workerB's unlock: {g.status} {g.body[:200]!r}")
    a = D.req("POST", UL, {"resourceId": r, "lockOwner": "workerA"})
    if a.status != 200 or a.json() != {"status": 0}:
        probs.append(f"unlock by workerA: {a.status} {a.body[:200]!r}")
    record(case, probs)


# ---- 2: every integer an integer literal ----

def no_float(s):
    raise ValueError(f"a number that is not an integer literal: {s}")


def strict(raw, what, probs):
    """raw decoded so that any fraction or exponent fails."""
    try:
        return json.loads(raw if isinstance(raw, str) else raw.decode(), parse_float=no_float,
                          parse_constant=no_float)
    except ValueError as e:
        probs.append(f"{what}: {e} in {raw[:300]!r}")
        try:
            return json.loads(raw)
        except ValueError:
            return None


def expect_status(a, status, what, probs):
    if a.status != status:
        probs.append(f"{what}: {a.status} {a.body[:200]!r}, not {status}")
        return False
    return True


class Watch:
    """A watch stream read on a thread: its lines, as they come."""

    def __init__(self, D, name):
        self.s = httpraw.Stream(D.port, "GET", f"/elections/{name}?watch=true", timeout=READ_S)
        self.lines = []
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                line = self.s.next_line(0.5)
            except TimeoutError:
                continue
            except (OSError, EOFError, ValueError):
                return
            if line is None:
                return
            self.lines.append(line)

    def close(self):
        self.stop = True
        self.t.join(5)
        self.s.close()


def section_integers(D):
    # Fences and terms of one name grow by one per grant, so ten grants in a
    # row give one whose last digit is 0: the number a %.15g printer writes
    # as 1.79...e+15.
    probs = []
    n = "int-sem"
    for i in range(30):
        a = D.req("POST", f"/semaphores/{n}", {"limit": 1, "ttl_ms": 5000})
        if not expect_status(a, 201, f"POST /semaphores #{i}", probs):
            break
        j = strict(a.body, f"POST /semaphores/{n} #{i}", probs)
        g = D.req("GET", f"/semaphores/{n}")
        if expect_status(g, 200, f"GET /semaphores #{i}", probs):
            strict(g.body, f"GET /semaphores/{n} #{i}", probs)
        d = D.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": j["permits"][0]["token"]})
        expect_status(d, 204, f"DELETE /semaphores #{i}", probs)
    record("2 POST and GET /semaphores/{name}: 30 grants, integers only", probs)

    probs = []
    n = "int-semh"
    for i in range(12):
        s = httpraw.Stream(D.port, "POST", f"/semaphores/{n}", [("Content-Type", "application/json")],
                           json.dumps({"limit": 1, "hold": True, "ttl_ms": 3000}), READ_S)
        try:
            if not expect_status(s.answer, 201, f"held permit #{i}", probs):
                break
            ev = strict(s.next_line(5.0), f"held permit #{i} acquired", probs)
            d = D.req("DELETE", f"/semaphores/{n}", headers={"Lock-Token": ev["token"]})
            expect_status(d, 204, f"release held permit #{i}", probs)
            line = s.next_line(5.0)
            if line is not None:
                strict(line, f"held permit #{i} released", probs)
        except (TimeoutError, EOFError, OSError, TypeError, KeyError) as e:
            probs.append(f"held permit #{i}: {e!r}")
        finally:
            s.close()
    record("2 POST /semaphores/{name} hold: 12 acquired events, integers only", probs)

    probs = []
    n = "int-el"
    w = Watch(D, n)
    try:
        for i in range(12):
            s = httpraw.Stream(D.port, "POST", f"/elections/{n}", [("Content-Type", "application/json")],
                               json.dumps({"candidate": "c1", "value": f"v{i}", "ttl_ms": 3000}), READ_S)
            told = len(w.lines)
            try:
                if not expect_status(s.answer, 201, f"campaign #{i}", probs):
                    break
                ev = None
                for _ in range(2):
                    ev = strict(s.next_line(5.0), f"campaign #{i} event", probs)
                if not ev or ev.get("event") != "elected":
                    probs.append(f"campaign #{i}: {ev}, not elected")
                    break
                for q in ("", "?candidate=c1"):
                    g = D.req("GET", f"/elections/{n}{q}")
                    if expect_status(g, 200, f"GET /elections #{i}{q}", probs):
                        strict(g.body, f"GET /elections/{n}{q} #{i}", probs)
                # The watch tells this term (elected, or state for the
                # first) before it is proclaimed and resigned.
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and not any(
                        b'"v%d"' % i in line for line in w.lines[told:]):
                    time.sleep(0.02)
                d = D.req("PUT", f"/elections/{n}/value", {"value": f"w{i}"}, {"Lock-Token": ev["token"]})
                expect_status(d, 204, f"proclaim #{i}", probs)
                d = D.req("DELETE", f"/elections/{n}", headers={"Lock-Token": ev["token"]})
                expect_status(d, 204, f"resign #{i}", probs)
                line = s.next_line(5.0)
                while line is not None:
                    strict(line, f"campaign #{i} event", probs)
                    line = s.next_line(5.0)
            except (TimeoutError, EOFError, OSError, TypeError, KeyError) as e:
                probs.append(f"campaign #{i}: {e!r}")
            finally:
                s.close()
        time.sleep(0.5)
    finally:
        w.close()
    if len(w.lines) < 12:
        probs.append(f"the watch told only {len(w.lines)} events of 12 terms")
    for line in w.lines:
        strict(line, "watch event", probs)
    record("2 campaigns, GET /elections/{name} and its watch: 12 terms, integers only", probs)

    probs = []
    for i in range(12):
        n = "int-hold"
        s = httpraw.Stream(D.port, "POST", f"/locks/{n}", [("Content-Type", "application/json")],
                           json.dumps({"hold": True, "ttl_ms": 3000, "owner": "o"}), READ_S)
        try:
            if not expect_status(s.answer, 201, f"held lock #{i}", probs):
                break
            ev = strict(s.next_line(5.0), f"held lock #{i} acquired", probs)
            g = D.req("GET", f"/locks/{n}")
            if expect_status(g, 200, f"GET /locks #{i}", probs):
                strict(g.body, f"GET /locks/{n} #{i}", probs)
            d = D.req("DELETE", f"/locks/{n}", headers={"Lock-Token": ev["token"]})
            expect_status(d, 204, f"release held lock #{i}", probs)
            line = s.next_line(5.0)
            if line is not None:
                strict(line, f"held lock #{i} released", probs)
        except (TimeoutError, EOFError, OSError, TypeError, KeyError) as e:
            probs.append(f"held lock #{i}: {e!r}")
        finally:
            s.close()
        a = D.req("POST", "/locks/int-lock", {"ttl_ms": 5000})
        if expect_status(a, 201, f"POST /locks #{i}", probs):
            j = strict(a.body, f"POST /locks #{i}", probs)
            D.req("DELETE", "/locks/int-lock", headers={"Lock-Token": j["token"]})
    record("2 POST /locks/{name} (plain and held) and GET /locks/{name}: integers only", probs)
