"""The documentation site: it builds strictly, its generated reference covers the code, its tutorials run as
written, and a browser shows every page without a console error or a broken image.

The tutorials are read from their pages: a fenced block with a `title="PATH"` is a file the reader writes (a
`--8<--` snippet line stands for the repository file it includes), a `bash` block holds the commands the reader
types. They run in a fresh folder in page order; `ablate` commands run in this process on the session's Ray (as
the CLI tests do), until the page installs a package: from then on in fresh processes, where a new shell would
find it (the plugin tutorial's from the start: its plugin file must not stay in the session's Ray). A page's
`pip install` goes to a folder of the test (`PIP_TARGET`), never into this environment.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import typer.main
import yaml
from conftest import ROOT, chromium
from typer.testing import CliRunner

from ablate.cli import app
from ablate.provenance.environment import Arithmetic
from ablate.spec.schema import json_schema
from ablate.store import Store

BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)


# ------------------------------------------------------------------------------------------------- the build
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built strictly, as `make docs` builds it, into a folder of the test."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "--site-dir", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def text_of(site: Path, page: str) -> str:
    """A built page's text, tags dropped."""
    return re.sub(r"<[^>]+>", "", (site / f"{page}.html").read_text())


def test_the_reference_lists_every_key_of_the_schema_and_every_command_and_flag(site: Path) -> None:
    schema = json_schema()["$defs"]
    keys = text_of(site, "reference/experiments")
    for section, model in (("model", "ModelConfig"), ("train", "TrainConfig"), ("attention", "CSaNAttention")):
        for field in schema[model]["properties"]:
            assert f"{section}.{field}" in keys, f"{section}.{field} missing from the experiments.yaml reference"
    for field in schema["SweepSpec"]["properties"]:
        assert f">{field}<" in (site / "reference/experiments.html").read_text(), field
    cli = text_of(site, "reference/cli")
    for name, command in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        assert f"ablate {name}" in cli
        for param in command.params:
            for opt in param.opts if param.param_type_name == "option" else [param.name.upper()]:
                assert opt in cli, f"ablate {name} {opt} missing from the CLI reference"
    for page in ("reference/experiments", "reference/cli"):  # a pipe in a code span is text, not an escape
        html = (site / f"{page}.html").read_text()
        assert "\\|" not in html and '<span style="white-space: nowrap"><code>' in html, page
    assert "\\|" not in (site / "concepts/commands.html").read_text()  # written by hand: no code span holds a pipe
    assert "SoftmaxAttention | CSaNAttention" in keys and "&lt;table|csv|json|markdown&gt;" in cli
    api = text_of(site, "reference/api")
    assert all(name in api for name in ("plan_all", "launch", "report", "Store", "Tracker", "RunConfig"))


# ------------------------------------------------------------------------------------------------- tutorials
def steps(page: str) -> Iterator[tuple[str, str]]:
    """("file", path and content) or ("run", a bash block) for each fenced block of a page that does something."""
    for lang, attrs, body in FENCE.findall((ROOT / "docs" / page).read_text()):
        title = re.search(r'title="([^"]+)"', attrs)
        if title:
            yield "file", f"{title.group(1)}\n{SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), body)}"
        elif lang == "bash":
            yield "run", body


def commands(block: str) -> Iterator[list[str]]:
    """The commands of a bash block: continuation lines joined, comments dropped, `&&` chains split."""
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            yield words[:cut]
            words = words[cut + 1 :]


def run_page(page: str, folder: Path, fresh: bool = False) -> list[str]:
    """Every step of `page` in `folder` (the current directory); the output of each command, in order. `fresh`:
    every command in a process of its own (with its own embedded Ray) from the start."""
    outputs = []
    site_packages = folder / ".site-packages"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(site_packages),
           "PIP_TARGET": str(site_packages), "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "RAY_ADDRESS": "", "COLUMNS": "200"}  # fmt: skip
    for kind, body in steps(page):
        if kind == "file":
            path, content = body.split("\n", 1)
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(content)
            continue
        for argv in commands(body):
            if argv[0] == "ablate" and not fresh:
                res = CliRunner().invoke(app, argv[1:], env={"COLUMNS": "200"})
                assert res.exit_code == 0, f"{page}: {shlex.join(argv)}\n{res.output}"
                outputs.append(res.output)
                continue
            done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{page}: {shlex.join(argv)}\n{done.stdout}{done.stderr}"
            outputs.append(done.stdout)
            fresh = fresh or argv[:2] == ["pip", "install"]
    return outputs


