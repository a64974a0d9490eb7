"""The task scheduler by predicted gain (export/schedulers/gain.py): its decision function driven with a fake
predictor of known gains on plain task records, the default predictor's rules, and one real network run of
`costlab tune --network --task-scheduler gain`."""

from __future__ import annotations

import json
import math

import pytest

from costlab.export.schedulers import TASK_SCHEDULERS, make_task_scheduler
from costlab.export.schedulers.gain import ProgressGainPredictor, TaskState, choose, priority


class FakeGains:
    """Known gains: task i's next round improves it by ``base[i] / rounds`` (rounds it has had so far)."""

    def __init__(self, base: dict):
        self.base = base
        self.calls = []

    def gain(self, task_id: int, history: TaskState) -> float:
        self.calls.append(task_id)
        return self.base[task_id] / max(history.rounds, 1)


def _run(states: list, predictor, rounds: int, seconds: list, bests: list) -> list:
    """Drive ``choose`` as the TVM object does: each pick gets a round of the task's known seconds and best."""
    order = []
    for _ in range(rounds):
        i = choose(states, predictor)
        if i < 0:
            break
        order.append(i)
        states[i].bests.append(bests[i])
        states[i].round_seconds.append(seconds[i])
        states[i].trials += 2
    return order


def test_every_task_gets_a_first_round_then_rounds_follow_predicted_gain():
    """Weights, latencies and seconds per round are known, and so are the gains (base / rounds); task 3 is
    finished (its design space exhausted) and has the largest gain and weight of all: it is never chosen.
    By hand, priority = weight x best x gain / seconds:
      after the first rounds: #0 2*1ms*.4/1s = 8e-4, #1 1*4ms*.3/2s = 6e-4, #2 1*1ms*.25/.5s = 5e-4
      #0 (8e-4, then 4e-4), #1 (6e-4, then 3e-4), #2 (5e-4, then 2.5e-4), #0 (4e-4, then 2.67e-4),
      #1 (3e-4, then 2e-4), #0 (2.67e-4 > #2's 2.5e-4; then 2e-4), #2 (2.5e-4)."""
    weights, seconds, bests = [2.0, 1.0, 1.0, 10.0], [1.0, 2.0, 0.5, 1.0], [1e-3, 4e-3, 1e-3, 1e-2]
    states = [TaskState(weight=w) for w in weights]
    states[3].finished = True
    # the gains say task 2 first; first rounds still go in task order
    predictor = FakeGains({0: 0.4, 1: 0.3, 2: 0.25, 3: 0.9})
    order = _run(states, predictor, 10, seconds, bests)
    assert order == [0, 1, 2, 0, 1, 2, 0, 1, 0, 2]
    assert 3 not in predictor.calls  # a finished task is not even asked about


def test_each_choice_is_the_largest_weight_latency_gain_per_second():
    """A longer run with improving latencies: every pick after the first rounds is the live task of largest
    weight x best x gain / seconds per round, as computed here from the fake gains; tasks that finish midway
    are skipped from then on, and when all are finished there is nothing to choose (-1)."""
    weights = [1.0, 3.0, 0.5, 2.0, 1.0]
    seconds = [1.0, 4.0, 0.2, 2.0, 1.5]
    predictor = FakeGains({0: 0.5, 1: 0.2, 2: 0.6, 3: 0.3, 4: 0.05})
    states = [TaskState(weight=w) for w in weights]
    latency = [2e-3, 5e-3, 1e-3, 3e-3, 8e-3]
    picks = []
    for step in range(40):
        if step == 15:
            states[2].finished = True  # its per-task budget is spent
        if step == 25:
            states[1].finished = True
        fresh = [i for i, s in enumerate(states) if s.rounds == 0 and not s.finished]
        alive = [i for i, s in enumerate(states) if not s.finished]
        expected_scores = {i: weights[i] * states[i].best * (predictor.base[i] / max(states[i].rounds, 1))
                           / (sum(states[i].round_seconds[-3:]) / len(states[i].round_seconds[-3:]))
                           for i in alive if states[i].rounds}
        i = choose(states, predictor)
        if fresh:
            assert i == fresh[0]
        else:
            best = max(expected_scores.values())
            assert math.isclose(expected_scores[i], best, rel_tol=1e-12), (step, i, expected_scores)
        assert not states[i].finished
        picks.append(i)
        latency[i] *= 1 - predictor.base[i] / max(states[i].rounds, 1) / 2  # it improves as predicted, halved
        states[i].bests.append(min(latency[i], states[i].best))
        states[i].round_seconds.append(seconds[i])
    assert picks[:5] == [0, 1, 2, 3, 4]
    assert 2 not in picks[15:] and 1 not in picks[25:]
    assert len(set(picks[5:])) > 1  # gains fall with rounds: the rounds spread over the tasks
    for s in states:
        s.finished = True
    assert choose(states, predictor) == -1


