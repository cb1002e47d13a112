"""The methods paragraph (`ablate.reporting.methods`): two different sweeps, a fractional design at 7 seeds with a
recorded environment and a tuned pair at 10 seeds without one, give two different paragraphs, each number of which is
read back from the store here (not from the report's code); methods.tex carries the report's tables."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import TINY, write_sweeps
from sqlalchemy import update
from synthetic import fill, switches
from test_rounds import LRS, simulate, tuned

from ablate.evidence import EXACT_N, LEVEL, SMALL_N
from ablate.planning.designs import DesignPlan
from ablate.planning.keys import Trial
from ablate.planning.plan import plan
from ablate.reporting import report
from ablate.spec.tuning import Searches
from ablate.store import Store
from ablate.store.queries import TRIALS

GPU = {"python": "3.12.7", "packages": {"torch": "2.5.1+cu124", "ablate": "0.9.2"},
       "arithmetic": {"device": "NVIDIA H200", "cpu": "Intel Xeon Platinum 8480C"}}  # fmt: skip
CPU = {"python": "3.12.7", "packages": {"torch": "2.5.1+cpu", "ablate": "0.9.2"},
       "arithmetic": {"device": "cpu", "cpu": "AMD EPYC 7763"}}  # fmt: skip
CODE = {"digest": "5f3a9c07e1d24b68", "git": {"sha": "9e1c2b7a40d3f5e6b8a1c9d0e2f4a6b8c0d1e3f5", "dirty": False}}
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)*(?:e-\d+)?(?![\w])")
"""A number as the paragraph writes one (a version such as 2.5.1 is one), not the digits inside a word."""


@pytest.fixture
def store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 'm.sqlite'}") as s:
        yield s


def value(t: Trial) -> float:
    """tau +2, and seed noise of each cell's own (so that paired differences have a spread)."""
    a = t.axes
    cell = (
        0.9 * a["attention.tau"]
        + 1.1 * a["attention.mu"]
        + 0.7 * a["attention.kappa_priv"]
        + 0.5 * a["attention.bounded"]
    )
    return 80 + 2 * a["attention.tau"] + 0.3 * math.sin(3 * a["seed"] + cell)


def designed(store: Store, tmp_path: Path) -> list[str]:
    """A 2^(4-1) fraction of four CSaN switches at 7 seeds, 3 epochs; one trial failed; the environment recorded for
    the first 30 finished trials (20 on a GPU, 10 on a CPU), the code for every finished one. Returns the done keys."""
    body = {"base": {**TINY, "attention": {"kind": "csan"}, "train": {**TINY["train"], "epochs": 3, "lr": 3e-3}},
            "grid": switches(4), "seeds": 7, "design": {"fractional": {"resolution": 4}},
            "baseline": {a: v[0] for a, v in switches(4).items()}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / "fraction.yaml", {"fraction": body}), "fraction")
    lost = p.trials[-1].key
    fill(store, p, value, state=lambda t: "failed" if t.key == lost else "done")
    done = [t.key for t in p.trials if t.key != lost]
    with store.engine.begin() as conn:
        for keys, env in ((done[:20], GPU), (done[20:30], CPU)):
            conn.execute(update(TRIALS).where(TRIALS.c.key.in_(keys)).values(environment=env))
        conn.execute(update(TRIALS).where(TRIALS.c.key.in_(done)).values(code=CODE, code_digest=CODE["digest"]))
    return done


def methods(out: Path, sweep: str) -> tuple[str, str]:
    """The paragraph as methods.md has it, and methods.tex."""
    md = (out / sweep / "methods.md").read_text()
    return md.split("\n\n")[1], (out / sweep / "methods.tex").read_text()


def traced(paragraph: str, values: set[str]) -> list[str]:
    """The numbers of `paragraph` (code spans left out: names, digests) that are not among `values`."""
    plain = re.sub(r"`[^`]*`", "", paragraph)
    return [n for n in NUMBER.findall(plain) if n not in values]


def policy() -> set[str]:
    """The small-sample policy's numbers: the level, alpha, where each test starts."""
    return {f"{LEVEL:.0%}"[:-1], f"{1 - LEVEL:.2f}", str(SMALL_N), str(EXACT_N), str(SMALL_N - 1)}


def config_numbers(config: dict[str, Any]) -> set[str]:
    train = config["train"]
    return {str(train[k]) for k in ("epochs", "lr", "weight_decay", "batch_size")}


