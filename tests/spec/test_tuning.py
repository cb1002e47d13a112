"""Tuning (issue 30): the `tune:` block's validation, proposals replayed from a seed and the results (the same in
any process, after a relaunch, an interruption or a larger budget), and Dodge et al.'s expected best against
hand computation and simulation."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import optuna
import pytest
from pydantic import ValidationError

from ablate.planning.search import Failed, Result, Search, best, proposals
from ablate.reporting.expected_best import ExpectedBest, expected_best, stable_budget
from ablate.spec.problems import clean_loc
from ablate.spec.tuning import MAX_BUDGET, TuneSpec

SPACE = {"train.lr": {"log": [1e-4, 3e-3]}, "train.weight_decay": [0.01, 0.05], "model.depths": [[2], [4]]}


def spec(**over: Any) -> TuneSpec:
    return TuneSpec.model_validate({"space": SPACE, "budget": 12, "metric": "val.top1", **over})


def score(config: dict[str, Any]) -> float:
    """A made-up validation score: best at lr 1e-3, a little better with more depth, and some made-up noise
    that depends on the whole configuration."""
    lr, depth = config.get("train.lr", 1e-3), config.get("model.depths", [0])[0]
    return -abs(math.log10(lr) + 3) + 0.1 * depth + sum(map(ord, json.dumps(config, sort_keys=True))) % 7 / 100


def search(s: TuneSpec, results: list[Result] | None = None) -> tuple[list[dict[str, Any]], list[Result]]:
    """Run an arm's search to its budget as launches would: propose, score what is new, propose again. Each
    call must keep what was proposed before."""
    results = list(results or [])
    shown: list[dict[str, Any]] = []
    while True:
        got = proposals(s, results)
        assert got[: len(shown)] == shown
        shown = got
        if len(results) >= len(got):
            return got, results
        results += [score(c) for c in got[len(results) :]]


# ------------------------------------------------------------------------------------------------ proposals
def test_proposals_are_deterministic_for_a_seed_and_history_and_another_seed_differs():
    before = optuna.logging.get_verbosity()
    configs, results = search(spec())
    assert optuna.logging.get_verbosity() == before  # silenced only while proposing
    assert len(configs) == len(results) == 12
    assert proposals(spec(), results) == configs
    assert proposals(spec(seed=1), []) != configs[:4]
    assert all(1e-4 <= c["train.lr"] <= 3e-3 and c["model.depths"] in ([2], [4]) for c in configs)


def test_a_relaunch_or_an_interrupted_round_replays_the_same_proposals():
    """Results of the first k rounds give the same k + 1 rounds as the whole search; a round with any result
    missing (a launch killed mid-round) is proposed again identically, and nothing after it."""
    s = spec()
    configs, results = search(s)
    for k in range(0, 12, 4):
        assert proposals(s, results[:k]) == configs[: k + 4]
        assert proposals(s, results[:k] + [results[k], None, results[k + 2]]) == configs[: k + 4]
        assert proposals(s, results[: k + 3]) == configs[: k + 4]
    assert proposals(s, [*results, 0.5, 0.7]) == configs  # results past the budget are not asked for


def test_a_search_kept_in_memory_proposes_what_a_replay_does():
    """Advanced as results come in (a round partly known, then known), it proposes what `proposals` replays;
    a result that changed since it was told (a trial run again) starts it over, as a replay would."""
    s = spec()
    configs, results = search(s)
    kept = Search(s)
    for k in range(0, 13, 2):
        assert kept.advance(results[:k]) == proposals(s, results[:k])
    assert kept.advance(results) == configs
    changed = [*results[:5], 10.0, *results[6:]]  # the best now
    assert kept.advance(changed) == proposals(s, changed) != configs
    assert kept.advance(results) == configs


def test_extending_the_budget_keeps_the_configurations_already_tried():
    few, results = search(spec(budget=12))
    grown = proposals(spec(budget=20), results)
    assert grown[:12] == few and len(grown) == 16
    more, _ = search(spec(budget=20), results)
    assert more[:12] == few and len(more) == 20
    odd, _ = search(spec(budget=10))  # a last round cut short by the budget is the start of the full one
    assert odd == few[:10]


def test_tpe_learns_from_the_results_of_earlier_rounds():
    """The second round differs when the first round's results differ; random search's does not (the check
    sees the sampler's use of the results, not a change of its random stream)."""
    tpe, rnd = spec(budget=8), spec(budget=8, sampler="random")
    for s, learns in [(tpe, True), (rnd, False)]:
        first = proposals(s, [])
        assert len(first) == 4
        a = proposals(s, [1.0, 0.0, 0.0, 0.0])
        b = proposals(s, [0.0, 0.0, 0.0, 1.0])
        assert a[:4] == b[:4] == first
        assert (a[4:] != b[4:]) is learns


def test_failed_configurations_are_told_as_failed_and_the_search_goes_on():
    s = spec(budget=8)
    failed = proposals(s, [Failed(), 0.3, Failed(), 0.1])
    assert len(failed) == 8 and proposals(s, [math.nan, 0.3, math.inf, 0.1]) == failed
    assert failed[4:] != proposals(s, [0.9, 0.3, 0.9, 0.1])[4:]


def test_the_grid_sampler_tries_every_point_of_the_grid_once():
    space = {"a": [1, 2], "b": ["x", "y", "z"], "model.depths": [[2], [4]]}
    every = proposals(spec(space=space, sampler="grid", budget=12), [])
    assert len(every) == 4  # the first round
    every, _ = search(spec(space=space, sampler="grid", budget=12))
    assert sorted(json.dumps(c, sort_keys=True) for c in every) == sorted(
        json.dumps({"a": a, "b": b, "model.depths": d}, sort_keys=True)
        for a, b, d in itertools.product([1, 2], "xyz", [[2], [4]])
    )
    part, _ = search(spec(space=space, sampler="grid", budget=5, seed=3))
    assert len({json.dumps(c, sort_keys=True) for c in part}) == 5


def test_proposals_do_not_depend_on_the_process_or_the_order_the_space_is_written_in():
    """Another process, with another string-hash seed, proposes the same configurations from the same results
    (a seed from Python's hash() would not), and prints nothing else (Optuna logs each study it creates); a
    space written in another order proposes them too."""
    configs, results = search(spec())
    code = (
        "import json, sys; from ablate.planning.search import proposals; from ablate.spec.tuning import TuneSpec; "
        "s, r = json.loads(sys.argv[1]); print(json.dumps(proposals(TuneSpec.model_validate(s), r)))"
    )
    arg = json.dumps([spec().model_dump(), results])
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout) == configs and done.stderr == ""
    reordered = dict(reversed(list(SPACE.items())))
    assert proposals(spec(space=reordered), results) == configs