def test_tasks_without_a_valid_program_come_after_those_with_one():
    states = [TaskState(bests=[math.inf], round_seconds=[1.0]), TaskState(bests=[1e-3], round_seconds=[1.0]),
              TaskState(bests=[math.inf, math.inf], round_seconds=[1.0, 1.0])]
    assert choose(states, FakeGains({0: 0.5, 1: 0.01, 2: 0.5})) == 1
    states[1].finished = True
    assert choose(states, FakeGains({0: 0.5, 1: 0.01, 2: 0.5})) == 0  # the fewest rounds of the two


def test_the_default_predictor_follows_progress_and_the_models_view():
    p = ProgressGainPredictor()
    one = TaskState(bests=[1e-3], round_seconds=[1.0])
    assert p.gain(0, one) == pytest.approx(p.prior)  # one round: no evidence, the prior
    improving = TaskState(bests=[1e-3, 0.6e-3, 0.4e-3])  # 40 %, then 33 %: above the prior of 25 %
    stalled = TaskState(bests=[1e-3, 1e-3, 1e-3, 1e-3, 1e-3])
    assert p.gain(0, improving) > p.gain(0, one) > p.gain(0, stalled) > 0
    # the newest round counts most: the same improvements, recent or long ago
    recent = TaskState(bests=[1e-3, 1e-3, 1e-3, 0.5e-3])
    old = TaskState(bests=[1e-3, 0.5e-3, 0.5e-3, 0.5e-3])
    assert p.gain(0, recent) > p.gain(0, old)
    # the model's share of candidates above the best moves the estimate, in [0, prior]
    hopeful = TaskState(bests=stalled.bests, model_share=1.0)
    hopeless = TaskState(bests=stalled.bests, model_share=0.0)
    assert p.gain(0, hopeful) > p.gain(0, stalled) > p.gain(0, hopeless)
    assert 0 <= p.gain(0, TaskState(bests=[1.0, 1e-9])) <= p.cap < 1
    assert priority(TaskState(weight=2, bests=[1e-3], round_seconds=[0.5, 1.5]), 0.1) == pytest.approx(2e-3 * 0.1 / 1.0)


def test_the_models_view_counts_as_much_as_it_came_true():
    """A model that keeps scoring a stalled task's candidates above its best loses its say, round by round;
    an improving round gives it back in full."""
    p = ProgressGainPredictor()
    bests = [1e-3, 0.8e-3]
    gains = []
    for _ in range(6):
        gains.append(p.gain(0, TaskState(bests=list(bests), model_share=1.0)))
        bests.append(bests[-1])  # one more round without gain
    assert all(a > b for a, b in zip(gains, gains[1:]))
    assert gains[-1] < 0.2 * gains[0]
    assert TaskState(bests=[1e-3, 1e-3, 1e-3]).stale_rounds == 2
    assert TaskState(bests=[1e-3, 1e-3, 0.9e-3]).stale_rounds == 0
    assert TaskState(bests=[math.inf, 1e-3, 1e-3]).stale_rounds == 1