def test_two_sweeps_give_two_paragraphs_each_number_read_from_the_store(store, tmp_path) -> None:
    done = designed(store, tmp_path)
    f = tuned(tmp_path, tune={"space": {"train.lr": LRS}, "sampler": "grid", "budget": 4, "batch": 2,
                              "metric": "val.top1", "seed": 3},
              grid={"attention.kind": ["softmax", "csan"]}, seeds=10, epochs=1)  # fmt: skip
    simulate(store, plan(f))
    out = tmp_path / "rep"
    report("fraction", store=store, out=out, formats=["md", "tex", "csv"])
    report("t", store=store, out=out, formats=["md", "csv"], correction="bh")
    first, first_tex = methods(out, "fraction")
    second, _ = methods(out, "t")
    assert first != second

    # the designed sweep: every fact read back from the store
    record = store.sweep("fraction")
    chosen = DesignPlan.from_json(record.spec["design"])
    trials = store.trials_frame("fraction")
    config = store.trial(done[0]).config
    variants = pd.read_csv(out / "fraction" / "variants.csv", index_col=0)
    tested = variants[variants["p_adj"].notna()]
    seeds = sorted(trials["seed"].unique())
    per_variant = trials[trials["state"] == "done"].groupby("variant").size()
    assert f"We compare {trials['variant'].nunique()} variants" in first
    assert f"{chosen.title} ({len(chosen.runs)} of the full grid's {chosen.full})" in first
    assert f"The trials ran at seeds {seeds[0]} to {seeds[-1]} ({len(done)} of {len(trials)} finished" in first
    assert f"are over its {per_variant.min()} to {per_variant.max()} independent seeds with a result" in first
    assert (f"{config['train']['epochs']} epochs, optimizer {config['train']['opt']}, learning rate "
            f"{config['train']['lr']}, weight decay {config['train']['weight_decay']}, batch size "
            f"{config['train']['batch_size']}") in first  # fmt: skip
    assert f"the exact sign-flip (randomisation) test of the mean paired difference (from {EXACT_N} to " in first
    assert f"for {len(tested)} comparisons" in first and f"The {len(tested)} p-values" in first
    assert "by Holm's method, which controls the family-wise error rate" in first
    envs = {k: store.trial(k).environment for k in done}
    gpu = sum(e is not None and e["arithmetic"]["device"] == "NVIDIA H200" for e in envs.values())
    cpu = sum(e is not None and e["arithmetic"]["device"] == "cpu" for e in envs.values())
    assert (f"The finished trials ran on NVIDIA H200 ({gpu} trials) and a CPU ({CPU['arithmetic']['cpu']}) ({cpu} "
            f"trials), with Python {GPU['python']}, PyTorch {GPU['packages']['torch']} ({gpu} trials) and "
            f"{CPU['packages']['torch']} ({cpu} trials) and ablate {GPU['packages']['ablate']} (as {gpu + cpu} of the "
            f"{len(done)} recorded it).") in first  # fmt: skip
    codes = {store.trial(k).code["digest"] for k in done}
    sha = {store.trial(k).code["git"]["sha"] for k in done}
    assert f"fingerprint `{codes.pop()}`" in first and f"from git commit {sha.pop()}." in first
    numbers = {str(len(done)), str(len(trials)), str(trials["variant"].nunique()), str(len(tested)),
               str(len(chosen.runs)), str(chosen.full), *map(str, seeds), *map(str, per_variant),
               *re.findall(r"\d+", chosen.title), str(gpu), str(cpu), str(gpu + cpu),
               *(n for e in envs.values() if e for n in NUMBER.findall(json.dumps(e))),
               *config_numbers(config), *policy()}  # fmt: skip
    assert traced(first, numbers) == []
    assert "confidence bands" not in first and "tuning curves" not in first  # not tuned: no bands, no sentence
    assert "\\begin{tabular}" in first_tex and "\\documentclass" not in first_tex  # a fragment to \input
    tables = (out / "fraction" / "tables.tex").read_text()
    body = tables[tables.index("\\subsection*") : tables.index("\\end{document}")]
    assert first_tex.endswith(body)  # the report's tables, with their captions
    assert first_tex.isascii() and first_tex.count("{") == first_tex.count("}")
    if engine := shutil.which("pdflatex") or shutil.which("lualatex"):  # as a paper would \input it
        paper = "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\\input{methods}\\end{document}\n"
        (out / "fraction" / "paper.tex").write_text(paper)
        done = subprocess.run([engine, "-interaction=nonstopmode", "-halt-on-error", "paper.tex"],
                              cwd=out / "fraction", capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:]

    # the tuned sweep: its budget, space, sampler and rule; t-tests; BH; no environment or code: no sentence
    searches = Searches.model_validate(store.sweep("t").spec["tuning"])
    spec = searches.spec
    trials = store.trials_frame("t")
    variants = pd.read_csv(out / "t" / "variants.csv", index_col=0)
    tested = variants[variants["p_adj"].notna()]
    config = store.trial(trials["key"].iloc[0]).config
    assert (f"Each of the {len(searches.arms)} arms was tuned alike, with a budget of {spec.budget} configurations of "
            f"train.lr one of {LRS}, proposed by Optuna's {spec.sampler} sampler (seed {spec.seed}, the same for every "
            f"arm) in rounds of {spec.batch}") in second  # fmt: skip
    assert "the configuration with the highest `val.top1` was selected" in second
    assert (
        f"{config['train']['epochs']} epoch, " in second and "learning rate" not in second
    )  # searched: each arm's own, not the recipe's
    assert f"(all {len(trials)} finished)" in second
    assert f"are over its {trials.groupby('variant').size().max()} independent seeds with a result" in second
    assert f"the paired t-test (from {SMALL_N} pairs) for {len(tested)} comparison" in second
    assert "With one test in the variant table, no p-value needed adjusting" in second
    assert "Intervals are 95%: the t interval of the mean paired difference and standardised effects" in second
    assert "finished trials ran" not in second and "fingerprint" not in second  # nothing recorded, nothing said
    states = store.trials_frame("t/tuning").drop_duplicates("key").set_index("key")["state"]
    finished = {sum(states.get(k) == "done" for k in a.search if k) for a in searches.arms}
    [ran] = finished  # every arm's search finished as many configurations
    each = f"{(1 - (1 - LEVEL) / len(searches.arms)) * 100:.4g}"
    assert (f"Each arm's tuning curves, the expected (Dodge et al.) and the median best `{spec.metric}` of n "
            f"configurations drawn from its search's results, for every n up to its {ran} configurations with a "
            "result, have distribution-free confidence bands simultaneous over n") in second  # fmt: skip
    assert (
        f"each arm's at {each}% so that the {len(searches.arms)} arms' bands hold together at 95%, for scores "
        "within [0, 100]; an arm is called better once tuned at the budgets n where its median band"
    ) in second
    numbers = {str(len(searches.arms)), str(spec.budget), str(spec.seed), str(spec.batch), str(len(trials)),
               str(ran), each, "0", "100",
               str(trials["variant"].nunique()), *map(str, trials["seed"]), *map(str, LRS),
               *config_numbers(config), *policy()}  # fmt: skip
    assert traced(second, numbers) == []


