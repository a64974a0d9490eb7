"""Each extension point lists its kinds once: a search strategy, an adaptation mode or a model kind added to its
registry is offered by the command line, checked by the commands' options, and made by its factory or loader."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from costlab.cli import build_parser
from costlab.costmodels import kinds, predictors
from costlab.costmodels.recipes import ADAPT_MODES, FIT_LISTS, RECIPES, AdaptMode, recipe
from costlab.export import search
from costlab.export.search import STRATEGIES, Strategy, draft_cost_model, make_strategy
from costlab.featurizers import create

DATA = Path(__file__).parent / "fixtures" / "ms_small.h5"


def _subparsers(parser=None):
    parser = parser or build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def _parser(command):
    return _subparsers().choices[command]


def _tune_parser():
    return _parser("tune")


def _option(parser, flag):
    return next(a for a in parser._actions if flag in a.option_strings)


def test_every_strategy_and_mode_is_offered_with_its_help():
    tune = _tune_parser()
    strategy, adapt = _option(tune, "--strategy"), _option(tune, "--adapt")
    assert list(strategy.choices) == list(STRATEGIES)
    assert list(adapt.choices) == ["auto", *ADAPT_MODES]
    text = " ".join(tune.format_help().split())
    for spec in STRATEGIES.values():
        assert spec.name in text and spec.help in text
    for name, mode in ADAPT_MODES.items():
        assert f"{name}: {mode.help}" in text


def test_a_strategy_added_to_the_registry_is_offered_and_made(monkeypatch):
    made = []

    def factory(**kwargs):
        made.append(kwargs)
        return "toy search"

    monkeypatch.setitem(STRATEGIES, "toy", Strategy("toy", "a strategy of this test", needs_model=True,
                                                    population=64, factory=factory,
                                                    cost_model=lambda model, fraction: ("wrapped", model, fraction)))
    strategy = _option(_tune_parser(), "--strategy")
    assert "toy" in strategy.choices and "a strategy of this test" in strategy.help
    assert _tune_parser().parse_args(["--strategy", "toy", "--work-dir", "w"]).strategy == "toy"

    assert make_strategy("toy", verify_fraction=0.2, log="log") == "toy search"
    assert made == [dict(population=64, verify_fraction=0.2, first_rounds=(8, 16, 32), log="log")]
    make_strategy("toy", population=32)
    assert made[-1]["population"] == 32
    assert draft_cost_model("toy", "m", 0.3) == ("wrapped", "m", 0.3)
    assert draft_cost_model("model-led", "m") == "m"

    from costlab.common.errors import UsageError
    from costlab.export.tune import TuneOptions

    with pytest.raises(UsageError, match="--strategy toy needs a --model"):
        TuneOptions(work_dir="w", workloads=["GMM:1,8,8,8"], strategy="toy").check()
    with pytest.raises(UsageError, match="--strategy must be one of .*toy"):
        TuneOptions(work_dir="w", workloads=["GMM:1,8,8,8"], strategy="nope").check()


def test_an_adaptation_mode_added_to_the_registry_is_offered(monkeypatch):
    monkeypatch.setitem(ADAPT_MODES, "toy", AdaptMode("toy", "a mode of this test"))
    adapt = _option(_tune_parser(), "--adapt")
    assert "toy" in adapt.choices and "toy: a mode of this test" in adapt.help

    from costlab.common.errors import UsageError
    from costlab.export.tune import TuneOptions

    with pytest.raises(UsageError, match="--adapt must be one of auto, none, finetune, momentum, toy, not 'nope'"):
        TuneOptions(work_dir="w", workloads=["GMM:1,8,8,8"], adapt="nope").check()


def test_strategy_defaults_are_as_metaschedule_and_model_led_use_them():
    assert {n: (s.population, s.needs_model) for n, s in STRATEGIES.items()} == {
        "model-led": (256, True), "draft-verify": (512, True), "draft-filter": (512, True),
        "evolutionary": (512, False)}
    assert search.DEFAULT_WITH_MODEL in STRATEGIES and search.DEFAULT_WITHOUT_MODEL in STRATEGIES
    assert not STRATEGIES[search.DEFAULT_WITHOUT_MODEL].needs_model


def test_the_registries_are_read_without_tvm_or_torch():
    code = ("import sys\n"
            "from costlab.export.search import STRATEGIES, strategy_help\n"
            "from costlab.costmodels.recipes import ADAPT_MODES\n"
            "from costlab.costmodels import kinds\n"
            "strategy_help(), kinds.names(), kinds.create('psa'), kinds.create('xgb')\n"
            "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'tvm') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]", f"reading the registries imported {out.strip()}"


def test_an_adaptation_mode_adapts_as_its_record_says(monkeypatch):
    """``OnlineAdapter`` adapts a net as the mode's record says (through MoA's momentum copy, or in place), and
    refuses a mode that does not adapt."""
    from costlab.costmodels.adapt import OnlineAdapter
    from costlab.costmodels.momentum import MomentumTransfer

    monkeypatch.setitem(ADAPT_MODES, "toy-in-place", AdaptMode("toy-in-place", "adapts the net itself"))
    monkeypatch.setitem(ADAPT_MODES, "toy-momentum", AdaptMode("toy-momentum", "through a copy", momentum=True))
    pred = predictors.load("x86-cpu")
    assert OnlineAdapter(pred, "toy-in-place").wrapper is None
    assert isinstance(OnlineAdapter(pred, "toy-momentum").wrapper, MomentumTransfer)
    assert OnlineAdapter(pred, "finetune").wrapper is None
    assert isinstance(OnlineAdapter(pred, "momentum").wrapper, MomentumTransfer)
    with pytest.raises(ValueError, match="must be one of finetune, momentum, toy-in-place, toy-momentum, not 'none'"):
        OnlineAdapter(pred, "none")


def test_every_recipe_is_offered_and_says_what_runs_it():
    """``lightning`` is an entry of the recipes like the others; it names its runner (costlab train's trainer),
    and the loop of the other recipes refuses it."""
    recipe_option = _option(_parser("finetune"), "--recipe")
    assert list(recipe_option.choices) == list(RECIPES) == ["safe", "last", "all-guarded", "plain", "wise",
                                                            "lightning"]
    assert [n for n, r in RECIPES.items() if r.runner == FIT_LISTS] == ["safe", "last", "all-guarded", "plain",
                                                                          "wise"]
    assert recipe("lightning", runner=None).runner == "lightning"
    assert "runner" not in recipe("safe").to_dict()  # not an option: a model's recorded recipe is as before
    with pytest.raises(ValueError, match="recipe 'lightning' is run by lightning, not fit_lists"):
        recipe("lightning")


def test_model_kinds_are_offered_once():
    """The trained kinds are what ``costlab train --model`` offers; the kinds that need no weights are what
    ``--model`` takes by name; the draft and reference kinds are PSA and XGBoost."""
    assert kinds.names() == ("tlp", "pacm", "mtl", "xgb", "mlp", "psa", "random")
    assert list(_option(_parser("train"), "--model").choices) == list(kinds.trainable())
    assert kinds.untrained() == ("psa", "random")
    assert (kinds.draft(), kinds.reference()) == ("psa", "xgb")
    assert "or 'psa' or 'random'" in _option(_parser("evaluate"), "--model").help
    for name in kinds.untrained():
        assert predictors.load(name).kind == name and predictors.kind_of(name) == name


class _ToyPredictor:
    """Scores programs in the order they come (the last highest): a model of this test."""

    def __init__(self, kind: str, config: dict):
        self.kind, self.config, self.platforms = kind, config, list(config.get("platforms", []))
        self.featurizer = create("null")

    def predict(self, features: dict) -> np.ndarray:
        return np.arange(len(features["valid"]), dtype=np.float64)[:, None]


class _ToyKind(kinds.ModelKind):
    """A trained kind of this test: stored as an artifact, loaded by its own ``predictor``."""

    name, title, featurizer, learned = "toy", "Toy", "null", False

    def predictor(self, art=None, seed: int = 0):
        return _ToyPredictor(self.name, art.config)


class _DrawKind(kinds.ModelKind):
    """A kind of this test that needs no weights."""

    name, title, featurizer = "draw", "Draw", "null"
    learned = trained = False

    def predictor(self, art=None, seed: int = 0):
        return _ToyPredictor(self.name, {})


@pytest.fixture
def toy_kinds(monkeypatch):
    kinds.names()  # the built-in kinds first
    monkeypatch.setitem(kinds._REGISTRY, "toy", _ToyKind)
    monkeypatch.setitem(kinds._REGISTRY, "draw", _DrawKind)


def test_a_trained_kind_added_to_the_registry_is_offered_and_loaded(toy_kinds, tmp_path):
    import torch

    from costlab.costmodels.artifact import save_artifact
    from costlab.train.config import load_config

    assert "toy" in _option(_parser("train"), "--model").choices and "draw" not in kinds.trainable()
    assert "the XGBoost / MLP / Toy baselines" in " ".join(build_parser().format_help().split())
    cfg = load_config(None, [], model="toy", data=str(tmp_path / "d.h5"), split=None, platforms=["p"], out=None)
    assert cfg["model"] == "toy"
    model = save_artifact(tmp_path / "toy", {"w": torch.zeros(1)}, dict(kind="toy", net={}, platforms=["p"],
                                                                          featurizer=create("null").to_json()))
    loaded = predictors.load(model)
    assert isinstance(loaded, _ToyPredictor) and loaded.kind == "toy" and loaded.platforms == ["p"]
    assert predictors.kind_of(model) == "toy"
    from costlab.export.cost_model import tuning_predictor

    assert tuning_predictor(model).kind == "toy"


def test_a_kind_without_weights_added_to_the_registry_is_offered_and_loaded(toy_kinds, tmp_path):
    from costlab.export.cost_model import tuning_predictor
    from costlab.export.tune import TuneOptions, resolved_adapt
    from costlab.train.evaluate import evaluate

    assert "or 'psa' or 'random' or 'draw'" in _option(_parser("evaluate"), "--model").help
    assert "psa, random or draw" in _option(_tune_parser(), "--model").help
    assert predictors.load("draw").kind == tuning_predictor("draw").kind == "draw"
    assert predictors.weights_sha256("draw") is None
    opts = TuneOptions(work_dir=str(tmp_path / "w"), workloads=["GMM:1,8,8,8"], model="draw")
    assert resolved_adapt(opts, tmp_path / "w") == "none"
    data = tmp_path / "d.h5"
    shutil.copy(DATA, data)
    result = evaluate("draw", data, split=None, baselines=True)
    assert result["model"] == "draw" and result["records"] > 0
    assert list(result["_arrays"]["baselines"]) == ["PSA", "random", "Draw"]  # every kind without weights
