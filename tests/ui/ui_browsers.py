"""The browser checks of issue 41 for test_dashboard.py, in the same
Chromium: every button of the dashboard fully visible at 1280x1000 and no
name wrapped.

Each function takes the driver b and helpers from the test (fail, until,
curl, log), as arguments, so that the module holds no state."""
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
