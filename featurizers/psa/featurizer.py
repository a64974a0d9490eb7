"""PSA: Pruner's static analyzer, the cheap *draft* model. A formula, not a network.

For every record: the scheduled program as loop nests (``loopnest.Program``), then ``formula.estimate``
against the platform's ``HardwareSpec``. Outputs per record: ``estimate`` (seconds, lower is better),
``score`` (``1 / estimate``, 0 when the program cannot run) and ``valid``.

How the program is obtained (config ``mode``):

- ``trace`` (default): the trace is simulated on a per-task analysis of the workload (``trace_nest``),
  done once per task and cached; no TVM work per record. A trace using a primitive the simulator does not
  model falls back to ``tir``.
- ``tir``: the trace is replayed in TVM and the scheduled TIR walked (``tir_nest``). Same program,
  several times slower; kept as the reference ``benchmarks/psa_recall.py`` compares against.

Config ``spec``: fields overriding the platform's hardware spec (e.g. ``{"cores": 8}``), or a whole spec
(a dict with ``"kind"``, as ``HardwareSpec.to_json`` writes it).
"""

from __future__ import annotations

import numpy as np

from costlab.featurizers.base import ConfigError, Featurizer, register, shown
from costlab.featurizers.ms_records import named_apart, record_batch, task_module
from costlab.featurizers.psa.formula import estimate
from costlab.featurizers.psa.hardware import PlatformSpecs, target_dict
from costlab.featurizers.psa.tir_nest import program_of
from costlab.featurizers.psa.trace_nest import TaskModel, Unsupported, simulate
from costlab.metaschedule.targets import is_gpu, normalize_target
from costlab.metaschedule.traces import ReplayError, parse_trace, replay, trace_json


@register
class PSA(PlatformSpecs, Featurizer):
    name = "psa"
    # 2: on GPU, registers beyond what one block may hold spill (nvcc caps them under TVM's __launch_bounds__)
    # and a shared-memory bound over the block's limit is capped at it, instead of the launch being impossible
    # 3: on GPU, tensor-core statements at the tensor-core peak, WMMA fragments held in their warp's registers, and
    # a block's threads the product of its thread axes (the largest axis before)
    version = 3
    # 1: a workload's buffers that share a name are told apart (ms_records.named_apart); 2: the TIR walk bounds
    # the loops of a block by its predicate (a GPU cooperative fetch whose threads x lanes overshoot its tile); 3: the
    # trace simulator counts an inlined producer's FLOPs at every load of it, as TVM substitutes it
    revision = 3
    default_config = {"mode": "trace", "spec": None}

    def __init__(self, config=None):
        super().__init__(config)
        self._tasks: dict = {}
        self.stats = {"simulated": 0, "walked": 0, "fallback": 0, "invalid": 0}

    def check_config(self) -> None:
        """The defaults' types, the spec (``PlatformSpecs``), and a mode that is one of the two."""
        super().check_config()
        if self.config["mode"] not in ("trace", "tir"):
            raise ConfigError(self.name, "mode", f"mode must be 'trace' or 'tir', not {shown(self.config['mode'])}")

    # -- one program ----------------------------------------------------------------------------------------
    def _task_model(self, task, gpu: bool):
        key = (task.workload_hash, task.index, gpu)
        if key not in self._tasks:
            try:
                self._tasks[key] = TaskModel(task_module(task), gpu=gpu)
            except Unsupported as exc:
                self._tasks[key] = exc
        return self._tasks[key]

    def program(self, task, schedule, gpu: bool):
        """The ``Program`` of one record (trace simulation, or replay + TIR walk)."""
        trace = parse_trace(schedule)
        if self.config["mode"] == "trace":
            model = self._task_model(task, gpu)
            if isinstance(model, TaskModel):
                try:
                    prog = simulate(model, trace)
                    self.stats["simulated"] += 1
                    return prog
                except Unsupported:
                    pass
                except Exception:  # noqa: BLE001  a trace the simulator mishandles: the TIR walk is the reference
                    self.stats["sim_errors"] = self.stats.get("sim_errors", 0) + 1
            self.stats["fallback"] += 1
        self.stats["walked"] += 1
        sch = replay(task_module(task), trace)
        try:
            return program_of(sch.mod, gpu=gpu)
        except Exception as exc:  # noqa: BLE001  IR the walk does not understand: the record is reported
            raise ReplayError(f"scheduled TIR not understood ({type(exc).__name__}: {exc})") from None

    # -- featurizer interface ----------------------------------------------------------------------------------
    def featurize_records(self, ds, platform: str, rows: np.ndarray) -> dict:
        rows, plat, gpu, task_ids, schedules = record_batch(ds, platform, rows)
        spec = self.spec_for(plat)
        est = np.full(rows.size, np.inf)
        valid = np.zeros(rows.size, bool)
        for i, (t, sched) in enumerate(zip(task_ids.tolist(), schedules)):
            try:
                est[i] = estimate(self.program(ds.tasks[t], sched, gpu), spec)
                valid[i] = True
            except Exception:  # noqa: BLE001  a record that does not replay, or a program the formula cannot take:
                self.stats["invalid"] += 1  # that record invalid, never the batch (as for live candidates)
        return {"estimate": est, "score": _score(est), "valid": valid}

    def featurize_candidates(self, mod, target, schedules) -> dict:
        """Estimates of live candidates. In ``trace`` mode each candidate's trace is simulated on the
        workload's analysis (made once per workload and cached), as for dataset records; a trace the
        simulator does not model, and ``tir`` mode, walk the candidate's scheduled TIR, which is at hand."""
        import tvm_ffi

        tdict = target_dict(target)
        spec = self.spec_for(target=normalize_target(tdict))
        gpu = is_gpu(tdict)
        mod, schedules = named_apart(mod, list(schedules))
        model = None
        if self.config["mode"] == "trace":
            key = ("live", int(tvm_ffi.structural_hash(mod)), gpu)
            if key not in self._tasks:
                try:
                    self._tasks[key] = TaskModel(mod, gpu=gpu)
                except Unsupported as exc:
                    self._tasks[key] = exc
            model = self._tasks[key] if isinstance(self._tasks[key], TaskModel) else None
        est = np.full(len(schedules), np.inf)
        for i, sch in enumerate(schedules):
            prog = None
            if model is not None:
                try:
                    prog = simulate(model, trace_json(sch.trace))
                    self.stats["simulated"] += 1
                except Unsupported:
                    self.stats["fallback"] += 1
                except Exception:  # noqa: BLE001  a trace the simulator mishandles: the TIR walk is the reference
                    self.stats["sim_errors"] = self.stats.get("sim_errors", 0) + 1
            try:
                if prog is None:
                    self.stats["walked"] += 1
                    prog = program_of(sch.mod, gpu=gpu)
                est[i] = estimate(prog, spec)
            except Exception:  # noqa: BLE001  IR neither path understands: the candidate is invalid
                self.stats["invalid"] += 1
        return {"estimate": est, "score": _score(est), "valid": np.isfinite(est)}


def _score(est: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        out = np.where(np.isfinite(est) & (est > 0), 1.0 / np.where(est > 0, est, 1.0), 0.0)
    return out
