"""The browser checks of issue 41 for test_dashboard.py, in the same
Chromium: every button of the dashboard fully visible at 1280x1000 and no
name wrapped; a force release from the page of the locks named "." and
".." (which a browser's URL parser would turn into "/locks/" and "/").

Each function takes the driver b and helpers from the test (fail, until,
curl, log), as arguments, so that the module holds no state."""
import json

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
