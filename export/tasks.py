"""The tasks of a workload, as ``costlab tune`` tunes them and ``costlab transfer`` transfers into them: TVM
benchmark workloads by name (``--workload GMM:1,128,128,128``), or the tasks of a network (``--network``, a
``transformers`` model type or ``MODULE:FUNCTION``, optionally narrowed by ``--task``) extracted as ``costlab
dataset extract`` does and weighted by how often they run."""

from __future__ import annotations

from dataclasses import dataclass

from costlab.common.errors import UsageError, last_line
from costlab.datasets import hf_models
from costlab.datasets.extract import network_module, reference_output, te_workload_task, torch_fn_model
from costlab.metaschedule.targets import MEASURABLE_KINDS, runnable_target
from costlab.metaschedule.workloads import workload_json, workload_json_mod


def function_network(spec: str) -> bool:
    """Whether a ``--network`` names a Python function returning a model and its example inputs
    (``MODULE:FUNCTION``), not a transformers model with options (``bert:layers=2``, sized by --batch/--seq-len)."""
    return ":" in spec and "=" not in spec.split(":", 1)[1]


def measuring_target(spec, local: bool = True):
    """The checked ``Target`` that ``costlab tune`` / ``transfer`` build and measure for: ``spec`` as the
    command line gives it (``host``, ``cuda``, a JSON dict, the ``llvm -mcpu=...`` form): a CPU (llvm) target
    with at least one core, or an NVIDIA GPU (cuda) target completed by ``metaschedule.targets.cuda_target``;
    ``local``: the host's own CPU or GPU may be named (not for a remote device). One ``UsageError`` line
    otherwise."""
    import tvm

    try:
        target = tvm.target.Target(runnable_target(spec, local=local))
    except Exception as exc:  # noqa: BLE001  TVM reports a bad target in several ways
        raise UsageError(f"bad target {spec!r}: {last_line(exc)}") from None
    if str(target.kind.name) not in MEASURABLE_KINDS:
        raise UsageError(f"bad target {spec!r}: costlab measures CPU (llvm) and NVIDIA GPU (cuda) targets; a "
                         f"{target.kind.name} target is not supported yet")
    cores = target.attrs.get("num-cores")
    if cores is not None and int(cores) < 1:
        raise UsageError(f"bad target {spec!r}: num-cores must be at least 1, not {int(cores)}")
    return target


def canonical_workloads(specs, strict: bool = True) -> list:
    """``--workload`` specs as ``te_workload_task`` names their tasks (the name upper-cased, whitespace stripped,
    the default arguments filled in), each once, in order: ``gmm:1, 16,16,16`` and ``GMM:1,16,16,16`` are one task,
    as ``workload_tasks`` tunes them. What a run records and compares. ``strict``: a spec that names no workload is
    a UsageError, as ``workload_tasks`` says it; else (a run record's, written by a TVM that may have known it) it is
    kept as recorded, stripped."""
    out = []
    for spec in specs:
        if isinstance(spec, str):
            try:
                spec = te_workload_task(spec)[0]
            except ValueError as exc:
                if strict:
                    raise UsageError(f"--workload {spec}: {exc}") from None
                spec = spec.strip()
        if spec not in out:
            out.append(spec)
    return out


@dataclass
class Task:
    name: str
    mod: object
    weight: float = 1.0


def workload_tasks(opts, target) -> tuple[list[Task], object]:
    """The tasks to tune, and the network's Relax module, inputs and PyTorch's own output on them (None for
    workloads)."""
    if opts.workloads:
        out, seen = [], {}
        for spec in opts.workloads:
            try:
                name, func = te_workload_task(spec)
            except ValueError as exc:
                raise UsageError(f"--workload {spec}: {exc}") from None
            # the same workload written twice (GMM:... and gmm:..., or with its default arguments spelt out:
            # GMM:1,16,16,16,float32,float32) is one task: by its workload hash, as the database keys it
            shash = workload_json(func)[0]
            if name in seen or shash in seen:
                continue
            seen[name] = seen[shash] = True
            out.append(Task(name, workload_json_mod(func)))
        return out, None
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    try:
        if function_network(opts.network):
            model, inputs = torch_fn_model(opts.network)
        else:
            model, inputs, _ = hf_models.build(opts.network, opts.batch, opts.seq_len)
        mod = network_module(model, inputs, target)
        reference = reference_output(model, inputs)
    except ValueError as exc:
        raise UsageError(f"--network {opts.network}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  a model that does not trace or convert (bad inputs, unsupported ops)
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        raise UsageError(f"--network {opts.network}: the model could not be converted to Relax "
                         f"({type(exc).__name__}: {lines[-1][:160] if lines else ''})") from None
    tasks = [Task(str(t.task_name), t.dispatched[0], float(t.weight)) for t in extract_tasks(mod, target)]
    if opts.task_filter:
        import fnmatch

        picked = [t for t in tasks if any(fnmatch.fnmatchcase(t.name, p) for p in opts.task_filter)]
        if not picked:
            raise UsageError(f"--task {' '.join(opts.task_filter)} matches none of the network's tasks: "
                             + ", ".join(sorted(t.name for t in tasks)))
        return picked, None  # a part of the network: no end-to-end comparison
    return tasks, (mod, inputs, reference)