def test_best_is_the_earliest_of_the_best_known_results():
    s = spec(budget=5)
    assert best(s, [0.2, None, 0.9, Failed(), 0.9]) == 2
    assert best(s, [0.2, math.nan, 0.9, 0.1, 0.05, 0.01]) == 2  # past the budget: not a candidate
    assert best(spec(budget=5, metric="val.loss"), [0.2, math.nan, 0.9, 0.1, 0.1, 0.01]) == 3
    assert best(s, [None, Failed(), math.nan]) is None and best(s, []) is None


# ----------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "over, at, says",
    [
        ({"space": {}}, ("space",), "at least 1 item"),
        ({"space": {"train.lr": {"log": [0, 1e-3]}}}, ("space", "train.lr", "log"), "lo > 0"),
        ({"space": {"train.lr": {"log": [1e-2, 1e-3]}}}, ("space", "train.lr", "log"), "lo < hi"),
        ({"space": {"train.lr": {"range": [0.5, 0.5]}}}, ("space", "train.lr", "range"), "lo < hi"),
        ({"space": {"train.epochs": {"int": [8, 2]}}}, ("space", "train.epochs", "int"), "lo < hi"),
        ({"space": {"train.epochs": {"int": [1.5, 4]}}}, ("space", "train.epochs", "int", 0), "valid integer"),
        ({"space": {"train.lr": {"log": [1e-4, 1e-3, 1e-2]}}}, ("space", "train.lr", "log"), "at most 2"),
        ({"space": {"train.lr": {"loguniform": [1e-4, 1e-3]}}}, ("space", "train.lr"), "{log: [lo, hi]}"),
        ({"space": {"train.lr": {"log": [1e-4, 1e-3], "step": 2}}}, ("space", "train.lr", "step"), "Extra"),
        ({"space": {"train.lr": 1e-3}}, ("space", "train.lr"), "a non-empty list of values"),
        ({"space": {"train.lr": []}}, ("space", "train.lr"), "a non-empty list of values"),
        ({"space": {"train.lr": [1e-3, 1e-3]}}, ("space",), "train.lr: [0.001]"),
        ({"space": {"train": [1, 2], "train.lr": [1, 2]}}, ("space",), "train and train.lr"),
        ({"space": {"train..lr": [1, 2]}}, ("space",), "dotted config paths"),
        ({"metric": "test.top1"}, ("metric",), "the test split never chooses"),
        ({"metric": "top1"}, ("metric",), "val.top1"),
        ({"budget": MAX_BUDGET + 1}, ("budget",), f"less than or equal to {MAX_BUDGET}"),
        ({"budget": 0}, ("budget",), "greater than or equal to 1"),
        ({"budget": True}, ("budget",), "boolean"),
        ({"batch": 0}, ("batch",), "greater than or equal to 1"),
        ({"sampler": "grid"}, ("sampler",), "['train.lr'] are not"),
        ({"sampler": "grid", "space": {"a": [1, 2], "b": [3, 4]}, "budget": 5}, ("budget",), "grid has 4"),
        ({"sampler": "cmaes"}, ("sampler",), "'tpe', 'random' or 'grid'"),
        ({"direction": "maximize"}, ("direction",), "'max' or 'min'"),
        ({"trials": 3}, ("trials",), "Extra"),
    ],
)
def test_the_tune_block_refuses_what_no_search_can_be(over, at, says):
    """Each refusal at the key path the spec loader shows (clean_loc drops pydantic's union tags)."""
    data = {"space": SPACE, "budget": 12, "metric": "val.top1", **over}
    with pytest.raises(ValidationError) as err:
        TuneSpec.model_validate(data)
    (e,) = err.value.errors()
    assert clean_loc(tuple(e["loc"]), data) == at and says in e["msg"]


