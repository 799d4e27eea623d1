"""The browser checks of issue 41 for test_dashboard.py, in the same
Chromium: every button of the dashboard fully visible at 1280x1000 and no
name wrapped; a force release from the page of the locks named "." and
".." (which a browser's URL parser would turn into "/locks/" and "/");
a page of another origin that POSTs a lock as text/plain (fetch and a
form, no preflight) takes nothing and is refused; a name an attacker
rebinds to 127.0.0.1 (--host-resolver-rules) gets no dashboard.

Each function takes the driver b and helpers from the test (fail, until,
curl, log), as arguments, so that the module holds no state."""
import json
import os

from selenium.webdriver.common.by import By

# Every button: within its card and the window (after scrolling to its row),
# not covered; every name on one line. Returns the problems.
_VISIBLE = """
const out = [];
const vw = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth > vw)
  out.push("the page is wider than the window: " + document.documentElement.scrollWidth + " > " + vw);
for (const btn of document.querySelectorAll("button")) {
  btn.scrollIntoView({block: "center", inline: "nearest"});
  window.scrollTo(0, window.scrollY);
  const r = btn.getBoundingClientRect(), card = btn.closest("section").getBoundingClientRect();
  const top = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
  const what = btn.dataset.kind + " " + btn.dataset.name;
  if (r.width === 0 || r.left < card.left || r.right > card.right || r.left < 0 || r.right > vw)
    out.push(what + ": button at " + Math.round(r.left) + ".." + Math.round(r.right) + ", its card " +
             Math.round(card.left) + ".." + Math.round(card.right) + ", the window 0.." + vw);
  else if (top !== btn)
    out.push(what + ": button covered by " + (top ? top.outerHTML.slice(0, 80) : "nothing"));
}
for (const td of document.querySelectorAll("td.name")) {
  const range = document.createRange();
  range.selectNodeContents(td);
  const lines = new Set([...range.getClientRects()].map((q) => Math.round(q.top))).size;
  if (lines > 1) out.push("the name " + JSON.stringify(td.textContent) + " wraps over " + lines + " lines");
}
window.scrollTo(0, 0);
return out;
"""


def buttons_fully_visible(b, fail, log):
    size = b.execute_script("return [window.innerWidth, window.innerHeight]")
    n = len(b.find_elements(By.CSS_SELECTOR, "button.force"))
    probs = b.execute_script(_VISIBLE)
    if probs:
        fail(f"at {size[0]}x{size[1]}: " + "; ".join(probs))
    log(f"all {n} force release buttons fully visible at {size[0]}x{size[1]}, no name wrapped")


def force_dot_names(b, base, auth, fail, until, curl):
    """The locks "." and ".." (sent as %2E and %2E%2E, as the CLI does),
    freed by their force release buttons (the admin token pasted already)."""
    for name, seg in ((".", "%2E"), ("..", "%2E%2E")):
        got = json.loads(curl("-X", "POST", *auth, f"{base}/locks/{seg}", "-d", '{"ttl_ms":60000}'))
        if got.get("name") != name:
            fail(f"curl's acquire of {seg}: {got}")
    for name, seg in ((".", "%2E"), ("..", "%2E%2E")):
        sel = f'button.force[data-kind="locks"][data-name="{name}"]'
        until(f"the lock {name!r} shown", lambda: b.find_elements(By.CSS_SELECTOR, sel))
        until(f"the force release of {name!r} clicked",
              lambda: b.find_element(By.CSS_SELECTOR, sel).click() or True)
        alert = b.switch_to.alert
        alert.accept()
        until(f"the lock {name!r} freed by its button",
              lambda: '"held":false' in curl(*auth, f"{base}/locks/{seg}"), timeout=10)
        err = b.find_element(By.ID, "error").text
        if err:
            fail(f"the force release of {name!r} from the page says: {err}")


def another_origin(b, tmp, open_port, metric, fail, until, curl, free_port, spawn, log):
    """A page served on another loopback port POSTs locks to redlockd (open_port,
    no token) as text/plain: by fetch() and by a form into a frame."""
    site = os.path.join(tmp, "evil-site")
    os.makedirs(site, exist_ok=True)
    target = f"http://127.0.0.1:{open_port}"
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write(f"""<!doctype html><title>evil</title>
<iframe name="answer"></iframe>
<form id="form" method="POST" enctype="text/plain" action="{target}/locks/csrf-form" target="answer">
<input name='{{"ttl_ms": 60000, "x": "' value='"}}'></form>
<script>
fetch("{target}/locks/csrf-fetch", {{method: "POST", headers: {{"Content-Type": "text/plain"}},
                                     body: '{{"ttl_ms": 60000}}'}})
  .then((r) => {{ document.title = "fetch read " + r.status; }},
        (e) => {{ document.title = "fetch failed: " + e; }})
  .finally(() => document.getElementById("form").submit());
</script>
""")
    port = free_port()
    spawn(["/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", site, str(port)],
          os.path.join(tmp, "evil-site.log"))
    until("the other origin's site serves", lambda: "evil" in curl(f"http://127.0.0.1:{port}/"))
    before = metric()
    b.get(f"http://127.0.0.1:{port}/")
    until("the page's fetch settled", lambda: b.title.startswith("fetch "))
    title = b.title
    b.switch_to.frame("answer")
    until("the form's answer arrived in the frame", lambda: "{" in b.find_element(By.TAG_NAME, "body").text)
    answer = b.find_element(By.TAG_NAME, "body").text
    b.switch_to.default_content()
    try:
        body = json.loads(answer)
    except ValueError:
        body = {}
    if body.get("error") != "forbidden_origin":
        fail(f"the form's POST from http://127.0.0.1:{port} was answered {answer[:300]!r}, not forbidden_origin")
    for name in ("csrf-fetch", "csrf-form"):
        state = curl(f"{target}/locks/{name}")
        if '"held":false' not in state:
            fail(f"a page of another origin took the lock {name}: {state}")
    refused = metric() - before
    if refused < 2:
        fail(f"{refused} requests refused 403 while the page of another origin POSTed two")
    log(f"another origin's page: fetch {title!r}, the form answered {body.get('error')}, "
        f"{refused} refused, nothing taken")


def rebinding(b, open_port, fail, until):
    """attacker.example resolved to 127.0.0.1 (the browser's resolver rule):
    its page would be same-origin with whatever it loads from there."""
    b.get(f"http://attacker.example:{open_port}/ui")
    until("the rebound name gets an answer", lambda: b.find_element(By.TAG_NAME, "body").text.strip())
    text = b.find_element(By.TAG_NAME, "body").text
    if "forbidden_host" not in text or b.find_elements(By.ID, "masters"):
        fail(f"http://attacker.example:{open_port}/ui served: {text[:300]!r}")
