"""Networks and task weights for Ansor / TenSet logs: a JSON file, or TenSet's ``network_info/`` pickles.

The JSON form is ``{network: {workload_key: weight}}``.

TenSet's ``network_info/<(network,shapes),target>.task.pkl`` files hold ``(tasks, weights)`` where each task
is a pickled ``tvm.auto_scheduler.SearchTask``. That class no longer exists (TVM removed auto_scheduler),
and unpickling untrusted data must never run code, so these files are read by a restricted unpickler
whose ``find_class`` returns an inert placeholder for every class or function the pickle names: nothing
is imported, and "calling" a placeholder only records its arguments. Each task then is a placeholder whose
pickled state (``{"workload_key": ..., "desc": ...}``) is all that is read.
"""

from __future__ import annotations

import io
import math
import pickle
import re
from pathlib import Path

import orjson

from costlab.common.errors import InputError
from costlab.datasets.ansor_keys import BadLine, parse_workload_key

# {network: [(workload key, weight, description or None)]}
NetworkInfo = dict[str, list[tuple[str, float, str | None]]]


def load_network_info(path: Path) -> NetworkInfo:
    if not path.exists():
        raise InputError(path, "no such file or directory (--network-info)")
    if path.is_dir():
        return _load_tenset_folder(path)
    if path.suffix == ".pkl":
        return _load_task_pickles([path])
    return _load_json(path)


def _check_key(path, key, where: str) -> str:
    try:
        parse_workload_key(key)
    except BadLine as exc:
        raise InputError(path, f"{where}: {exc}") from None
    return key


def _check_weight(path, weight, where: str) -> float:
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise InputError(path, f"{where}: weight must be a positive number, got {weight!r}")
    return float(weight)


def _load_json(path: Path) -> NetworkInfo:
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"network info is not valid JSON ({exc}); expected "
                         "{network: {workload_key: weight}}, or TenSet's network_info folder") from None
    if not isinstance(data, dict) or not data:
        raise InputError(path, "network info must be a non-empty JSON object {network: {workload_key: weight}}")
    out: NetworkInfo = {}
    for net, tasks in data.items():
        if not isinstance(tasks, dict) or not tasks:
            raise InputError(path, f"network {net!r}: expected a non-empty object {{workload_key: weight}}")
        out[net] = [(_check_key(path, k, f"network {net!r}"), _check_weight(path, w, f"network {net!r}"), None)
                    for k, w in tasks.items()]
    return out


# -- TenSet pickles --------------------------------------------------------------------------------------

class _Inert:
    """Stands for any class or function a pickle names. Creating or "calling" one stores the arguments;
    setting its state stores the state. It has no other behaviour."""

    _pickled_as = ("", "")

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.kwargs, obj.state = args, kwargs, None
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.state = state

    def __repr__(self) -> str:
        return f"<inert {'.'.join(self._pickled_as)}>"


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        return type(name, (_Inert,), {"_pickled_as": (module, name)})

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent ids are not supported")


def inert_load(data: bytes):
    """Unpickle with every global replaced by an inert placeholder (never imports or runs anything)."""
    return _InertUnpickler(io.BytesIO(data)).load()


def _task_state(task) -> dict:
    """The pickled state of a SearchTask placeholder. TVM objects pickle as ``_new_object(cls)`` + state."""
    state = task.state if isinstance(task, _Inert) else None
    if isinstance(state, tuple) and state and isinstance(state[0], dict):  # (dict state, slot state)
        state = state[0]
    return state if isinstance(state, dict) else {}


_TENSET_NAME = re.compile(r"^\(\((?P<net>[^,()]+),\[(?P<shapes>.*)\]\),(?P<target>[^()]*)\)$")


def network_name(stem: str) -> tuple[str, str]:
    """``((resnet_50,[(1,3,224,224)]),llvm)`` -> (``resnet_50-1x3x224x224``, ``llvm``); other stems unchanged."""
    m = _TENSET_NAME.match(stem)
    if not m:
        return stem, ""
    shapes = re.findall(r"\(([^()]*)\)", m["shapes"])
    parts = [m["net"]] + ["x".join(s.replace(" ", "").split(",")).strip("x") for s in shapes]
    return "-".join(p for p in parts if p), m["target"]


def _load_tenset_folder(folder: Path) -> NetworkInfo:
    files = sorted(folder.rglob("*.task.pkl"))
    if not files:
        raise InputError(folder, "no *.task.pkl files (TenSet network_info) in this folder")
    return _load_task_pickles(files)


def _load_task_pickles(files: list[Path]) -> NetworkInfo:
    named = []
    for f in files:
        stem = f.name[: -len(".task.pkl")] if f.name.endswith(".task.pkl") else f.stem
        named.append((f, *network_name(stem)))
    counts: dict[str, int] = {}
    for _, net, _ in named:
        counts[net] = counts.get(net, 0) + 1
    out: NetworkInfo = {}
    source: dict[str, Path] = {}
    for f, net, target in named:
        name = f"{net}@{target}" if counts[net] > 1 and target else net
        tasks = _read_task_pickle(f)
        if name in out and sorted(out[name]) != sorted(tasks):  # one name, two task lists: neither is dropped silently
            raise InputError(f, f"network {name!r} is also given by {source[name]} with other tasks or weights; "
                                "import the folders apart, or keep one of them")
        out[name], source[name] = tasks, f
    return out


def _read_task_pickle(path: Path) -> list[tuple[str, float, str | None]]:
    try:
        value = inert_load(path.read_bytes())
    except Exception as exc:  # any malformed pickle: report it, never let it run
        raise InputError(path, f"cannot read TenSet task pickle ({type(exc).__name__}: {exc}); convert the "
                         "network info to JSON {network: {workload_key: weight}}") from None
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], list)
            and isinstance(value[1], (list, tuple)) and len(value[0]) == len(value[1])):
        raise InputError(path, "not a TenSet task pickle: expected (tasks, weights) of equal length")
    out = []
    for i, (task, weight) in enumerate(zip(*value)):
        state = _task_state(task)
        key = state.get("workload_key")
        if key is None:
            raise InputError(path, f"task {i} has no workload_key in its pickled state", record=str(i))
        key = _check_key(path, key, f"task {i}")
        desc = state.get("desc")
        out.append((key, _check_weight(path, weight, f"task {i}"), desc if isinstance(desc, str) and desc else None))
    return out