def test_the_tune_block_takes_each_kind_of_dimension():
    s = spec(space={"train.lr": {"log": ["1e-4", 3e-3]}, "model.drop_path": {"range": [0, 0.3]},
                    "train.epochs": {"int": [2, 8]}, "model.stack": ["pure", "alternating"]})  # fmt: skip
    configs, _ = search(s)
    assert s.space["train.lr"].log == (1e-4, 3e-3)  # type: ignore[union-attr]
    for c in configs:
        assert 1e-4 <= c["train.lr"] <= 3e-3 and 0 <= c["model.drop_path"] <= 0.3
        assert isinstance(c["train.epochs"], int) and 2 <= c["train.epochs"] <= 8
        assert c["model.stack"] in ("pure", "alternating")


# ------------------------------------------------------------------------------------------- expected best
def test_expected_best_matches_hand_computation():
    """N = 3 results 1, 2, 4 (given unsorted). The best of n is the i-th smallest with probability
    (i/3)^n - ((i-1)/3)^n:
      n = 1: weights 1/3, 1/3, 1/3      mean 7/3           var (16/9 + 1/9 + 25/9) / 3 = 14/9
      n = 2: weights 1/9, 3/9, 5/9      mean 27/9 = 3      var (4 + 3 + 5) / 9 = 4/3
      n = 3: weights 1/27, 7/27, 19/27  mean 91/27         var (64^2 + 7 * 37^2 + 19 * 17^2) / 27^3 = 19170/19683
    The expected minimum of 2: 1 with probability 5/9, 2 with 3/9, 4 with 1/9: 15/9, the same variance as the
    maximum of the negated results: (5 (1 - 5/3)^2 + 3 (2 - 5/3)^2 + (4 - 5/3)^2) / 9 = 8/9."""
    curve = expected_best([4.0, 1.0, 2.0])
    assert curve.n.tolist() == [1, 2, 3]
    assert curve.mean == pytest.approx([7 / 3, 3, 91 / 27])
    assert curve.var == pytest.approx([14 / 9, 4 / 3, 19170 / 19683])
    assert curve.std == pytest.approx(np.sqrt([14 / 9, 4 / 3, 19170 / 19683]))
    low = expected_best([4.0, 1.0, 2.0], "min")
    assert low.mean[1] == pytest.approx(15 / 9) and low.var[1] == pytest.approx(8 / 9)
    assert low.mean[0] == pytest.approx(7 / 3) and low.mean[2] == pytest.approx((19 * 1 + 7 * 2 + 1 * 4) / 27)


