"""Each extension point lists its kinds once: a search strategy or an adaptation mode added to its registry
is offered by the command line, checked by ``costlab tune``'s options and made by its factory."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from costlab.cli import build_parser
from costlab.costmodels.recipes import ADAPT_MODES
from costlab.export import search
from costlab.export.search import STRATEGIES, Strategy, draft_cost_model, make_strategy


def _tune_parser():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["tune"]


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
    for name, line in ADAPT_MODES.items():
        assert f"{name}: {line}" in text


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
    monkeypatch.setitem(ADAPT_MODES, "toy", "a mode of this test")
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
            "strategy_help()\n"
            "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'tvm') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]", f"reading the registries imported {out.strip()}"
