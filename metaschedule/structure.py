"""The structure of a MetaSchedule workload: its blocks, its anchor block and kernel class, and each block's
computation form (names and extents left out), for naming tasks, grouping them by kernel class and matching
a schedule of one workload to another (transfer-tuning).

TVM is imported lazily, by the functions that walk TIR.
"""

from __future__ import annotations

import re

UNKNOWN_CLASS = "unknown"


def _kind(expr) -> str:
    # TIR expression classes moved between TVM releases (tirx.BufferLoad is now ir.TensorLoad), so
    # nodes are recognised by class name.
    return type(expr).__name__


def _strip_casts(expr):
    while _kind(expr) == "Cast":
        expr = expr.value
    return expr


def _loads_from(expr, buffer) -> bool:
    if _kind(expr) not in ("TensorLoad", "BufferLoad"):
        return False
    src = getattr(expr, "source", None)
    if src is None:
        src = getattr(expr, "buffer", None)
    return src is not None and src.same_as(buffer)


def _reduction_kind(block) -> str:
    """How the anchor block combines: ``mac`` (sum of products: matmul, conv, dense), ``sum``, ``max``,
    ``min`` or ``reduce`` (anything else)."""
    body = block.body
    if _kind(body) != "BufferStore":
        return "reduce"
    value = _strip_casts(body.value)
    kind = {"Add": "sum", "Max": "max", "Min": "min"}.get(_kind(value))
    if kind is None:
        return "reduce"
    a, b = _strip_casts(value.a), _strip_casts(value.b)
    other = b if _loads_from(a, body.buffer) else a
    if kind == "sum" and _kind(other) == "Mul":
        return "mac"
    return kind


def _statements(node, init: bool = False):
    """Every statement under ``node`` (itself first), depth first in program order: sequences, blocks (``init``:
    their init statements too), both branches of a condition and every loop's body (this TVM has no Python
    ``post_order_visit`` for TIR)."""
    if node is None:
        return
    yield node
    k = _kind(node)
    if k == "SeqStmt":
        for s in node.seq:
            yield from _statements(s, init)
    elif k == "SBlockRealize":
        yield from _statements(node.block.body, init)
        if init:
            yield from _statements(node.block.init, init)
    elif k == "IfThenElse":
        yield from _statements(node.then_case, init)
        yield from _statements(node.else_case, init)
    elif getattr(node, "body", None) is not None:
        yield from _statements(node.body, init)


def _prim_funcs(mod) -> list:
    from tvm import tirx

    return [func for _, func in mod.functions_items() if isinstance(func, tirx.PrimFunc)]


def module_blocks(mod, root: bool = False):
    """The blocks of every PrimFunc of a module (``root``: the root blocks too, which hold the functions'
    intermediate buffers), in program order."""
    return [node.block for func in _prim_funcs(mod) for node in _statements(func.body)
            if _kind(node) == "SBlockRealize" and (root or node.block.name_hint != "root")]


# the fields of TIR expressions that hold other expressions (a load's indices are walked on their own)
_EXPR_FIELDS = ("a", "b", "value", "args", "condition", "true_value", "false_value", "base", "stride")


