"""A scheduled tensor program as loop nests and affine buffer accesses: what PSA and PaCM reason about.

Both ways into it produce the same ``Program``: walking a scheduled TIR module (``tir_nest``) and simulating a
MetaSchedule trace on a per-task analysis of the workload (``trace_nest``). A program is a list of statements
(TIR blocks, in execution order); each statement has the loops around it, outermost first (a loop shared by
several statements is the same ``Loop`` object), its floating-point work per instance, and its buffer
accesses. An access index is affine in the loop variables: per buffer dimension a list of *terms*
``(pos, coef, span)``: loop ``pos`` of the statement moves the index by ``coef`` per step over ``span``
steps (a loop split or fused into a multi-radix index contributes several terms; ``pos == len(loops)``
stands for a range accessed by one instance). That is enough to get, for every loop level, how many
distinct elements each access touches below it (its footprint), from which reuse, cache traffic and
register tiles follow.

Pure Python, no TVM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SERIAL, PARALLEL, VECTORIZED, UNROLLED = "serial", "parallel", "vectorized", "unrolled"


class Loop:
    """One loop: extent, kind (``serial``, ``parallel``, ``vectorized``, ``unrolled`` or a thread tag such as
    ``blockIdx.x`` / ``threadIdx.x`` / ``vthread.x``) and its ``pragma_auto_unroll_max_step``."""

    __slots__ = ("extent", "kind", "unroll")

    def __init__(self, extent: int, kind: str = SERIAL, unroll: int = 0):
        self.extent = int(extent)
        self.kind = kind
        self.unroll = int(unroll)

    @property
    def is_thread(self) -> bool:
        return "." in self.kind

    def __repr__(self) -> str:
        return f"Loop({self.extent}, {self.kind}{', unroll=%d' % self.unroll if self.unroll else ''})"


# storage scopes of tensor-core fragments: WMMA's, and the MMA intrinsics' register tiles
FRAGMENT_SCOPES = ("wmma.", "m16n8k8.")


def is_fragment(scope: str) -> bool:
    """Whether a storage scope is a tensor-core fragment's (held in the registers of a warp's lanes)."""
    return str(scope).startswith(FRAGMENT_SCOPES)


@dataclass
class Access:
    buffer: str
    scope: str  # storage scope: global, shared, local, ...
    nbytes: int  # bytes per element
    write: bool
    shape: tuple  # the buffer's shape (elements per dimension)
    dims: list  # per dimension: [(pos, coef, span), ...]


@dataclass
class Stmt:
    name: str
    loops: list  # [Loop], outermost first
    flops: float  # floating-point operations per instance
    accesses: list = field(default_factory=list)  # [Access]
    init: bool = False  # the init statement of a reduction (writes a constant)
    tensor_core: bool = False  # a warp-wide tensor-core multiply-accumulate (its FLOPs run at the tensor-core peak)

    def instances(self) -> int:
        n = 1
        for lp in self.loops:
            n *= lp.extent
        return n


@dataclass
class Program:
    stmts: list  # [Stmt] in execution order
    gpu: bool = False
    exact: bool = True  # False when some index or loop could only be approximated

    def signature(self, footprint: bool = True) -> list:
        """Comparable summary: per statement its name, loops (extent, kind, unroll pragma), FLOPs, and per
        access (buffer, written, footprint below every loop depth)."""
        out = []
        for s in self.stmts:
            fps = footprints(s) if footprint else [()] * len(s.accesses)
            acc = sorted((a.buffer, a.write, tuple(fp)) for a, fp in zip(s.accesses, fps))
            out.append((s.name, tuple((lp.extent, lp.kind, lp.unroll) for lp in s.loops), s.flops, tuple(acc)))
        return out


def access_span(access: Access, depth: int) -> list:
    """Per dimension, how many consecutive indices loops ``depth..`` sweep (clipped to the buffer's shape)."""
    out = []
    for d, terms in enumerate(access.dims):
        width = 1
        for pos, coef, span in terms:
            if pos >= depth and span > 1:
                width += abs(coef) * (span - 1)
        shape = access.shape[d] if d < len(access.shape) else width
        out.append(min(width, shape) if shape > 0 else width)
    return out


def footprint(access: Access, depth: int) -> int:
    """Distinct elements (bounding box) the access touches during one iteration of loop ``depth - 1``."""
    n = 1
    for w in access_span(access, depth):
        n *= w
    return n


def footprints(stmt: Stmt, relaxed: set | None = None) -> list:
    """``fp[a][d]``: elements access ``a`` touches below loop depth ``d``, for d = 0 .. len(loops).

    ``relaxed``: loop positions that always count as swept, whatever the depth (e.g. the thread loops of
    a GPU statement when asking what one thread block touches).
    """
    n = len(stmt.loops)
    out = []
    for a in stmt.accesses:
        total = [1] * (n + 1)
        for d, terms in enumerate(a.dims):
            add = [0] * (n + 2)
            extra = 0
            for pos, coef, span in terms:
                if span > 1 and coef:
                    w = abs(coef) * (span - 1)
                    if relaxed is not None and pos in relaxed:
                        extra += w
                    else:
                        add[min(pos, n)] += w
            cap = a.shape[d] if d < len(a.shape) and a.shape[d] > 0 else None
            width = 1 + extra
            for depth in range(n, -1, -1):
                width += add[depth]
                total[depth] *= width if cap is None or width < cap else cap
        out.append(total)
    return out


def loops_used(access: Access) -> set:
    """Loop positions the access index depends on."""
    return {pos for terms in access.dims for pos, coef, span in terms if coef != 0 and span > 1}


def flat_strides(access: Access) -> dict:
    """Per loop position, the smallest non-zero step (in elements of the flattened buffer) of the index."""
    strides = [1] * len(access.dims)
    for d in range(len(access.dims) - 2, -1, -1):
        nxt = access.shape[d + 1] if d + 1 < len(access.shape) else 1
        strides[d] = strides[d + 1] * max(1, int(nxt))
    out: dict = {}
    for d, terms in enumerate(access.dims):
        for pos, coef, span in terms:
            if coef == 0 or span <= 1:
                continue
            step = abs(coef) * strides[d]
            if pos not in out or step < out[pos]:
                out[pos] = step
    return out


def divmod_terms(terms: list, d: int, is_div: bool, exact: list) -> list:
    """``(sum of terms) // d`` or ``% d`` as terms, a term ``(key, coef, lower, span)`` standing for
    ``coef * ((key // lower) % span)``.

    Exact for the mixed-radix sums fused and split loops produce (no term carries into another); a term
    whose coefficient neither divides nor is divided by ``d`` is bounded and ``exact[0]`` set False.
    """
    out = []
    low = []  # digits below d: without carries between them they must nest (c_i * span_i <= c_next)
    for key, coef, lower, span in terms:
        c = abs(coef)
        if c == 0 or span <= 1:
            continue
        if c < d:
            low.append((c, min(span, -(-d // c))))
        sign = 1 if coef > 0 else -1
        if c % d == 0:
            if is_div:
                out.append((key, coef // c * (c // d), lower, span))
            continue
        if d % c == 0:
            m = d // c  # steps of this digit within one step of d
            if span <= m:
                if not is_div:
                    out.append((key, coef, lower, span))
                continue
            if span % m:
                exact[0] = False
            if is_div:
                out.append((key, sign, lower * m, -(-span // m)))
            else:
                out.append((key, coef, lower, m))
            continue
        exact[0] = False
        if is_div:
            out.append((key, sign * max(1, c // d), lower, span))
        else:
            out.append((key, sign, lower, min(span * c, d)))
    low.sort()
    if any(c1 * s1 > c2 for (c1, s1), (c2, _) in zip(low, low[1:])):
        exact[0] = False  # e.g. (h + rh) // 2: a carry can move the quotient; the digits only bound it
    return out


def compose_terms(terms: list, mapping: dict, exact: list) -> list:
    """Terms over keys ``a`` rewritten over the keys of ``mapping[a]`` (the value of ``a`` as terms); keys
    without a mapping are kept. Digits (``lower`` > 1 or a ``span`` shorter than the value's range) are
    taken with ``divmod_terms``."""
    out = []
    for a, coef, lower, span in terms:
        parts = mapping.get(a)
        if parts is None:
            out.append((a, coef, lower, span))
            continue
        if lower > 1:
            parts = divmod_terms(parts, lower, True, exact)
        reach = 1 + sum(abs(c) * (sp - 1) for _, c, _, sp in parts)
        if reach > span:
            parts = divmod_terms(parts, span, False, exact)
        out.extend((b, coef * c, lw, sp) for b, c, lw, sp in parts)
    return out


def reduction_positions(stmt: Stmt) -> set:
    """Loops the statement's written index does not depend on (the reduction loops of a reduction)."""
    written = [a for a in stmt.accesses if a.write]
    if not written:
        return set()
    used = set().union(*(loops_used(a) for a in written))
    return {i for i, lp in enumerate(stmt.loops) if lp.extent > 1 and i not in used}