def test_a_cross_validated_sweep_says_its_folds_repeats_and_the_corrected_test(store, tmp_path) -> None:
    """Under k-fold cross-validation the means are over every fold's result and n counts the repeats: the paragraph
    says both, k as the trials' configs hold it, and the corrected resampled t the table used."""
    body = {"base": {**TINY, "data": {"name": "digits", "folds": 5}}, "seeds": 2,
            "baseline": {"attention.kind": "softmax"},
            "grid": {"attention.kind": ["softmax", "csan"], "data.fold": [0, 1, 2, 3, 4]}}  # fmt: skip
    p = plan(write_sweeps(tmp_path / "cv.yaml", {"cv": body}), "cv")
    fill(
        store,
        p,
        lambda t: 70 + math.sin(3 * t.axes["seed"] + 1.7 * t.axes["data.fold"] + (t.config.attention.kind == "csan")),
    )
    report("cv", store=store, out=tmp_path / "rep", formats=["md"])
    paragraph, _ = methods(tmp_path / "rep", "cv")
    trials = store.trials_frame("cv")
    k = store.trial(trials["key"].iloc[0]).config["data"]["folds"]
    per_variant = trials.groupby("variant").size().iloc[0]
    assert (f"are over its {per_variant} fold results, from {trials['seed'].nunique()} independent repeats of a "
            f"{k}-fold cross-validation.") in paragraph  # fmt: skip
    assert (
        f"the corrected resampled t-test of Nadeau and Bengio (2003) over the folds (from {SMALL_N} fold" in paragraph
    )
    assert "Intervals are 95%: the corrected resampled t interval" in paragraph
