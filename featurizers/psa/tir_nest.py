"""Walk a (scheduled) TensorIR module into loop nests and affine accesses (``loopnest.Program``).

The walk visits loops and blocks only: each block carries its iterator bindings (affine in the loop
variables around it) and its read/write regions (affine in its iterators), so no expression tree of a
statement is walked except to count its floating-point operations. Indices that are not affine (``//`` and
``%`` of fused loops) are split into the mixed-radix terms they stand for; what cannot be split exactly is
bounded and the program is marked inexact.

``walk_blocks`` returns the blocks with their iterators and per-iterator bindings (the form the trace
simulator starts from, see ``trace_nest``); ``program_of`` composes them into a ``Program``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from costlab.featurizers.psa.loopnest import SERIAL, Access, Loop, Program, Stmt, compose_terms, divmod_terms

_KIND = {0: SERIAL, 1: "parallel", 2: "vectorized", 3: "unrolled"}
_FLOAT_OPS = {"Add", "Sub", "Mul", "Div", "Max", "Min", "FloorDiv", "FloorMod", "Mod"}
_CMP_OPS = {"EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or", "Not"}
# tensor-core multiply-accumulates: a tensorized block's body is one such call over its fragments
# after the namespace (``tirx.``, ``tirx.ptx_legacy.``): WMMA's and the MMA intrinsics' multiply-accumulates
_MMA_OPS = {"tvm_mma_sync", "tvm_bmma_sync", "ptx_mma", "ptx_mma_sp", "mma"}


def dtype_bytes(dtype) -> int:
    """Bytes of one element of ``dtype`` (its lanes included: ``float32x4`` is 16): the bits are the first number
    of the name (``float8_e4m3fn`` is 8 bits; the digits of its exponent and mantissa widths are not), a type of
    fewer than 8 bits takes a byte."""
    text = str(dtype)
    if text == "bool":
        return 1
    bits = re.match(r"[A-Za-z]+(\d+)", text)
    if not bits:
        return 4
    lanes = re.search(r"x(\d+)$", text)
    return max(1, -(-int(bits.group(1)) // 8)) * (int(lanes.group(1)) if lanes else 1)


def _int(expr, default=None):
    v = getattr(expr, "value", None)
    if isinstance(v, int):
        return v
    if isinstance(expr, int):
        return expr
    return default


@dataclass
class AxisAccess:
    """A buffer access of a block, its index affine in the block's iterators."""

    buffer: str
    scope: str
    nbytes: int
    write: bool
    shape: tuple
    dims: list  # per dimension: [(axis, coef, lower, span)]; axis == -1: a range of `span` read by one instance


@dataclass
class BlockRecord:
    name: str
    loops: list  # [Loop] outermost first, shared objects
    axes: list  # [(extent, is_reduce)]
    binding: list  # per axis: [(pos, coef, lower, span)] over `loops`
    accesses: list  # [AxisAccess]
    flops: float
    init: bool = False
    exact: bool = True
    store_value: object = field(default=None, repr=False)
    tensor_core: bool = False


