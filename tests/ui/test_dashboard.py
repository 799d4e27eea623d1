#!/usr/bin/env python3
"""The dashboard (GET /ui, issue 32) in a real browser: Debian's chromium,
headless, driven by Selenium through chromedriver. Five redis-server masters
and redlockd with an ordinary and an admin token. The page, with the token
pasted into it:
  - shows the five masters up, and a lock taken with curl by its name, with
    its owner, fence and a waiter of this instance, a campaign's leader and a
    semaphore's holders;
  - shows a master paused with SIGSTOP as down, and up again after SIGCONT;
  - frees the lock with its force release button (the admin token pasted,
    the confirmation accepted): the waiter is served and the row goes;
  - without the token shows the service's 401 and lists nothing;
  - logs nothing to the browser's console (no script error, no blocked asset);
  - at 1280x1000 shows every button whole and no name wrapped, and frees
    the locks "." and ".." with their buttons (ui_browsers.py, issue 41).
A second redlockd on the same masters, without tokens (as the README runs
it), is where a page of another origin POSTs a lock as text/plain (fetch
and a form, no preflight): nothing is taken and the form's answer is 403
forbidden_origin; and a name an attacker rebinds to 127.0.0.1 gets 403
forbidden_host instead of the dashboard.
How long each took to show is printed, never asserted (the page polls every
second; a busy machine is slower). A screenshot goes to the build folder
(dashboard.png; docs/ops-dashboard.png is one such).

Usage: test_dashboard.py BUILD_DIR   (REDLOCKD_BIN: the daemon)"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.dont_write_bytecode = True   # no __pycache__ in the source tree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
import httpraw  # noqa: E402
from testproc import children, free_port, spawn, wait_serving  # noqa: E402
import ui_browsers  # noqa: E402

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

BUILD = sys.argv[1]
BIN = os.environ.get("REDLOCKD_BIN", "redlockd")
USER, ADMIN = "us3r-t0ken", "adm1n-t0ken"
shown = []   # (what, seconds) for the report


def log(msg):
    print(msg, flush=True)


def fail(msg):
    raise AssertionError(msg)


def until(what, pred, timeout=15.0):
    """Polls pred until it is true; returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        try:
            if pred():
                took = time.monotonic() - t0
                shown.append((what, took))
                return took
        except Exception:   # a row replaced while it was read: look again
            pass
        if time.monotonic() - t0 > timeout:
            fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def curl(*args, timeout=10):
    """curl as a user runs it; its output."""
    r = subprocess.run(["curl", "-s", "-m", str(timeout), *args], capture_output=True, text=True,
                       timeout=timeout + 5)
    return r.stdout


