"""A report page checked in a real browser (headless Chromium; `apt-get install chromium`, so not in `make test`).

    .venv/bin/python bench/report_browser.py [--report reports/cpu/index.html] [--shot report.png]

Without --report it writes the report of a small synthetic sweep (stack x mixer, 3 seeds, diagnostics,
one failed trial) to a temporary folder. Then, in Chromium:
1. a screenshot of the page as it is (it holds no script, checked first, so this is what a browser
   without JavaScript shows);
2. a probe: a copy of the page with a script appended that measures, after layout, every <img> (decoded,
   natural size > 0, laid out with a width and height, not hidden) and every <table> (rows, laid out);
   the DOM dump carries its findings back. Every image and table of the page must be there and visible.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from PIL import Image

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--hide-scrollbars", "--window-size=1400,4200"]  # fmt: skip
PROBE = """<script>
addEventListener("load", () => {
  const shown = el => { const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.display !== "none" && s.visibility !== "hidden"; };
  const out = {
    images: [...document.images].map(i => ({decoded: i.complete && i.naturalWidth > 0, shown: shown(i),
                                             width: i.naturalWidth, height: i.naturalHeight})),
    tables: [...document.querySelectorAll("table")].map(t => ({rows: t.rows.length, shown: shown(t)})),
  };
  const pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


class Count(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise SystemExit("no Chromium on PATH: apt-get install -y chromium")


def run(args: list[str], profile: Path) -> str:
    cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True).stdout


def synthetic(folder: Path) -> Path:
    """A small sweep's report, written with the real store and report code."""
    import yaml

    from ablate.planner import plan
    from ablate.reporting import report
    from ablate.reporting.synthetic import DIAGNOSTICS, EPOCH_METRICS, fill
    from ablate.store import Store

    base = {"data": {"name": "mnist5k"}, "model": {"backbone": "vit", "embed_dim": 64, "depths": [4], "num_heads": [4],
            "patch_size": 4, "img_size": 28, "mlp_ratio": 2}}  # fmt: skip
    sweep = {"description": "Pure-attention vs alternating stacks, softmax vs CSaN (synthetic values).", "base": base,
             "grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan"]}, "seeds": 3,
             "baseline": {"model.stack": "alternating", "attention.kind": "softmax"}}  # fmt: skip
    (folder / "e.yaml").write_text(yaml.safe_dump({"sweeps": {"cpu": sweep}}))
    p = plan(folder / "e.yaml", "cpu")
    gain = {("alternating", "softmax"): 90, ("pure", "softmax"): 84, ("pure", "csan"): 91, ("alternating", "csan"): 92}

    def value(t):
        return gain[t.axes["model.stack"], t.axes["attention.kind"]] + 0.4 * np.sin(3 * t.axes["seed"] + int(t.variant[:4], 16))

    with Store(f"sqlite:///{folder / 'db.sqlite'}") as store:
        fill(store, p, value, state=lambda t: "failed" if t is p.trials[-1] else "done", epochs=6,
             names=EPOCH_METRICS + DIAGNOSTICS)  # fmt: skip
        report("cpu", store=store, out=folder / "reports")
    return folder / "reports" / "cpu" / "index.html"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", type=Path, help="a report's index.html (default: a synthetic sweep's)")
    ap.add_argument("--shot", type=Path, default=Path(tempfile.gettempdir()) / "ablate-report.png")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        page = (args.report or synthetic(tmp)).resolve()
        html = page.read_text(encoding="utf-8")
        static = Count()
        static.feed(html)
        assert "<script" not in html.lower(), "the report page must not need JavaScript"
        run([f"--screenshot={args.shot.resolve()}", page.as_uri()], tmp / "p1")
        shot = np.asarray(Image.open(args.shot).convert("L"), dtype=float)
        probe_page = page.with_name(".probe.html")
        try:
            probe_page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
            dom = run(["--virtual-time-budget=10000", "--dump-dom", probe_page.as_uri()], tmp / "p2")
        finally:
            probe_page.unlink(missing_ok=True)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    seen = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    images, tables = seen["images"], seen["tables"]
    assert len(images) == static.tags.get("img", 0) > 0 and len(tables) == static.tags.get("table", 0) > 0
    assert all(i["decoded"] and i["shown"] for i in images), images
    assert all(t["shown"] and t["rows"] >= 2 for t in tables), tables
    assert shot.std() > 10, "the screenshot is blank"
    sizes = ", ".join(f"{i['width']}x{i['height']}" for i in images)
    print(f"{page}: {len(images)}/{len(images)} images decoded and laid out ({sizes}); {len(tables)} tables laid out "
          f"({', '.join(str(t['rows']) for t in tables)} rows); no script; screenshot {args.shot} "
          f"{shot.shape[1]}x{shot.shape[0]}")


if __name__ == "__main__":
    main()