@pytest.fixture
def reader(ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder as the reader's working directory, with a cache of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / ".cache"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    return tmp_path


def test_the_first_ablation_tutorial_runs_as_written(reader: Path) -> None:
    plan, launch, status, runs, report = run_page("tutorials/first-ablation.md", reader)
    assert "first: 4 trials, 2 variants" in plan
    assert "done 4; 0 already done" in launch
    assert status.startswith("trials per state") and runs.count(" done ") == 4, status + runs
    scores = [float(row.split("│")[-2]) for row in runs.splitlines() if " done " in row]
    assert len(scores) == 4 and min(scores) > 60, runs  # it learns visibly: 89 to 92% (chance 10%), issue 39
    with Store(f"sqlite:///{reader / 'db' / 'ablate.sqlite'}") as store:
        records = [store.trial(key) for key in store.states()]
    ran = {Arithmetic.of_record(r.environment if r else None) for r in records}
    if {(a.cpu, a.capability, a.threads, a.torch) if a else None for a in ran} == {QUOTED_ON}:
        assert sorted(f"{x:.4g}" for x in scores) == sorted(first_sweep_figures().values()), runs  # its own bits
    text = (reader / "reports" / "first" / "report.md").read_text()
    assert "Softmax, attn-FFN" in text and "CSaN" in text and "reports/first/index.html" in report


def test_the_readmes_first_sweep_is_the_first_tutorials() -> None:
    """The README shows the tutorial's sweep and quotes its measured figures: the two must not drift apart."""
    readme = next(body for lang, _, body in FENCE.findall((ROOT / "README.md").read_text()) if lang == "yaml")
    tutorial = next(body.split("\n", 1)[1] for kind, body in steps("tutorials/first-ablation.md") if kind == "file")
    assert yaml.safe_load(readme) == yaml.safe_load(tutorial)


QUOTED_ON = ("AMD EPYC", "AVX512", 1, "2.13.0+cpu")
"""CPU, torch's kernels, threads and torch build of the first sweep's figures the pages quote: a launch of the
tutorial under these gives them to the last digit (on another machine, the same experiment with other figures)."""


def first_sweep_figures() -> dict[tuple[str, str, int], str]:
    """(key prefix, attention kind, seed) -> test top-1 as the tutorial's `ablate runs` table prints it."""
    tutorial = (ROOT / "docs/tutorials/first-ablation.md").read_text()
    rows = re.findall(r"^(\w{10})  done   (\w+) +(\d)     ([\d.]+)$", tutorial, re.M)
    return {(key, kind, int(seed)): value for key, kind, seed, value in rows}


def test_statistics_quotes_the_gallerys_tuned_and_multi_dataset_reports_as_they_are() -> None:
    """docs/concepts/statistics.md's "In the gallery" paragraphs quote the committed cpu-tuned and syn-mil-quick
    reports: each figure is in its report, and the spread it states between the values of I on every dataset (at
    most 0.03) and which I comes first where are what syn-mil-quick's per-dataset table holds. A regenerated gallery
    fails this until the paragraphs follow."""
    text = " ".join((ROOT / "docs/concepts/statistics.md").read_text().split())
    tuned = " ".join((ROOT / "docs/gallery/cpu-tuned/report.md").read_text().split())
    for figure in ("| 39.60 |", "| 43.40 |", "[39.80, 100.00]", "[37.60, 100.00]", "+1.08 [-6.10, +8.30]",
                   "+0.42 [-4.50, +5.30]", "about 25 configurations per arm would be apart at n = 2"):  # fmt: skip
        assert figure in tuned, figure
    quotes = ["val.top1 39.60 (softmax) and 43.40 (CSaN)", "CSaN [39.80, 100.00], softmax [37.60, 100.00]",
              "+1.08 points [-6.10, +8.30]", "+0.42 [-4.50, +5.30]", "about 25 configurations per arm"]  # fmt: skip
    for quoted in quotes:
        assert quoted in text, quoted
    across = (ROOT / "docs/gallery/syn-mil-quick/report.md").read_text()
    iqm = dict(re.findall(r"^\| Syn \(I=(-?\d):[^|]*\| 15 \| ([\d.]+ \[[\d., ]+\]) \|", across, re.M))
    assert iqm.keys() == {"-1", "0", "1"}, iqm
    assert f"IQMs are {iqm['-1']} (I = -1), {iqm['0']} (I = 0, the baseline) and {iqm['1']} (I = 1)" in text
    rows = re.findall(r"^\| Syn \(I=(-?\d):[^|]*((?:\| [\d.]+ \(3\) )+)\|$", across, re.M)
    means = {i: [float(x) for x in re.findall(r"([\d.]+) \(3\)", cells)] for i, cells in rows}
    names = ["Musk1", "Musk2", "Elephant", "Fox", "Tiger"]
    by_dataset = list(zip(*(means[i] for i in ("-1", "0", "1"))))
    assert len(by_dataset) == 5 and max(max(d) - min(d) for d in by_dataset) <= 0.03
    first = {name: ("-1", "0", "1")[int(max(range(3), key=lambda k: d[k]))] for name, d in zip(names, by_dataset)}
    assert first == {"Musk1": "0", "Musk2": "0", "Elephant": "1", "Fox": "1", "Tiger": "-1"}, first
    assert (
        "differ by at most 0.03" in text
        and "I = 0 first on Musk1 and Musk2, I = 1 on Elephant and Fox, I = -1 on Tiger" in text
    )


def test_the_first_sweeps_figures_are_quoted_alike_with_where_they_came_from() -> None:
    """The tutorial's `ablate runs` table, the README's sentence and the AVX512 column of the identity page's
    measurement are one run's figures: each names the machine, kernels and commit it came from, and a figure
    changed in one place fails until the others follow."""
    tutorial = (ROOT / "docs/tutorials/first-ablation.md").read_text()
    rows = first_sweep_figures()
    assert len(rows) == 4, rows
    figures = {(kind, seed): float(value) for (_, kind, seed), value in rows.items()}
    readme = " ".join((ROOT / "README.md").read_text().split())
    quoted = (f"test top-1 {figures['softmax', 0]:.1f} and {figures['softmax', 1]:.1f}% for softmax, "
              f"{figures['csan', 0]:.1f} and {figures['csan', 1]:.1f}% for CSaN")  # fmt: skip
    assert quoted in readme, quoted
    identity = (ROOT / "docs/concepts/identity.md").read_text()
    for (key, kind, seed), value in rows.items():
        assert re.search(rf"^\| {key} {kind} \| {seed} \| {value} \|", identity, re.M), (key, value)
    cpu, capability, _, torch = QUOTED_ON
    commit = re.search(r"at commit (\w{7})", identity)
    assert commit
    for text in (tutorial, readme, identity):
        flat = " ".join(text.split())
        assert f"{cpu} with torch {torch}" in flat and capability in flat and f"commit {commit[1]}" in flat


def test_every_test_the_comparison_page_names_exists() -> None:
    """docs/why.md backs each claim about ablate with a test by name: a renamed or removed test unbacks it."""
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", (ROOT / "docs/why.md").read_text())
    assert len(named) > 10
    missing = [f"{f}::{t}" for f, t in named if not (ROOT / f).is_file() or f"def {t}(" not in (ROOT / f).read_text()]
    assert not missing, missing


def test_the_plugin_tutorial_runs_as_written(reader: Path) -> None:
    shutil.copytree(ROOT / "examples", reader / "examples", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    # in fresh processes: the session's Ray workers live on after the test, and would keep this copy's `cosine`
    # registered beside another test's copy of the same file (a RegistryError there, as in one Ray job of two
    # projects' same-named plugins; each `ablate launch` is a Ray job of its own)
    listed, checked, launched, reported, _, again = run_page("tutorials/plugin.md", reader, fresh=True)
    assert re.search(r"mechanism\s+│\s+cosine\s+│\s+ablate_plugin_\w+:CosineAttention", listed), listed
    assert checked.count(" ok ") == 3, checked
    assert "done 6; 0 already done" in launched and "reports/cosine/index.html" in reported
    assert re.search(r"cosine\s+│\s+cosine:CosineAttention \(\S+site-packages/cosine.py\)", again), again


# --------------------------------------------------------------------------------------------------- browser
def site_pages(site: Path) -> list[Path]:
    """The site's pages and the gallery's reports: every HTML file but the theme's, search's and the 404 page
    (a server's page: its links are absolute)."""
    skip = {site / "404.html", site / "_harness.html"}
    return sorted(p for p in site.rglob("*.html") if p not in skip and p.relative_to(site).parts[0] != "assets")


def test_every_link_of_the_site_opened_as_a_file_leads_to_a_file(site: Path) -> None:
    """README: open build/site/index.html. Opened as a file (no server), a link to a folder shows a listing, so
    every relative link must name an HTML file (use_directory_urls: false); search alone needs a server."""
    links = 0
    for page in site_pages(site):
        for href in re.findall(r'<a [^>]*href="([^"#][^"]*)"', page.read_text()):
            url = urlsplit(href)
            if url.scheme or url.netloc:
                continue
            links += 1
            assert (page.parent / unquote(url.path)).is_file(), f"{page.relative_to(site)}: {href}"
    assert links > 500
    assert (site / "index.html").is_file() and (site / "reference/cli.html").is_file()


HARNESS = """<!doctype html><html><body><pre id="out"></pre>FRAMES<script>
window.addEventListener("load", () => {
  const out = document.getElementById("out");
  for (const frame of document.querySelectorAll("iframe")) {
    for (const i of frame.contentDocument.images) {
      if (!i.complete || i.naturalWidth === 0) out.textContent += `BROKEN ${frame.src} ${i.src}\\n`;
    }
    out.textContent += `VISITED ${frame.src}\\n`;
  }
  out.textContent += "DONE";
});
</script></body></html>"""
"""Opens every page in a frame of one browser page; once all of them have loaded (the page's load event waits for
its frames and their images, and the browser dumps the page after it), writes down each image that did not load."""


def browse(site: Path, tmp_path: Path) -> tuple[str, str, list[str]]:
    """Every page of `site` (and the gallery's reports) through a local HTTP server (Python's, in a process of its
    own) in headless Chromium: the DOM the harness wrote, the browser's log and the pages."""
    pages = [str(p.relative_to(site)) for p in site_pages(site)]
    frames = "".join(f'<iframe width="1200" height="900" src="{page}"></iframe>' for page in pages)
    (site / "_harness.html").write_text(HARNESS.replace("FRAMES", frames))
    server = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(site)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        port = re.search(r" port (\d+) ", server.stdout.readline())  # type: ignore[union-attr]  # once it listens
        assert port is not None
        url = f"http://127.0.0.1:{port.group(1)}/_harness.html"
        done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                               "--v=0", f"--user-data-dir={tmp_path / 'profile'}",
                               "--dump-dom", url], capture_output=True, text=True, timeout=180)  # fmt: skip
    finally:
        server.kill()
        server.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr, pages


def test_every_page_shows_in_chromium_without_console_errors_or_broken_images(site: Path, tmp_path: Path) -> None:
    dom, log, pages = browse(site, tmp_path)
    dom = dom.split("</pre>")[0]  # what the harness wrote, not its script
    assert len(pages) > 15 and "DONE" in dom and dom.count("VISITED ") == len(pages), dom[-2000:]
    assert "BROKEN" not in dom, dom
    assert not [line for line in log.splitlines() if "CONSOLE" in line], log[-3000:]
    # opened as a file, as the README says: the page and its navigation render, every nav link a page's file
    opened = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                             f"--user-data-dir={tmp_path / 'file'}", (site / "quickstart.html").as_uri()],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    nav = re.findall(r'<a href="([^"#]+)" class="md-nav__link', opened.stdout)
    assert "Quick start" in opened.stdout and len(nav) > 20, opened.stdout[-2000:]
    assert all(href.endswith(".html") and (site / href).is_file() for href in nav), nav