class _Affine:
    """Affine forms of index expressions: a list of terms ``(key, coef, lower, span)`` (the digit
    ``coef * ((key // lower) % span)`` of a loop or block variable ``key``) and a constant.

    ``//`` and ``%`` by constants split variables into mixed-radix digits (``loopnest.divmod_terms``);
    ``exact[0]`` drops to False when a form had to be bounded.
    """

    def __init__(self, spans: dict):
        self.spans = spans  # var handle -> extent
        self.exact = [True]

    def form(self, e):
        k = type(e).__name__
        if k == "Var":
            h = e.__chandle__()
            span = self.spans.get(h)
            if span is None:
                return [], 0
            return [(h, 1, 1, span)], 0
        if k == "IntImm":
            return [], e.value
        if k == "Add" or k == "Sub":
            fa, ca = self.form(e.a)
            fb, cb = self.form(e.b)
            if k == "Sub":
                fb = [(h, -c, lw, sp) for h, c, lw, sp in fb]
                cb = -cb
            return fa + fb, ca + cb
        if k == "Mul":
            ca, cb = _int(e.a), _int(e.b)
            if cb is not None or ca is not None:
                f, c = self.form(e.a if cb is not None else e.b)
                m = cb if cb is not None else ca
                return [(h, co * m, lw, sp) for h, co, lw, sp in f], c * m
        elif k in ("FloorDiv", "FloorMod"):
            d = _int(e.b)
            if d is not None and d > 0:
                f, c = self.form(e.a)
                is_div = k == "FloorDiv"
                return divmod_terms(f, d, is_div, self.exact), (c // d if is_div else c % d)
        elif k == "Cast":
            return self.form(e.value)
        # anything else: every variable inside may move the index by its whole range
        self.exact[0] = False
        out: dict = {}
        self._collect(e, out)
        return [(h, 1, 1, sp) for h, sp in out.items()], 0

    def _collect(self, e, out):
        k = type(e).__name__
        if k == "Var":
            h = e.__chandle__()
            if h in self.spans:
                out.setdefault(h, self.spans[h])
            return
        for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
            sub = getattr(e, attr, None)
            if sub is not None and not isinstance(sub, (int, float, str)):
                self._collect(sub, out)
        for sub in getattr(e, "args", ()) or ():
            self._collect(sub, out)


def count_flops(e) -> float:
    """Floating-point operations of one evaluation of an expression (a math call counts one)."""
    k = type(e).__name__
    if k in ("TensorLoad", "BufferLoad", "FloatImm", "IntImm", "Var", "StringImm"):
        return 0.0
    n = 0.0
    if k in _FLOAT_OPS:
        ty = getattr(e, "ty", None)
        if ty is not None and str(getattr(ty, "dtype", "")).startswith(("float", "bfloat")):
            n += 1.0
        return n + count_flops(e.a) + count_flops(e.b)
    if k == "Call":
        op = str(getattr(e.op, "name", ""))
        ty = getattr(e, "ty", None)
        if ty is not None and str(getattr(ty, "dtype", "")).startswith(("float", "bfloat")) and not op.endswith(
                ("if_then_else", "likely", "reinterpret")):
            n += 1.0
        return n + sum(count_flops(a) for a in e.args)
    if k == "Cast":
        return count_flops(e.value)
    if k == "Select":
        return count_flops(e.true_value) + count_flops(e.false_value)
    if k in _CMP_OPS:
        return 0.0
    return 0.0


def _calls(stmt):
    """The ops of the calls a statement evaluates (``T.evaluate(call)``), as a tensorized block's body holds."""
    k = type(stmt).__name__
    if k == "Evaluate":
        op = getattr(getattr(stmt.value, "op", None), "name", None)
        if op is not None:
            yield str(op)
    elif k == "SeqStmt":
        for s in stmt.seq:
            yield from _calls(s)
    else:
        body = getattr(stmt, "body", None)
        if body is not None:
            yield from _calls(body)


def _region_elements(region) -> int:
    n = 1
    for rng in region.region:
        n *= max(1, _int(rng.extent, 1))
    return n


def _mma_flops(block) -> float:
    """FLOPs of one instance of a tensorized multiply-accumulate block: the product ``m x n x k`` of its tile is
    the square root of the product of its operands' and its accumulator's tile sizes (``mk``, ``kn``, ``mn``),
    two FLOPs each."""
    written = {w.source.name for w in block.writes}
    sizes = [_region_elements(r) for r in block.reads if r.source.name not in written][:2]
    sizes += [_region_elements(w) for w in block.writes][:1]
    if len(sizes) < 3:
        return 0.0
    return 2.0 * (sizes[0] * sizes[1] * sizes[2]) ** 0.5


def _stores(stmt):
    k = type(stmt).__name__
    if k == "BufferStore":
        yield stmt
    elif k == "SeqStmt":
        for s in stmt.seq:
            yield from _stores(s)
    elif k == "IfThenElse":
        yield from _stores(stmt.then_case)
        if stmt.else_case is not None:
            yield from _stores(stmt.else_case)
    else:
        body = getattr(stmt, "body", None)
        if body is not None:
            yield from _stores(body)


def _loop_of(node) -> Loop:
    ext = _int(node.extent, 1)
    kind = _KIND.get(int(node.kind), SERIAL)
    if int(node.kind) == 4 and node.thread_binding is not None:
        kind = str(node.thread_binding.thread_tag)
    unroll = 0
    ann = node.annotations
    if ann is not None and "pragma_auto_unroll_max_step" in ann:
        unroll = _int(ann["pragma_auto_unroll_max_step"], 0)
    return Loop(ext, kind, unroll)


def walk_blocks(func) -> list:
    """The blocks of a PrimFunc (or the ``main`` of an IRModule) in execution order, root excluded."""
    if hasattr(func, "functions_items"):
        funcs = [f for _, f in func.functions_items() if type(f).__name__ == "PrimFunc"]
        func = funcs[0]
    out: list = []
    loops: list = []
    loop_vars: list = []  # (handle, extent)

    def visit(node):
        k = type(node).__name__
        if k == "For":
            lp = _loop_of(node)
            loops.append(lp)
            loop_vars.append((node.loop_var.__chandle__(), lp.extent))
            visit(node.body)
            loops.pop()
            loop_vars.pop()
        elif k == "SeqStmt":
            for s in node.seq:
                visit(s)
        elif k == "SBlockRealize":
            block = node.block
            if block.name_hint != "root" or loops:
                out.append(_block_record(node, block, list(loops), list(loop_vars)))
            visit(block.body)
        elif k == "IfThenElse":
            visit(node.then_case)
            if node.else_case is not None:
                visit(node.else_case)
        elif k in ("AttrStmt", "Bind", "LetStmt", "AllocBuffer", "DeclBuffer", "AssertStmt", "While"):
            body = getattr(node, "body", None)
            if body is not None:
                visit(body)

    visit(func.body)
    return out


def _region_dims(region, aff, axis_of) -> list:
    dims = []
    for rng in region.region:
        form, _ = aff.form(rng.min)
        terms = [(axis_of[h], coef, lower, span) for h, coef, lower, span in form]
        ext = _int(rng.extent, None)
        if ext is None:
            aff.exact[0] = False
            ext = 1
        if ext > 1:
            terms.append((-1, 1, 1, ext))
        dims.append(terms)
    return dims


def _only_loop_vars(e, spans: dict) -> bool:
    """Whether an integer expression is a sum of multiples of the given loop variables and constants (a symbolic
    shape, or a node the affine reader does not read, would be dropped from its form, not bounded by it)."""
    k = type(e).__name__
    if k == "Var":
        return e.__chandle__() in spans
    if k == "IntImm":
        return True
    if k in ("Add", "Sub", "Mul"):  # a // or % digit bounds a part of its variable, not the variable
        return _only_loop_vars(e.a, spans) and _only_loop_vars(e.b, spans)
    if k == "Cast":
        return _only_loop_vars(e.value, spans)
    return False


def _predicate_caps(pred, spans: dict) -> dict:
    """Loop variable -> the extent a block's predicate lets it reach. MetaSchedule's cooperative fetch splits a
    fused loop as ``Split(fused, [None, threads, lanes])``; where threads x lanes overshoot the tile, the block
    is guarded by ``T.where(... < C)``, and its loops' full extents would count elements never accessed. Each
    conjunct ``sum(coef * var) + c < C`` (every coefficient positive) bounds each of its variables to
    ``ceil((C - c) / coef)``, as the trace simulator clips a split that overshoots its loop."""
    caps, stack = {}, [pred]
    while stack:
        e = stack.pop()
        k = type(e).__name__
        if k == "And":
            stack += [e.a, e.b]
            continue
        bound = _int(getattr(e, "b", None)) if k in ("LT", "LE") else None
        if bound is None or not _only_loop_vars(e.a, spans):
            continue
        aff = _Affine(spans)
        form, c = aff.form(e.a)
        if not aff.exact[0] or any(coef <= 0 for _, coef, _, _ in form):
            continue
        for h, coef, _, _ in form:  # whole variables: no // or % digit passes _only_loop_vars
            limit = max(1, -(-(bound + (k == "LE") - c) // coef))
            caps[h] = min(caps.get(h, spans[h]), limit)
    return caps


def _block_record(realize, block, loops, loop_vars) -> BlockRecord:
    # the loops' extents as the block's predicate bounds them (its accesses' footprints); the loops themselves
    # (their trip counts, threads) keep theirs
    caps = _predicate_caps(realize.predicate, {h: ext for h, ext in loop_vars})
    loop_aff = _Affine({h: caps.get(h, ext) for h, ext in loop_vars})
    pos_of = {h: i for i, (h, _) in enumerate(loop_vars)}
    axes, binding, spans, axis_of = [], [], {}, {}
    for i, (iv, value) in enumerate(zip(block.iter_vars, realize.iter_values)):
        ext = _int(iv.dom.extent, 1)
        axes.append((ext, int(iv.iter_type) == 2))
        form, _ = loop_aff.form(value)
        binding.append([(pos_of[h], coef, lower, span) for h, coef, lower, span in form])
        h = iv.var.__chandle__()
        spans[h] = ext
        axis_of[h] = i
    aff = _Affine(spans)
    accesses = []
    for region in block.writes:
        buf = region.source
        accesses.append(AxisAccess(buf.name, str(buf.scope()), dtype_bytes(buf.dtype), True,
                                   tuple(_int(x, 1) for x in buf.shape), _region_dims(region, aff, axis_of)))
    for region in block.reads:
        buf = region.source
        accesses.append(AxisAccess(buf.name, str(buf.scope()), dtype_bytes(buf.dtype), False,
                                   tuple(_int(x, 1) for x in buf.shape), _region_dims(region, aff, axis_of)))
    flops, init, value = 0.0, False, None
    for store in _stores(block.body):
        value = store.value
        if type(value).__name__ in ("FloatImm", "IntImm"):
            init = True
        flops += count_flops(value)
    if block.init is not None:
        init = False
    tensor_core = value is None and any(op.rpartition(".")[2] in _MMA_OPS for op in _calls(block.body))
    if tensor_core:
        flops = _mma_flops(block)
    return BlockRecord(block.name_hint, loops, axes, binding, accesses, flops, init,
                       loop_aff.exact[0] and aff.exact[0], value, tensor_core)


def compose(record: BlockRecord) -> Stmt:
    """The statement of a block: its accesses' indices expressed over its loops."""
    n = len(record.loops)
    mapping = {i: terms for i, terms in enumerate(record.binding)}
    exact = [True]
    accesses = []
    for acc in record.accesses:
        dims = []
        for terms in acc.dims:
            out = []
            for pos, coef, lower, span in compose_terms([t for t in terms if t[0] >= 0], mapping, exact):
                out.append((pos, coef, span))
            out.extend((n, coef, span) for a, coef, lower, span in terms if a < 0)
            dims.append(out)
        accesses.append(Access(acc.buffer, acc.scope, acc.nbytes, acc.write, acc.shape, dims))
    if not exact[0]:
        record.exact = False
    return Stmt(record.name, record.loops, record.flops, accesses, record.init, record.tensor_core)


def program_of(mod_or_func, gpu: bool = False) -> Program:
    """The ``Program`` of a scheduled TIR module (or PrimFunc)."""
    records = walk_blocks(mod_or_func)
    stmts = [compose(r) for r in records]
    return Program(stmts, gpu=gpu, exact=all(r.exact for r in records))
