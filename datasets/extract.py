"""``costlab dataset extract``: MetaSchedule tuning tasks from networks, with each task's weight per network.

Three sources:

- TVM's benchmark workloads (``tvm.s_tir.meta_schedule.testing.te_workload``) by name, ``GMM`` or with
  shape arguments ``GMM:1,128,128,128``: each a network of one task, weight 1;
- Hugging Face ``transformers`` models built from a config with random weights, nothing downloaded: five
  small fixed ones (``bert``, ``gpt2``, ``vit``, ``resnet``, ``mobilenet_v2``) and any model type
  ``AutoConfig.for_model`` knows, with size overrides (``hf_models.py``);
- any PyTorch ``module:function`` returning ``(model, example_inputs)``.

Networks go ``torch.export`` -> ``relax.frontend.torch.from_exported_program`` -> the passes
MetaSchedule's ``static_shape_tuning_pipeline`` runs before tuning (decompose for inference, legalize,
fuse) -> ``relax_integration.extract_tasks``. Each task's workload is stored as a MetaSchedule database
stores it (``Workload(mod).as_json()``), so tasks extracted here and records imported later from a tuning
run of the same network are the same tasks. The target is only used to extract (it selects legalization
and fusion); it is recorded with a platform when measuring, not here.
"""

from __future__ import annotations

import numpy as np

import importlib
import os
import sys
import time
from dataclasses import dataclass, field

from costlab.common.errors import InputError
from costlab.datasets import hf_models
from costlab.datasets.relax_fixes import repair_frontend_types
from costlab.datasets.store import DatasetWriter
from costlab.metaschedule.targets import normalize_target
from costlab.metaschedule.workloads import describe, workload_json, workload_json_mod


@dataclass
class ExtractedNetwork:
    name: str
    tasks: list = field(default_factory=list)  # (task_name, IRModule or PrimFunc, weight)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- TVM benchmark workloads ----------------------------------------------------------------------------

def _parse_arg(text: str):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return text  # e.g. a dtype


def te_workload_task(spec: str):
    """``(canonical name, PrimFunc)`` of ``NAME`` or ``NAME:ARG,ARG,...`` (default: the first shape TVM lists)."""
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    name, _, args = spec.partition(":")
    name = name.strip().upper()
    if name not in te_workload.CONFIGS:
        raise ValueError(f"unknown te_workload {name!r} (known: {', '.join(sorted(te_workload.CONFIGS))})")
    func, shapes = te_workload.CONFIGS[name]
    params = tuple(_parse_arg(a) for a in args.split(",")) if args.strip() else tuple(shapes[0])
    example = f"e.g. {name}:{','.join(map(str, shapes[0]))}"
    if any(isinstance(p, int) and not -(2**31) < p < 2**31 for p in params):
        raise ValueError(f"bad arguments for {name}: a number beyond 32 bits ({example})")
    try:
        tensors = func(*params)
        prim = te.create_prim_func(tensors)
    except Exception as exc:  # noqa: BLE001  TVM reports bad shapes in several ways
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        raise ValueError(f"bad arguments for {name}: {lines[-1][:160] if lines else type(exc).__name__} ({example})") from None
    for t in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
        dims = [int(d) for d in t.shape if hasattr(d, "value") or isinstance(d, int)]
        if any(d <= 0 for d in dims):
            raise ValueError(f"bad arguments for {name}: tensor {t.name} would have shape {dims}; every extent must "
                             f"be positive ({example})")
    return f"{name}:{','.join(map(str, params))}", prim