def test_a_stalled_task_the_model_believes_in_does_not_take_the_run():
    """The BERT layer's two matmuls at 1,000 trials (the gain scheduler's log of bench/networks-1000 bert s0,
    before the model's view was discounted): #8, weight 4, 361.89 us after an 8 % gain and two rounds
    without, 8.07 s a round, 28 % of its candidates above its best; #13, weight 1, 1402.70 us after two
    rounds without gain, 14 s a round, 95 % above its best. #13 then took six rounds in a row without gain.
    Each stale round of #13 now costs the model's view half its weight: #8 gets the next round within
    three of them."""
    p = ProgressGainPredictor()
    a = TaskState(weight=4, bests=[393.03e-6, 361.89e-6, 361.89e-6, 361.89e-6], round_seconds=[8.07] * 3,
                  model_share=0.28)
    b = TaskState(weight=1, bests=[1730.14e-6, 1730.14e-6, 1553.37e-6, 1553.37e-6, 1402.70e-6, 1402.70e-6],
                  round_seconds=[14.0] * 3, model_share=0.95)
    picks = []
    for _ in range(4):
        i = choose([a, b], p)
        picks.append(i)
        chosen = (a, b)[i]
        chosen.bests.append(chosen.best)  # no gain, as in the run
    assert 0 in picks[:3]


def test_the_scheduler_by_name():
    from tvm.s_tir.meta_schedule.task_scheduler import TaskScheduler

    assert TASK_SCHEDULERS == ("gain", "gradient", "round-robin")
    assert isinstance(make_task_scheduler("gain"), TaskScheduler)  # what tune_tasks takes as an object
    assert make_task_scheduler("gradient") == "gradient"
    with pytest.raises(ValueError):
        make_task_scheduler("fastest")



def test_the_task_scheduler_is_an_option_a_work_dir_keeps(tmp_path):
    """Networks default to gain, workloads to gradient; a bad name is one line; the choice is recorded with the
    run's options, so continuing with another one is refused, and a run recorded before the option existed
    (MetaSchedule's gradient then) continues with gradient."""
    from costlab.common.errors import UsageError
    from costlab.export.tasks import measuring_target
    from costlab.export.tune import TuneOptions, _check_same_run

    def opts(**kw):
        o = TuneOptions(work_dir=str(tmp_path), network="net:f", **kw)
        o.check()
        return o

    assert opts().task_scheduler == "gain"
    workloads = TuneOptions(work_dir=str(tmp_path), workloads=["GMM:1,8,8,8"])
    workloads.check()
    assert workloads.task_scheduler == "gradient"
    with pytest.raises(UsageError, match="--task-scheduler must be one of gain, gradient, round-robin"):
        opts(task_scheduler="fastest")
    target = measuring_target("host", local=True)
    run = tmp_path / "costlab_run.json"
    run.write_text(json.dumps(_check_same_run(tmp_path, opts(), target)))
    _check_same_run(tmp_path, opts(task_scheduler="gain"), target)
    with pytest.raises(UsageError, match="task_scheduler: 'gain' -> 'round-robin'"):
        _check_same_run(tmp_path, opts(task_scheduler="round-robin"), target)
    old = json.loads(run.read_text())
    del old["task_scheduler"]
    run.write_text(json.dumps(old))
    _check_same_run(tmp_path, opts(task_scheduler="gradient"), target)
    with pytest.raises(UsageError, match="task_scheduler: 'gradient' -> 'gain'"):
        _check_same_run(tmp_path, opts(), target)