def test_expected_best_is_the_mean_at_one_and_rises_to_the_best_as_a_simulation_says():
    rng = np.random.default_rng(0)
    values = rng.normal(70, 3, 6)
    for direction, pick in [("max", np.max), ("min", np.min)]:
        curve = expected_best(values, direction)
        assert curve.mean[0] == pytest.approx(values.mean())
        steps = np.diff(curve.mean) if direction == "max" else -np.diff(curve.mean)
        assert (steps > 0).all() and abs(curve.mean[-1] - values.mean()) < abs(pick(values) - values.mean())
        draws = rng.choice(values, size=(200_000, 6))  # the best of n draws, with replacement
        for n in range(1, 7):
            best_of_n = pick(draws[:, :n], axis=1)
            assert curve.mean[n - 1] == pytest.approx(best_of_n.mean(), abs=0.03)
            assert curve.var[n - 1] == pytest.approx(best_of_n.var(), rel=0.03)
    assert expected_best(np.full(4, 2.5)).mean == pytest.approx([2.5] * 4)
    assert expected_best([3.0]).var.tolist() == [0.0]


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [[1.0, 2.0]], [math.inf]])
def test_expected_best_refuses_what_is_not_a_list_of_finite_results(bad):
    with pytest.raises(ValueError, match="finite results"):
        expected_best(bad)


def curve(*mean: float) -> ExpectedBest:
    return ExpectedBest(np.array(mean), np.zeros(len(mean)))


def test_the_ranking_stops_changing_at_the_smallest_budget_from_which_it_holds():
    """a overtakes b at n = 3 and stays ahead; c is behind both throughout; d's budget is longer but only the
    budgets every arm reached (4) count."""
    arms = {"a": curve(1, 2, 3, 4), "b": curve(2, 2.5, 2.8, 3), "c": curve(0, 0.5, 1, 1.5, 9, 9)}
    assert stable_budget(arms) == 3
    assert stable_budget({"a": arms["a"], "c": arms["c"]}) == 1  # never changed
    assert stable_budget({"a": arms["a"], "f": curve(2.5, 2.5, 2.5, 2.5, 2.5)}) == 3  # f is ahead until 3
    assert stable_budget({**arms, "d": curve(5, 2.9, 2.7, 2.9)}) == 3  # d falls below b at 3
    assert stable_budget({**arms, "e": curve(0, 0, 0, 5)}) == 4  # still moving at the last budget seen
    assert stable_budget({"a": curve(1, 2, 1)}) == 1
    with pytest.raises(ValueError, match="no arms"):
        stable_budget({})