class _FirstOutput:
    """Wraps a model so that it returns one tensor (``transformers`` models return output objects)."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args):
                out = self.inner(*args)
                if isinstance(out, torch.Tensor):
                    return out
                if isinstance(out, dict):
                    return next(iter(out.values()))
                return out[0]

        return Wrapped(model)


def torch_fn_model(spec: str):
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        raise ValueError(f"give a Python function as MODULE:FUNCTION, not {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, "")  # a module in the current directory, as `python -m costlab` finds it
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        if hf_models.is_model_type(mod_name):  # bert:foo: a transformers model whose options are no KEY=VALUE
            raise ValueError(f"{mod_name} is a transformers model: its options are KEY=VALUE "
                             f"({mod_name}:layers=2,hidden=128), not {fn_name!r}") from None
        raise ValueError(f"cannot import {mod_name!r}: {exc}") from None
    except SyntaxError as exc:
        raise ValueError(f"{mod_name!r} has a syntax error: {exc.filename}:{exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001  the user's module failed while it was imported
        raise ValueError(f"importing {mod_name!r} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ValueError(f"{mod_name!r} has no function {fn_name!r}")
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001  the user's function failed
        raise ValueError(f"{spec} failed: {type(exc).__name__}: {exc}") from None
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(f"{spec} must return (model, example_inputs), got {type(result).__name__}")
    model, inputs = result
    return model, tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def reference_output(model, inputs) -> np.ndarray:
    """What the PyTorch model itself computes on ``inputs`` (its first output, as the Relax module returns it):
    what a tuned build of the network is checked against."""
    import torch

    # on copies: a model that changes its input in place (x.mul_(2)) would leave the inputs the tuned build runs on
    # changed, and a right network differed from PyTorch's output
    inputs = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)
    with torch.no_grad():
        out = _FirstOutput(model.eval())(*inputs)
    return out.detach().cpu().numpy()


def network_module(model, inputs, target):
    """The Relax module of a PyTorch model, prepared as MetaSchedule's tuning pipeline prepares it
    (weights bound as constants, operators decomposed for inference), with the frontend's types repaired
    where they depart from PyTorch's (``datasets.relax_fixes``)."""
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    model = _FirstOutput(model.eval())
    with torch.no_grad():
        exported = torch.export.export(model, tuple(inputs))
    mod = repair_frontend_types(from_exported_program(exported, keep_params_as_input=False))
    with target:
        mod = tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            relax.pipeline.zero_pipeline(),
        ])(mod)
    return mod


def network_tasks(model, inputs, target) -> list:
    """``(task_name, IRModule, weight)`` per MetaSchedule task of a PyTorch model."""
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    mod = network_module(model, inputs, target)
    return [(str(t.task_name), t.dispatched[0], float(t.weight)) for t in extract_tasks(mod, target)]


def _store(data, net: ExtractedNetwork) -> tuple[int, int]:
    """Write one network (its own transaction); returns (tasks, of which new)."""
    rows = []
    for name, mod, weight in net.tasks:
        shash, b64 = workload_json(mod)
        info = describe(workload_json_mod(mod))
        rows.append((shash, b64, name, info, weight))
    with DatasetWriter(data) as w:
        before = len(w.tasks)
        weights = []
        for shash, b64, name, info, weight in rows:
            t = w.add_task(shash, "ms", b64, name=name, kernel_class=info.kernel_class, flops=info.flops)
            weights.append((t, weight))
        w.set_network(net.name, weights)
        for line in w.replaced_networks():  # the same network extracted at another batch size, say
            _log(line)
        return len({t for t, _ in weights}), len(w.tasks) - before


def extract(data, target="host", workloads=(), hf=(), torch_fns=(), batch: int = 1,
            seq_len: int = 32) -> str:
    """Extract tasks into the dataset ``data`` (created if missing); returns a summary (tasks per network).

    A network that fails (export, conversion, extraction) is reported with the reason and skipped; the
    others are still extracted. Raises ``InputError`` only when nothing could be extracted.
    """
    import tvm

    DatasetWriter(data).check()  # a dataset that cannot take the tasks is said before any network is extracted
    try:
        tgt = tvm.target.Target(normalize_target(target))
    except Exception as exc:
        raise InputError(data, f"bad target {target!r}: {exc}") from None
    jobs = [("workload", w) for w in workloads] + [("hf", a) for a in hf] + [("torch", f) for f in torch_fns]
    lines, failures = [], []
    for i, (kind, spec) in enumerate(jobs):
        started = time.time()
        _log(f"[{i + 1}/{len(jobs)}] extracting {kind} {spec} ...")
        try:
            if kind == "workload":
                name, func = te_workload_task(spec)
                net = ExtractedNetwork(name, [(name, func, 1.0)])
            else:
                if kind == "hf":
                    model, inputs, is_text = hf_models.build(spec, batch, seq_len)
                    name = hf_models.network_name(spec, batch, seq_len, is_text)
                else:
                    model, inputs = torch_fn_model(spec)
                    name = spec
                net = ExtractedNetwork(name, network_tasks(model, inputs, tgt))
                if not net.tasks:
                    raise ValueError("no tunable tasks found")
            n, new = _store(data, net)
        except InputError:
            raise
        except Exception as exc:  # report which network failed and why, then go on with the others
            reason = str(exc).strip().splitlines()
            reason = reason[-1] if reason else type(exc).__name__
            failures.append(f"  {kind} {spec}: FAILED: {type(exc).__name__}: {reason[:300]}")
            _log(failures[-1])
            continue
        weight = sum(w for _, _, w in net.tasks)
        lines.append(f"  {net.name}: {n} tasks ({new} new), {weight:g} task instances  [{time.time() - started:.1f} s]")
    if not lines:  # each failure was said as it happened
        raise InputError(data, f"nothing extracted: {len(failures)} of {len(jobs)} failed, each said above")
    return f"{data}: extracted {len(lines)} network(s)\n" + "\n".join(lines + failures)