def _tune_tiny_net(tmp_path, capsys, monkeypatch, name: str, scheduler: str, work) -> dict:
    """`costlab tune --network` of a tiny PyTorch network of several tasks, 8 trials of 2 a batch, with
    ``scheduler``: the run's summary."""
    from costlab.cli import main

    from test_tune import _torch_net

    spec = _torch_net(tmp_path, monkeypatch, name,
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8),"
                      " torch.nn.Tanh()), (torch.randn(2, 16),)\n")
    assert main(["tune", "--network", spec, "--trials", "8", "--per-iter", "2", "--no-check", "--task-scheduler",
                 scheduler, "--work-dir", str(work), "--no-progress", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_a_network_tuned_with_the_gain_scheduler(tmp_path, capsys, monkeypatch):
    """For real, no mocks: a tiny PyTorch network of several tasks tuned by `costlab tune --network
    --task-scheduler gain`: every task gets its first round, the budget holds exactly, and the scheduler's
    decisions are in the run's task_scheduler.log."""
    work = tmp_path / "w"
    summary = _tune_tiny_net(tmp_path, capsys, monkeypatch, "gainnet", "gain", work)
    trials = [t["trials"] for t in summary["tasks"]]
    assert 2 <= len(trials) <= 3, summary["tasks"]  # 8 trials: first rounds of 2, then gain's choices
    assert all(n >= 1 for n in trials) and sum(trials) == 8
    assert len((work / "database_tuning_record.json").read_text().splitlines()) == 8
    assert json.loads((work / "costlab_run.json").read_text())["task_scheduler"] == "gain"
    picks = (work / "logs" / "task_scheduler.log").read_text().count("gain scheduler picks task")
    assert picks > len(trials)  # the first rounds, then at least one choice by predicted gain


@pytest.mark.parametrize("strategy", ["model-led", "draft-filter"])
def test_the_models_view_of_a_round_leaves_its_score_map_to_the_next_population(strategy):
    """The scheduler scores a measured round with the run's costlab model by its raw scores: the model's
    ``predict`` would fix the task's map of scores (``CostlabCostModel._scales``, set once from the first
    population it scores) from these few measured programs instead of the next search population. Under
    draft-filter the run's model is the draft and verifier together: the verifier's raw scores, the same."""
    from types import SimpleNamespace

    import _sched_cases as cases
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from costlab.export.cost_model import CostlabCostModel, _task_key
    from costlab.export.search.draft_filter import DraftFilterModel
    from costlab.featurizers.ms_records import feature_context

    mod = cases.matmul()
    ctx = feature_context(mod, cases.LLVM)
    args = ArgInfo.from_prim_func(mod["main"])
    schedules = [cases.cpu_tiled(mod), cases.naive(mod), cases.cpu_tiled(mod, unroll=0),
                 cases.cpu_tiled(mod, i_tiles=(1, 8, 2, 8), unroll=16)]
    cands = [MeasureCandidate(s, args) for s in schedules]
    model = CostlabCostModel("psa")
    run_model = model if strategy == "model-led" else DraftFilterModel(model)
    scheduler = make_task_scheduler("gain", cost_model=run_model)
    scheduler._best_candidate[0] = cands[0]
    share = scheduler._model_share(SimpleNamespace(cost_model_=None), 0, SimpleNamespace(ctx=ctx), cands)
    assert share is not None and 0.0 <= share <= 1.0
    assert _task_key(ctx) not in model._scales
    run_model.predict(ctx, cands)  # what the search does with its population: the map is fixed then
    assert _task_key(ctx) in model._scales


@pytest.mark.slow
def test_a_continued_network_run_starts_each_tasks_gain_from_its_best_in_the_database(tmp_path, capsys, monkeypatch):
    """The scheduler weighs a task by its best latency: a continued run (or one the library or a transfer started)
    holds each task's best in its database already, and the scheduler took only this call's rounds (``inf``
    before a task's first round here, then that round's best, the database's better one forgotten)."""
    from costlab.cli import main
    import costlab.export.tune as tune

    from test_tune import _torch_net

    made = []

    def keep(*args, **kw):  # the real scheduler, kept to read its decisions
        made.append(make_task_scheduler(*args, **kw))
        return made[-1]

    monkeypatch.setattr(tune, "make_task_scheduler", keep)
    spec = _torch_net(tmp_path, monkeypatch, "gainnet2",
                      "import torch\n"
                      "def f():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8),"
                      " torch.nn.Tanh()), (torch.randn(2, 16),)\n")
    argv = ["tune", "--network", spec, "--per-iter", "2", "--no-check", "--task-scheduler", "gain", "--work-dir",
            str(tmp_path / "w"), "--no-progress", "--json", "--no-library", "--final-top", "0"]
    assert main([*argv, "--trials", "6"]) == 0
    first = json.loads(capsys.readouterr().out)
    bests = sorted(t["best_us"] for t in first["tasks"])
    assert main([*argv, "--trials", "8"]) == 0
    start = made[-1].decisions[0]["tasks"]  # the continued run's first pick: each task's rounds of the first part
    rounds = {}
    for line in (tmp_path / "w" / "progress.jsonl").read_text().splitlines()[:3]:  # 6 trials, 2 a batch
        rounds[json.loads(line)["task"]] = rounds.get(json.loads(line)["task"], 0) + 1
    assert sorted(row["rounds"] for row in start) == sorted(rounds.values())
    # the summary's microseconds are rounded to 3 places
    assert sorted(row["best_us"] for row in start) == pytest.approx(bests, abs=6e-4)


def test_a_continued_runs_never_measured_tasks_get_their_first_round_first():
    """A continued run's scheduler sees every task without a round; the tasks the earlier run measured (a finite
    start_best) went first in task order and could spend what was left, so an unmeasured task got no trial."""
    states = [TaskState(start_best=1e-3), TaskState(start_best=2e-3), TaskState()]
    assert choose(states, FakeGains({0: 0.1, 1: 0.1, 2: 0.1})) == 2
    states[2].bests.append(5e-3)
    assert choose(states, FakeGains({0: 0.1, 1: 0.1, 2: 0.1})) == 0  # then the measured ones, in task order


def test_a_task_that_stopped_improving_fades_towards_no_gain():
    """The prior's weight was decay ** n with n counted in the 5-round window: a task that never improved kept a
    gain of about 0.008 however many rounds it had, and a heavy one took every round from improving tasks."""
    p = ProgressGainPredictor()
    gains = [p.gain(0, TaskState(bests=[50e-6] * n)) for n in (5, 10, 40)]
    assert gains[0] > gains[1] > gains[2] and gains[2] < 1e-4


@pytest.mark.slow
def test_the_gradient_scheduler_keeps_each_tasks_seconds_on_its_own_line(tmp_path, capsys, monkeypatch):
    """MetaSchedule's gradient scheduler searches and builds every task's first round before it joins any: each
    line of progress.jsonl carries its own task's search and build seconds (every batch was searched and built),
    and the first batch's parts add up to no more than the seconds to it."""
    work = tmp_path / "w"
    summary = _tune_tiny_net(tmp_path, capsys, monkeypatch, "rrnet", "gradient", work)
    rows = [json.loads(line) for line in (work / "progress.jsonl").read_text().splitlines()]
    assert len(rows) >= 2 and sum(r["batch"] for r in rows) == 8
    assert all(r["search_s"] > 0 and r["build_s"] > 0 and r["run_s"] > 0 for r in rows), rows
    first = summary["first_batch"]
    assert first["search_s"] + first["build_s"] + first["run_s"] <= summary["first_batch_s"] + 0.05


def test_a_model_that_scores_at_random_gives_no_view_of_a_round():
    """MetaSchedule's XGBoost draws uniform random scores until it has trained (100 records): the share of a round
    it put above the best was a coin flip, half of each task's gain (0, 2/3, 1, 1, 1, 0 for the same round)."""
    from tvm.s_tir.meta_schedule.cost_model import RandomModel, XGBModel

    from costlab.export.cost_model import CostlabCostModel
    from costlab.export.schedulers.gain import _scores_at_random

    assert _scores_at_random(XGBModel()) and _scores_at_random(RandomModel())
    assert _scores_at_random(CostlabCostModel("random"))
    assert not _scores_at_random(CostlabCostModel("psa"))


def test_a_faster_program_found_outside_the_rounds_is_no_rounds_progress():
    """A continued run whose exploitation found a faster program: the scheduler took it for the last round's own
    improvement, so a task whose search had stalled looked as if it had just improved by that much. The rounds keep
    their own relative improvements and end at the database's best."""
    from costlab.export.schedulers.gain import ProgressGainPredictor, TaskState, continue_from

    rounds = [(1.0, 2.0), (0.8, 2.0), (0.8, 2.0), (0.8, 2.0)]  # a search that stalled at 0.8
    searched, exploited = TaskState(start_best=0.8), TaskState(start_best=0.4)  # exploitation halved it since
    continue_from(searched, rounds)
    continue_from(exploited, rounds)
    predictor = ProgressGainPredictor()
    assert exploited.best == 0.4 and exploited.stale_rounds == searched.stale_rounds == 2
    assert predictor.progress(exploited) == pytest.approx(predictor.progress(searched))
    never = TaskState(start_best=0.5)
    continue_from(never, [(math.inf, 1.0)])  # rounds of no valid program: the faster one is its best
    assert never.bests == [0.5]
