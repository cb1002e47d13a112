"""A report page checked in a real browser (headless Chromium; `apt-get install chromium`, so not in `make test`).

    .venv/bin/python bench/report_browser.py [--report reports/cpu/index.html] [--shot report.png] [--repeats 3]

Without --report it writes the report of a small synthetic sweep (stack x mixer, 3 seeds, diagnostics,
one failed trial) to a temporary folder. Then, in Chromium:
1. a screenshot of the page as it is (it holds no script, checked first, so this is what a browser
   without JavaScript shows);
2. a probe: a copy of the page with a script appended that measures, after layout, every <img> (decoded,
   natural size > 0, laid out with a width and height, not hidden) and every <table> (rows, laid out);
   the DOM dump carries its findings back. Every image and table of the page must be there and visible;
3. timing: seconds to render the report (one headless Chromium process taking its screenshot, the
   process timed whole from outside) against the baseline measured in the same run: the same for a plain
   static page of the same size in bytes (one paragraph of text: no images, no tables), so the ratio is
   what the report's images and tables cost over the browser's own floor. Same flags and window, a fresh
   profile per run, the same warm-up for both (one untimed render of each), order alternated between
   repeats (ABAB, BABA, ...), medians of --repeats runs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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


def plain_page(folder: Path, size: int) -> Path:
    """A static page of `size` bytes: one paragraph of plain text, nothing else."""
    head, tail = (
        '<!doctype html><html><head><meta charset="utf-8"><title>plain</title></head><body><p>',
        "</p></body></html>",
    )
    words = "attention selection nonlinearity ablation softmax baseline seed variant trial report "
    text = (words * (size // len(words) + 1))[: max(0, size - len(head) - len(tail))]
    page = folder / "plain.html"
    page.write_text(head + text + tail, encoding="utf-8")
    return page


def render_seconds(pages: dict[str, Path], repeats: int, folder: Path) -> dict[str, float]:
    """Median wall time of a whole headless screenshot run per page: one untimed run of each, then ABAB/BABA."""
    runs = itertools.count()

    def render(page: Path) -> float:
        i = next(runs)
        t0 = time.perf_counter()
        run([f"--screenshot={folder / f'{i}.png'}", page.as_uri()], folder / f"profile{i}")
        return time.perf_counter() - t0

    for page in pages.values():  # the same warm-up for both
        render(page)
    times: dict[str, list[float]] = {name: [] for name in pages}
    for r in range(repeats):
        for name in list(pages) if r % 2 == 0 else list(pages)[::-1]:
            times[name].append(render(pages[name]))
    return {name: statistics.median(ts) for name, ts in times.items()}


def synthetic(folder: Path) -> Path:
    """A small sweep's report, written with the real store and report code."""
    import yaml

    from ablate.planning.plan import plan
    from ablate.reporting import report
    from ablate.store import Store

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the synthetic-store filler
    from synthetic import DIAGNOSTICS, EPOCH_METRICS, fill

    base = {"data": {"name": "mnist5k"}, "model": {"backbone": "vit", "embed_dim": 64, "depths": [4], "num_heads": [4],
            "patch_size": 4, "img_size": 28, "mlp_ratio": 2}}  # fmt: skip
    sweep = {"description": "Pure-attention vs alternating stacks, softmax vs CSaN (synthetic values).", "base": base,
             "grid": {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan"]}, "seeds": 3,
             "baseline": {"model.stack": "alternating", "attention.kind": "softmax"}}  # fmt: skip
    (folder / "e.yaml").write_text(yaml.safe_dump({"sweeps": {"cpu": sweep}}))
    p = plan(folder / "e.yaml", "cpu")
    gain = {("alternating", "softmax"): 90, ("pure", "softmax"): 84, ("pure", "csan"): 91, ("alternating", "csan"): 92}

    def value(t):
        return gain[t.axes["model.stack"], t.axes["attention.kind"]] + 0.4 * np.sin(
            3 * t.axes["seed"] + int(t.variant[:4], 16)
        )

    with Store(f"sqlite:///{folder / 'db.sqlite'}") as store:
        fill(store, p, value, state=lambda t: "failed" if t is p.trials[-1] else "done", epochs=6,
             names=EPOCH_METRICS + DIAGNOSTICS)  # fmt: skip
        report("cpu", store=store, out=folder / "reports")
    return folder / "reports" / "cpu" / "index.html"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", type=Path, help="a report's index.html (default: a synthetic sweep's)")
    ap.add_argument("--shot", type=Path, default=Path(tempfile.gettempdir()) / "ablate-report.png")
    ap.add_argument("--repeats", type=int, default=3, help="timed renders of each page; the median is reported")
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
        size = len(html.encode("utf-8"))
        (tmp / "timing").mkdir()
        took = render_seconds({"report": page, "plain": plain_page(tmp, size)}, args.repeats, tmp / "timing")
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    seen = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    images, tables = seen["images"], seen["tables"]
    assert len(images) == static.tags.get("img", 0) > 0 and len(tables) == static.tags.get("table", 0) > 0
    assert all(i["decoded"] and i["shown"] for i in images), images
    assert all(t["shown"] and t["rows"] >= 2 for t in tables), tables
    assert shot.std() > 10, "the screenshot is blank"
    sizes = ", ".join(f"{i['width']}x{i['height']}" for i in images)
    print(
        f"{page}: {len(images)}/{len(images)} images decoded and laid out ({sizes}); {len(tables)} tables laid out "
        f"({', '.join(str(t['rows']) for t in tables)} rows); no script; screenshot {args.shot} "
        f"{shot.shape[1]}x{shot.shape[0]}"
    )
    print(
        f"render to screenshot, headless Chromium, median of {args.repeats} (order alternated): "
        f"report {took['report']:.2f} s, plain static page of the same {size / 2**10:.0f} KiB {took['plain']:.2f} s; "
        f"ratio {took['report'] / took['plain']:.2f}"
    )


if __name__ == "__main__":
    main()