def main():
    tmp = tempfile.mkdtemp(prefix="redlockd-ui-")
    masters = []
    for i in range(5):
        port = free_port()
        d = os.path.join(tmp, f"m{i}")
        os.mkdir(d)
        p = spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                   "--appendonly", "no"], os.path.join(d, "redis.log"))
        masters.append((port, p))
    for port, p in masters:
        until(f"redis-server {port} answers", lambda: subprocess.run(
            ["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() == "PONG")
    for name, tok in (("user", USER), ("admin", ADMIN)):
        with open(os.path.join(tmp, name), "w") as f:
            f.write(tok + "\n")
    http = free_port()
    rl_log = os.path.join(tmp, "redlockd.log")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=99",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=99")
    rl = spawn([BIN, "--listen", f"127.0.0.1:{http}", "--masters",
                ",".join(f"127.0.0.1:{p}" for p, _ in masters), "--log-format", "text",
                "--auth-token-file", os.path.join(tmp, "user"), "--admin-token-file", os.path.join(tmp, "admin")],
               rl_log, env)
    wait_serving(rl, http, rl_log, "redlockd")
    # The same masters served without tokens, as the README runs redlockd.
    open_http = free_port()
    open_log = os.path.join(tmp, "redlockd-open.log")
    rl_open = spawn([BIN, "--listen", f"127.0.0.1:{open_http}", "--masters",
                     ",".join(f"127.0.0.1:{p}" for p, _ in masters), "--log-format", "text"], open_log, env)
    wait_serving(rl_open, open_http, open_log, "redlockd without tokens")

    def refused_403():
        m = re.search(r'^redlockd_http_requests_total\{route="inspect",status="403"\} (\d+)',
                      curl(f"http://127.0.0.1:{open_http}/metrics"), re.M)
        return int(m.group(1)) if m else 0
    base = f"http://127.0.0.1:{http}"
    auth = ["-H", f"Authorization: Bearer {USER}"]
    until("redlockd ready", lambda: '"status":"ready"' in curl(f"{base}/readyz"))

    o = Options()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1000", "--no-first-run", f"--user-data-dir={tmp}/chromium",
              "--host-resolver-rules=MAP attacker.example 127.0.0.1"):
        o.add_argument(a)
    o.binary_location = "/usr/bin/chromium"
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    b = webdriver.Chrome(service=Service("/usr/bin/chromedriver", log_path=os.path.join(tmp, "chromedriver.log")),
                         options=o)
    stream = waiter = None
    try:
        b.get(f"{base}/ui")
        if b.title != "redlockd":
            fail(f"/ui: title {b.title!r}")

        # Without the token: the service's 401, nothing listed.
        until("the page says 401 without the token", lambda: "401" in b.find_element(By.ID, "error").text)
        if b.find_elements(By.CSS_SELECTOR, "#locks tr[data-name]"):
            fail("locks listed without the token")

        b.find_element(By.ID, "token").send_keys(USER)
        until("five masters up", lambda: [e.text for e in b.find_elements(By.CSS_SELECTOR, "#masters td.state")]
              == ["up"] * 5)

        # A lock taken with curl, a waiter for it, a campaign and a semaphore.
        name = "reports/2026/11"
        path = "/locks/" + urllib.parse.quote(name, safe="")
        t_taken = time.monotonic()
        got = json.loads(curl("-X", "POST", *auth, f"{base}{path}", "-d", '{"ttl_ms":60000,"owner":"cron 7"}'))
        fence = got["fence"]
        row = f'#locks tr[data-name="{name}"]'
        until(f"{name} shown after curl took it", lambda: b.find_elements(By.CSS_SELECTOR, row))
        log(f"lock shown {time.monotonic() - t_taken:.2f} s after curl took it")
        cells = [c.text for c in b.find_elements(By.CSS_SELECTOR, row + " td")]
        if cells[1] != "cron 7" or cells[2] != str(fence):
            fail(f"lock row {cells}, wanted owner 'cron 7' and fence {fence}")
        waiter = subprocess.Popen(["curl", "-s", "-m", "60", "-o", os.path.join(tmp, "waiter.json"), "-w",
                                   "%{http_code}", "-X", "POST", *auth, f"{base}{path}", "-d",
                                   '{"ttl_ms":60000,"wait_ms":50000}'], stdout=subprocess.PIPE, text=True)
        until("its waiter shown", lambda: b.find_elements(By.CSS_SELECTOR, row + " td")[4].text == "1")
        stream = httpraw.Stream(http, "POST", "/elections/db-primary",
                                [("Authorization", f"Bearer {USER}"), ("Content-Type", "application/json")],
                                '{"candidate":"node-1","value":"10.0.0.7:5432"}')
        curl("-X", "POST", *auth, f"{base}/semaphores/gpu", "-d", '{"limit":4,"permits":3,"ttl_ms":60000}')
        until("the leader shown", lambda: [c.text for c in b.find_elements(
            By.CSS_SELECTOR, '#elections tr[data-name="db-primary"] td')][1:3] == ["node-1", "10.0.0.7:5432"])
        until("the semaphore's holders shown", lambda: [c.text for c in b.find_elements(
            By.CSS_SELECTOR, '#semaphores tr[data-name="gpu"] td')][1:3] == ["3", "4"])
        ui_browsers.buttons_fully_visible(b, fail, log)

        # A master paused: shown down; back up after SIGCONT.
        port, proc = masters[2]
        addr = f"127.0.0.1:{port}"
        state = f'#masters tr[data-addr="{addr}"] td.state'
        proc.send_signal(signal.SIGSTOP)
        try:
            until(f"{addr} shown down while stopped",
                  lambda: b.find_element(By.CSS_SELECTOR, state).text == "down", timeout=20)
        finally:
            proc.send_signal(signal.SIGCONT)
        until(f"{addr} shown up again", lambda: b.find_element(By.CSS_SELECTOR, state).text == "up", timeout=20)

        os.makedirs(BUILD, exist_ok=True)
        b.save_screenshot(os.path.join(BUILD, "dashboard.png"))

        # Force release from the page: the waiter gets the lock at once.
        b.find_element(By.ID, "admin").send_keys(ADMIN)
        # (a poll redraws the tables each second: a button found just
        # before one is stale, and is found again)
        until("the force release button clicked", lambda: b.find_element(
            By.CSS_SELECTOR, f'button.force[data-kind="locks"][data-name="{name}"]').click() or True)
        alert = b.switch_to.alert
        if name not in alert.text:
            fail(f"the confirmation does not name the lock: {alert.text!r}")
        t_forced = time.monotonic()
        alert.accept()
        status = waiter.communicate(timeout=30)[0]
        if status != "201":
            fail(f"the waiter got {status} after the force release")
        log(f"waiter served {time.monotonic() - t_forced:.2f} s after the click")
        newer = json.load(open(os.path.join(tmp, "waiter.json")))
        if newer["fence"] <= fence:
            fail(f"the waiter's fence {newer['fence']} is not above the forced one {fence}")
        until("the forced lock's row shows the waiter's fence", lambda: [c.text for c in b.find_elements(
            By.CSS_SELECTOR, row + " td")][2:3] == [str(newer["fence"])])
        if "force_release" not in open(rl_log).read():
            fail("no force_release line in the log")
        ui_browsers.force_dot_names(b, base, auth, fail, until, curl)

        errors = [e for e in b.get_log("browser") if e.get("level") == "SEVERE"
                  and "/ui/state" not in e.get("message", "") and " 401 " not in e.get("message", "")]
        if errors:
            fail(f"the browser's console: {errors[:3]}")

        ui_browsers.another_origin(b, tmp, open_http, refused_403, fail, until, curl, free_port, spawn, log)
        ui_browsers.rebinding(b, open_http, fail, until)
    finally:
        b.quit()
        if stream:
            stream.close()
        if waiter and waiter.poll() is None:
            waiter.kill()
        rcs = []
        for p in (rl, rl_open):
            p.send_signal(signal.SIGTERM)
            try:
                rcs.append(p.wait(20))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append(p.wait())
        for p in children:
            if p.poll() is None:
                p.kill()
                p.wait()
    for path, rc in zip((rl_log, open_log), rcs):
        text = open(path, errors="replace").read()
        if "Sanitizer" in text or "runtime error:" in text:
            fail(f"sanitizer report in {path}:\n{text[-4000:]}")
        if rc != 0:
            fail(f"redlockd exited {rc} ({path})")
    for what, took in shown:
        log(f"  {took:6.2f} s  {what}")
    log("dashboard: passed")


if __name__ == "__main__":
    main()