def _exprs(expr):
    """Every node of a TIR expression (itself first), a load's indices included, outermost first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if node is None or isinstance(node, (int, float, str)):
            continue
        if isinstance(node, (list, tuple)) or _kind(node) == "Array":
            stack.extend(node)
            continue
        yield node
        if _kind(node) in ("TensorLoad", "BufferLoad"):
            stack.extend(node.indices)
            continue
        stack.extend(getattr(node, f, None) for f in _EXPR_FIELDS if hasattr(type(node), f))


def _loads(expr) -> list:
    """The buffer loads within a TIR expression, outermost first."""
    return [node for node in _exprs(expr) if _kind(node) in ("TensorLoad", "BufferLoad")]


def _buffer_of(load):
    buffer = getattr(load, "source", None)
    return getattr(load, "buffer", None) if buffer is None else buffer


def _slice_of(load):
    """``(axis, value)`` of a load that reads one constant position along one axis of its buffer (a gather_nd's
    ``indices[0, i]``: the row of indices into the data's first axis), None for any other."""
    constants = [(axis, int(index.value)) for axis, index in enumerate(load.indices) if _kind(index) == "IntImm"]
    return constants[0] if len(constants) == 1 and len(load.indices) > 1 else None


def _direct_loads(expr) -> list:
    """The loaded values an index adds (``a[i] + b[i]``: both): the loads reached through additions, subtractions
    and casts only. A load under a product or a division (a flattened index's row, ``(i0[k] * 16 + i1[k]) // 16``)
    or a comparison (TVM's wrap of a negative index, ``a[k] + (a[k] < 0) * n``) is no term of the sum: its range
    is the interval check's (``_interval``)."""
    k = _kind(expr)
    if k in ("TensorLoad", "BufferLoad"):
        return [expr]
    if k in ("Add", "Sub"):
        return _direct_loads(expr.a) + _direct_loads(expr.b)
    return _direct_loads(expr.value) if k == "Cast" else []


def _wrapped(expr) -> list:
    """``[(load, n)]`` of the loads an expression wraps as TVM wraps a negative index into an axis of ``n``:
    ``x + (x < 0) * n`` (``x + (x < 0)`` for an axis of one), as index_put, scatter_elements and take write their
    indices: ``n`` is the axis the loaded value indexes, whatever position it is flattened into."""
    found = []
    for node in (n for n in _exprs(expr) if _kind(n) == "Add"):
        load, wrap = _strip_casts(node.a), node.b
        n = 1
        if _kind(wrap) == "Mul" and _kind(wrap.b) == "IntImm":
            wrap, n = wrap.a, int(wrap.b.value)
        test = _strip_casts(wrap)
        if (_kind(load) in ("TensorLoad", "BufferLoad") and _kind(test) == "LT" and _kind(test.b) == "IntImm"
                and int(test.b.value) == 0 and _kind(_strip_casts(test.a)) in ("TensorLoad", "BufferLoad")
                and str(_strip_casts(test.a)) == str(load) and n > 0):
            found.append((load, n))
    return found


def _var_ranges(func) -> list:
    """``[(var, least, greatest)]`` of the loop variables and block iterators of a PrimFunc of constant extents."""
    out = []
    for node in _statements(func.body, init=True):
        k = _kind(node)
        pairs = [(node.loop_var, node.min, node.extent)] if k == "For" else \
            [(iv.var, iv.dom.min, iv.dom.extent) for iv in node.block.iter_vars] if k == "SBlockRealize" else []
        for var, least, extent in pairs:
            if _kind(least) == "IntImm" and _kind(extent) == "IntImm":
                out.append((var, int(least.value), int(least.value) + int(extent.value) - 1))
    return out


_COMPARE = {"LT": lambda a, b: (a[1] < b[0], a[0] >= b[1]), "LE": lambda a, b: (a[1] <= b[0], a[0] > b[1]),
            "GT": lambda a, b: (a[0] > b[1], a[1] <= b[0]), "GE": lambda a, b: (a[0] >= b[1], a[1] < b[0])}


def _interval(expr, ranges: list, value_of) -> tuple | None:
    """``(least, greatest)`` an integer index expression takes, its loops' variables over ``ranges`` and each load
    over ``value_of(load)`` (None: unknown); None where it cannot tell (a node kind it does not know)."""
    k = _kind(expr)
    if k == "IntImm":
        return int(expr.value), int(expr.value)
    if k in ("Var", "SizeVar"):
        return next(((lo, hi) for var, lo, hi in ranges if var.same_as(expr)), None)
    if k in ("TensorLoad", "BufferLoad"):
        return value_of(expr)
    if k == "Cast":
        return _interval(expr.value, ranges, value_of)
    if k in ("Select", "Call"):
        if k == "Call" and "if_then_else" not in str(getattr(expr.op, "name", "")):
            return None
        cond, yes, no = (expr.condition, expr.true_value, expr.false_value) if k == "Select" else expr.args
        c, a, b = (_interval(x, ranges, value_of) for x in (cond, yes, no))
        if c is not None and c[0] == c[1]:  # a condition it can decide
            return a if c[0] else b
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    a, b = (_interval(getattr(expr, f, None), ranges, value_of) if hasattr(expr, f) else None for f in ("a", "b"))
    if a is None or b is None:
        return None
    if k == "Add":
        return a[0] + b[0], a[1] + b[1]
    if k == "Sub":
        return a[0] - b[1], a[1] - b[0]
    if k in ("Mul", "Min", "Max"):
        corners = [op(x, y) for x in a for y in b for op in [{"Mul": int.__mul__, "Min": min, "Max": max}[k]]]
        return min(corners), max(corners)
    if k in ("FloorDiv", "Div") and b[0] == b[1] > 0 and (k == "FloorDiv" or a[0] >= 0):
        return a[0] // b[0], a[1] // b[0]
    if k in ("FloorMod", "Mod") and b[0] == b[1] > 0 and (k == "FloorMod" or a[0] >= 0):
        return (a[0], a[1]) if 0 <= a[0] and a[1] < b[0] else (0, b[0] - 1)
    if k in _COMPARE:
        true, false = _COMPARE[k](a, b)
        return (1, 1) if true else (0, 0) if false else (0, 1)
    if k in ("EQ", "NE", "And", "Or", "Not"):
        return 0, 1
    return None


def _copy_of(store):
    """``(buffer, {axis of the stored buffer: axis of it})`` where ``store`` copies one buffer with its axes
    permuted or kept (a transpose: ``T[i, j] = a[j, i]``, a cast of it too), else None."""
    load = _strip_casts(store.value)
    if _kind(load) not in ("TensorLoad", "BufferLoad"):
        return None
    if not all(_kind(x) in ("Var", "SizeVar") for x in [*store.indices, *load.indices]):
        return None
    axes = {}
    for axis, var in enumerate(store.indices):
        theirs = [k for k, x in enumerate(load.indices) if x.same_as(var)]
        if theirs:
            axes[axis] = theirs[0]
    return _buffer_of(load), axes


def _selections(mod) -> tuple[list, dict, list, list]:
    """``([(extent, [(buffer, slice)] whose values select along an axis of that extent)], {buffer: buffers its
    stored values are computed from}, [(buffer, _copy_of its store)], [(shape, indices, loop ranges)] of every
    access whose index reads a loaded value)`` over every store of ``mod``: a gather's load (a take's table, an
    embedding's rows) and a scatter's store, whose index reads a value from a buffer; ``slice`` is the one constant
    position the index reads of that buffer (``_slice_of``), or None."""
    picks, sources, copies, accesses = [], {}, [], []
    for func in _prim_funcs(mod):
        ranges = _var_ranges(func)
        # every store: those of every block with its init, and those in the loops of an opaque block (a scatter
        # written with TVM's IR builder)
        for store in (n for n in _statements(func.body, init=True) if _kind(n) == "BufferStore"):
            value_loads = _loads(store.value)
            index_loads = [load for index in store.indices for load in _loads(index)]
            sources.setdefault(store.buffer, set()).update(_buffer_of(x) for x in value_loads + index_loads)
            copy = _copy_of(store)
            if copy is not None:
                copies.append((store.buffer, copy))
            for buffer, indices in [(store.buffer, store.indices), *((_buffer_of(x), x.indices) for x in value_loads)]:
                if any(_loads(index) for index in indices):
                    accesses.append((getattr(buffer, "shape", ()), indices, ranges))
                for extent, index in zip(getattr(buffer, "shape", ()), indices):
                    # (a symbolic extent, or a cast of one, bounds nothing)
                    if not _loads(index) or not isinstance(getattr(extent, "value", None), int):
                        continue
                    # the loads the index adds: each below 1/n of the extent for n of them, so that their sum stays
                    # within it; loads under a product or a division (a flattened index) are bounded by the interval
                    # check, where it can tell the index's range; where it cannot, every load as one of the sum
                    known = _interval(index, ranges, lambda load: (0, 0)) is not None
                    terms = _direct_loads(index) if known else _loads(index)
                    if terms:
                        picks.append(((int(extent.value) - 1) // len(terms) + 1,
                                      [(_buffer_of(x), _slice_of(x)) for x in terms]))
                for index in indices:  # a wrapped index names its own axis's extent
                    picks.extend((n, [(_buffer_of(load), _slice_of(load))]) for load, n in _wrapped(index))
    return picks, sources, copies, accesses


def index_bounds(mod, default: int | None = None) -> dict:
    """``{position of a buffer argument of main: bound}`` for the arguments whose values select along a buffer axis
    (directly, or through the intermediate buffers computed from them: a broadcast copy of an index, its cast):
    values drawn for an argument must stay below its bound. An argument that selects nothing (a table of integer
    values, a mask) has none. The bound is a number, or, for an argument whose rows along one axis each index
    another axis (a gather_nd's or scatter_nd's indices: row 0 into the data's first axis, row 1 into its second),
    an array of one bound per row, shaped to broadcast over the argument (``numpy.random.Generator.integers``
    takes it as ``high``): an axis of one (a batch of one) then bounds its own row only, not every row to 0.

    ``default``: the bound of an integer argument read in an index that no axis bounds alone (a flattened index,
    ``out[flat // 16, flat % 16]``: Relax's scatter_elements and index_put; int32 and int64 arguments, at most 8
    for other integer types, as the check draws them). Every index whose range can be told (``_interval``) is
    then kept within its axis by lowering, one at a time, the bound of the argument that moves it most: a
    size-one axis folded into another's index read past the buffer otherwise. An index TVM wraps as a negative
    one (``x + (x < 0) * n``) is bounded by its own axis's ``n`` first (``_wrapped``)."""
    import numpy as np

    picks, sources, copies, accesses = _selections(mod)
    bound, sliced = {}, {}  # buffer -> its least extent; buffer -> {(axis, row): least extent}
    for extent, selecting in picks:
        todo, seen = list(selecting), set()
        while todo:
            buffer, part = todo.pop()
            if buffer is None or (part is None and any(buffer.same_as(b) for b in seen)):
                continue
            if part is not None:
                # one row of the buffer: that row's bound, followed through copies that keep it a row (Relax
                # transposes a gather_nd's indices first); what a buffer reached otherwise is computed from is
                # bounded whole, as before
                buffer, part = _copied_row(buffer, part, copies)
                rows = next((v for b, v in sliced.items() if b.same_as(buffer)), None)
                rows = sliced.setdefault(buffer, {}) if rows is None else rows
                rows[part] = min(rows.get(part, extent), extent)
            else:
                seen.add(buffer)
                bound[buffer] = min(bound.get(buffer, extent), extent)
            todo.extend((b, None) for k, v in sources.items() if k.same_as(buffer) for b in v)
    func = mod["main"]
    # positions among the buffer arguments, as MetaSchedule's TensorInfo.from_prim_func lists them (this TVM's
    # arguments are the buffers themselves; earlier ones map them through buffer_map)
    buffer_map = getattr(func, "buffer_map", None)
    params = list(func.params) if buffer_map is None else [buffer_map[p] for p in func.params if p in buffer_map]
    out = {}
    for i, buffer in enumerate(params):
        whole = [v for b, v in bound.items() if b.same_as(buffer)]
        rows = next((v for b, v in sliced.items() if b.same_as(buffer)), {})
        axes = {axis for axis, _ in rows}
        shape = [x.value if isinstance(getattr(x, "value", None), int) else 0 for x in buffer.shape]
        if len(axes) == 1 and shape[next(iter(axes))] > 0:
            axis = next(iter(axes))
            per_row = np.full([n if k == axis else 1 for k, n in enumerate(shape)], min(rows.values()), np.int64)
            for (_, row), extent in rows.items():
                if 0 <= row < shape[axis]:
                    per_row[(slice(None),) * axis + (row,)] = extent
            out[i] = np.minimum(per_row, min(whole)) if whole else per_row
        elif whole or rows:  # rows along several axes (or an axis of unknown extent): the least of all
            out[i] = min([*whole, *rows.values()])
    if default is not None:
        _keep_within(out, params, sources, copies, accesses, default)
    return out


def _copied_row(buffer, part, copies: list) -> tuple:
    """``(buffer, (axis, row))`` followed back through the copies that keep it a row (``_copy_of``) to the buffer
    first holding it."""
    for _ in range(len(copies)):
        copy = next((c for b, c in copies if b.same_as(buffer) and part[0] in c[1]), None)
        if copy is None:
            break
        buffer, part = copy[0], (copy[1][part[0]], part[1])
    return buffer, part


def _argument_sources(buffer, params: list, sources: dict) -> list[int]:
    """The positions of the arguments a buffer's values come from: itself, or those an intermediate buffer is
    computed from (a copy, a cast, a transpose of an index)."""
    found, todo, seen = [], [buffer], []
    while todo:
        b = todo.pop()
        if b is None or any(b.same_as(x) for x in seen):
            continue
        seen.append(b)
        at = next((i for i, p in enumerate(params) if p.same_as(b)), None)
        if at is not None:
            found.append(at)
        else:
            todo.extend(x for k, v in sources.items() if k.same_as(b) for x in v)
    return found


def _keep_within(out: dict, params: list, sources: dict, copies: list, accesses: list, default: int) -> None:
    """``index_bounds``' interval check, in place on ``out``: each integer argument read in an index bounded by
    ``default`` at most, then lowered until every index whose range can be told stays within its axis."""
    import numpy as np

    def load_args(index) -> list[int]:
        return sorted({i for load in _loads(index) for i in _argument_sources(_buffer_of(load), params, sources)})

    for _shape, indices, _ranges in accesses:
        for i in {i for index in indices for i in load_args(index)}:
            dtype = str(params[i].dtype)
            if dtype.startswith(("int", "uint")):  # the check's caps: default for int32/int64, 8 for other types
                cap = default if dtype in ("int32", "int64") else max(default, 8)
                out[i] = np.minimum(out[i], cap) if i in out else cap

    def value_of(bounds: dict):
        def read(load):
            args = _argument_sources(_buffer_of(load), params, sources)
            if not args or any(i not in bounds for i in args):
                return None
            highs = []
            row = _slice_of(load)
            held, part = _copied_row(_buffer_of(load), row, copies) if row is not None else (None, None)
            for i in args:
                b = bounds[i]
                if isinstance(b, np.ndarray) and part is not None and params[i].same_as(held) \
                        and b.shape[part[0]] > part[1]:  # one row of a per-row bound: that row's
                    b = b[(slice(None),) * part[0] + (part[1],)]
                highs.append(int(np.max(b)))
            return 0, max(highs) - 1
        return read

    def excess(bounds: dict, shape, index, ranges) -> int:
        extent = getattr(shape, "value", None)
        span = _interval(index, ranges, value_of(bounds))
        return 0 if span is None or not isinstance(extent, int) else max(0, span[1] - (extent - 1))

    for _ in range(64 * max(1, len(accesses))):  # each round lowers one bound by one: a few rounds an access
        over = [(shape, index, ranges) for shapes, indices, ranges in accesses
                for shape, index in zip(shapes, indices) if excess(out, shape, index, ranges)]
        if not over:
            return
        shape, index, ranges = over[0]
        now = excess(out, shape, index, ranges)
        movers = []
        for i in load_args(index):
            if i in out and np.max(out[i]) > 1:
                trial = {**out, i: np.ones_like(out[i]) if isinstance(out[i], np.ndarray) else 1}
                movers.append((now - excess(trial, shape, index, ranges), i))
        movers = [m for m in movers if m[0] > 0]
        if not movers:  # no argument's bound moves it: an index that reads past its axis whatever is drawn
            accesses = [a for a in accesses if not any(x.same_as(index) for x in a[1])]
            continue
        # the one that moves it most; among equals the later argument (index_put's: the inner axes' indices,
        # where a folded axis of one adds its index to its neighbour's)
        i = max(movers)[1]
        out[i] = np.maximum(1, out[i] - 1) if isinstance(out[i], np.ndarray) else max(1, out[i] - 1)


def narrow_float_sums(mod) -> dict[str, int]:
    """``{accumulator dtype: the longest reduction in it}`` (its reduction iterators' extents multiplied) over the
    blocks of ``mod`` that accumulate in a float type narrower than 32 bits (float16, bfloat16, the float8 kinds):
    each add of such a sum rounds to the accumulator's few bits, and two correct programs that add in another order
    differ by about the format's epsilon times the square root of this length (a symbolic extent counts as 1)."""
    longest: dict[str, int] = {}
    for block in module_blocks(mod):
        body = block.body
        if _kind(body) != "BufferStore" or block.init is None:
            continue
        dtype = str(body.buffer.dtype)
        if not dtype.startswith(("float", "bfloat")) or int(re.search(r"\d+", dtype).group()) >= 32:
            continue
        n = 1
        for iv in block.iter_vars:
            if int(iv.iter_type) == 2 and isinstance(getattr(iv.dom.extent, "value", None), int):
                n *= int(iv.dom.extent.value)
        longest[dtype] = max(longest.get(dtype, 1), n)
    return longest


def kernel_class(mod) -> tuple[str, str, list[int]]:
    """``(kernel class, anchor block name, anchor iterator extents)`` of a TIR IRModule.

    The class describes the *computation form* of the anchor block (TVM's ``find_anchor_sblock``: the
    block with an init statement and the most FLOPs) and ignores names and shapes: the combiner
    (``mac`` = multiply-accumulate, ``sum``, ``max``, ...) and the number of spatial (``s``) and reduction
    (``r``) iterators, e.g. ``mac.s2r1`` for every 2-D matmul (dense, ``nn.Linear``), ``mac.s3r1`` for
    batch matmul, ``mac.s4r3`` for 2-D convolutions, ``mac.s4r2`` for depthwise ones.

    Why not names: block and function names depend on who wrote the workload (``C`` in TVM's te
    benchmarks, ``matmul`` or ``T_matmul_NT`` from Relax, ``main`` in every tuning database), so the same
    operator would fall into different classes depending on where the task came from, while tasks of one
    class must be comparable wherever they came from. The form and loop structure are what a schedule
    depends on: a trace of one class replays on another workload of the same class (transfer-tuning),
    and matmul-like tasks of different shapes share one class. Modules without a reduction are
    ``injective.s<n>`` by their largest block; modules without blocks are ``unknown``.
    """
    from tvm.s_tir.analysis import find_anchor_sblock

    try:
        anchor = find_anchor_sblock(mod)
    except Exception:  # TVM refuses modules with several anchor candidates of equal rank
        anchor = None
    if anchor is not None:
        spatial = sum(1 for iv in anchor.iter_vars if int(iv.iter_type) == 0)
        reduce_ = sum(1 for iv in anchor.iter_vars if int(iv.iter_type) == 2)
        extents = [int(iv.dom.extent) if hasattr(iv.dom.extent, "value") else -1 for iv in anchor.iter_vars]
        return f"{_reduction_kind(anchor)}.s{spatial}r{reduce_}", anchor.name_hint, extents
    blocks = module_blocks(mod)
    if not blocks:
        return UNKNOWN_CLASS, "", []

    def size(b):
        n = 1
        for iv in b.iter_vars:
            n *= int(iv.dom.extent) if hasattr(iv.dom.extent, "value") else 1
        return n

    big = max(blocks, key=size)
    extents = [int(iv.dom.extent) if hasattr(iv.dom.extent, "value") else -1 for iv in big.iter_vars]
    return f"injective.s{len(big.iter_vars)}", big.name_hint, extents


def _expr_shape(expr, depth: int = 0) -> str:
    """An expression's form without names or shapes: loads are ``x``, constants ``c``, variables ``v``,
    e.g. ``Max(Add(x,x),c)`` for a bias add followed by ReLU."""
    k = _kind(expr)
    if k in ("TensorLoad", "BufferLoad"):
        return "x"
    if k in ("IntImm", "FloatImm", "StringImm"):
        return "c"
    if k in ("Var", "SizeVar"):
        return "v"
    if depth > 16:
        return "_"
    if k == "Call":
        name = str(getattr(expr.op, "name", "call")).replace("tirx.", "").replace("tir.", "")
        return f"{name}({','.join(_expr_shape(a, depth + 1) for a in expr.args)})"
    kids = [getattr(expr, f) for f in ("condition", "true_value", "false_value", "a", "b", "value")
            if getattr(expr, f, None) is not None]
    return f"{k}({','.join(_expr_shape(c, depth + 1) for c in kids)})" if kids else k


def block_signature(block) -> str:
    """A block's computation form: its iterators' kinds (``s`` spatial, ``r`` reduction) and what its store
    computes (``s2r1:Add(x,Mul(x,x))``); names and extents left out."""
    its = "".join("s" if int(iv.iter_type) == 0 else "r" if int(iv.iter_type) == 2 else "o" for iv in block.iter_vars)
    body = block.body
    what = _expr_shape(body.value) if _kind(body) == "BufferStore" else _kind(body)
    return f"{its}:{what}"


def block_structure(mod) -> tuple[list[str], list[str], int, list[int]]:
    """``(block names, block signatures, anchor position, anchor iterator extents)`` of a workload, blocks in
    program order; the anchor is the kernel-class block (``kernel_class``), position -1 when there is none."""
    blocks = module_blocks(mod)
    _cls, anchor, extents = kernel_class(mod)
    names = [b.name_hint for b in blocks]
    at = names.index(anchor) if anchor in names else -1
    return names, [block_signature(b) for b in blocks], at, extents
