"""The tasks of a workload, as ``costlab tune`` tunes them and ``costlab transfer`` transfers into them: TVM
benchmark workloads by name (``--workload GMM:1,128,128,128``), or the tasks of a network (``--network``, a
``transformers`` model type or ``MODULE:FUNCTION``, optionally narrowed by ``--task``) extracted as ``costlab
dataset extract`` does and weighted by how often they run."""

from __future__ import annotations

from dataclasses import dataclass

from costlab.common.errors import UsageError


@dataclass
class Task:
    name: str
    mod: object
    weight: float = 1.0


def workload_tasks(opts, target) -> tuple[list[Task], object]:
    """The tasks to tune, and the network's Relax module and inputs (None for workloads)."""
    from costlab.datasets.extract import network_module, te_workload_task, torch_fn_model, workload_json_mod

    if opts.workloads:
        out, seen = [], {}
        for spec in opts.workloads:
            try:
                name, func = te_workload_task(spec)
            except ValueError as exc:
                raise UsageError(f"--workload {spec}: {exc}") from None
            if name in seen:  # the same workload written twice (GMM:... and gmm:...) is one task
                continue
            seen[name] = True
            out.append(Task(name, workload_json_mod(func)))
        return out, None
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    from costlab.datasets import hf_models

    try:
        if ":" in opts.network and "=" not in opts.network.split(":", 1)[1]:
            model, inputs = torch_fn_model(opts.network)
        else:
            model, inputs, _ = hf_models.build(opts.network, opts.batch, opts.seq_len)
        mod = network_module(model, inputs, target)
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
    return tasks, (mod, inputs)
