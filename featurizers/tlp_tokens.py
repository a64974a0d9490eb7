"""Schedules as token lists: one token per primitive, for MetaSchedule traces and Ansor step lists.

A token is ``(keys, numbers)``: ``keys`` names the primitive from the most to the least specific
vocabulary entry (``("Annotate:meta_schedule.tiling_structure=SSRSRS", "Annotate:meta_schedule.tiling_structure",
"Annotate")``), so an entry missing from a vocabulary falls back to a more general one; ``numbers`` are the
primitive's numeric fields, raw (``tlp.py`` log-scales and pads them). Pure Python, no TVM.

MetaSchedule (dialect ``ms``): a trace is ``[[inst, ...], [[inst_index, decision], ...]]`` with
``inst = [kind, inputs, attrs, outputs]``. Sampling decisions are folded into the primitives that use them:
the outputs of ``SamplePerfectTile`` (the tile factors) replace the variables a ``Split`` takes, the
candidate chosen by ``SampleCategorical`` replaces the variable an ``Annotate`` takes, and the loop index
chosen by ``SampleComputeLocation`` replaces the loop a ``ComputeAt`` takes. Random variables (``b0``,
``l12``, ``v5``) become per-trace ordinals, counted separately for blocks, loops and values in the order
they are defined. The numbers of a token are ``[len(outputs), *inputs, *numeric attrs]`` with nested lists
flattened, ``None`` as -1 and folded decisions in place of their variables. Annotation keys, thread axes and
storage scopes are part of the vocabulary entry, not numbers.

Ansor (dialect ``ansor``): a step list ``[["SP", stage, iter, extent, [lengths], inner_to_outer], ...]``.
Each step kind has a fixed layout (``ANSOR_LAYOUT`` below); ``FSP`` / ``FFSP`` get the split lengths they
follow folded in (the same lengths the ``SP`` they refer to chose), pragmas and annotations become vocabulary
entries (``PR:auto_unroll_max_step``, ``AN:parallel``) with their value as a number, and cache scopes
(``CHR:shared``) are vocabulary entries.
"""

from __future__ import annotations

import math

Token = tuple  # (keys: tuple[str, ...], numbers: list[float])

# --- MetaSchedule traces -----------------------------------------------------------------------------

#: MetaSchedule primitives left out of the token list by default (measured on sampled traces; see
#: ``docs/featurizers.md``): lookups whose result is implied by the other primitives, and the ``Sample*``
#: instructions whose decisions are folded into the primitives that consume them.
DEFAULT_MS_DROP = (
    "GetSBlock",
    "GetLoops",
    "GetChildBlocks",
    "GetConsumers",
    "GetProducers",
    "EnterPostproc",
    "Unannotate",
    "SamplePerfectTile",
    "SamplePartitionedTile",
    "SampleCategorical",
    "SampleComputeLocation",
)

# The attribute that names a primitive's vocabulary entry beside its kind: annotation keys, thread axes,
# storage scopes, tensor intrinsics. Other string attributes (block names) are dropped.
_KEY_ATTR = {
    "Annotate": 0,
    "Unannotate": 0,
    "Bind": 0,
    "CacheRead": 1,
    "CacheWrite": 1,
    "ReindexCacheRead": 1,
    "ReindexCacheWrite": 1,
    "CacheInplace": 1,
    "SetScope": 1,
    "Tensorize": 0,
    "Blockize": None,
}
_RV_TYPES = "blv"  # block, loop, value (expression) random variables


def _is_rv(s: str) -> bool:
    return len(s) > 1 and s[0] in _RV_TYPES and s[1:].isdigit()


def _flatten_into(out: list, x, bound: dict, ordinal: dict) -> None:
    cls = x.__class__
    if cls is int or cls is float:
        out.append(x)
    elif cls is str:
        if x in bound:
            v = bound[x]
            if v.__class__ is list:
                for y in v:
                    _flatten_into(out, y, bound, ordinal)
            else:
                out.append(v)
        elif x in ordinal:
            out.append(ordinal[x])
        elif x == "None":
            out.append(-1)
        elif _is_rv(x):  # used before defined: count it now
            out.append(_define(x, ordinal))
        # other strings (quoted string literals) carry no number
    elif cls is list:
        for y in x:
            _flatten_into(out, y, bound, ordinal)
    elif cls is bool:
        out.append(int(x))
    elif x is None:
        out.append(-1)


def _define(name, ordinal: dict) -> int:
    counts = ordinal.setdefault(None, {})
    t = name[0]
    n = counts.get(t, 0)
    counts[t] = n + 1
    ordinal[name] = n
    return n


def _fold_decision(kind: str, inst: list, decision, bound: dict) -> None:
    outputs = inst[3]
    if kind == "SampleCategorical":
        cands = inst[2][0] if inst[2] else []
        if decision.__class__ is int and 0 <= decision < len(cands) and outputs:
            bound[outputs[0]] = cands[decision]
        elif outputs:
            bound[outputs[0]] = decision
    elif decision.__class__ is list and len(decision) == len(outputs):
        for name, d in zip(outputs, decision):
            bound[name] = d
    elif outputs and decision.__class__ in (int, float):
        bound[outputs[0]] = decision


def ms_tokens(trace, drop=frozenset(DEFAULT_MS_DROP)) -> list[Token]:
    """Tokens of a MetaSchedule trace ``[[insts], decisions]`` (parsed JSON)."""
    insts, decisions = trace[0], (trace[1] if len(trace) > 1 else [])
    dec = {d[0]: d[1] for d in decisions}
    bound: dict = {}
    ordinal: dict = {}
    tokens = []
    for i, inst in enumerate(insts):
        kind, inputs, attrs, outputs = inst[0], inst[1], inst[2], inst[3]
        if kind.__class__ is not str:
            raise ValueError(f"instruction {i}: kind {kind!r} is not a string")
        if i in dec:
            _fold_decision(kind, inst, dec[i], bound)
        if kind not in drop:
            nums = [len(outputs)]
            _flatten_into(nums, inputs, bound, ordinal)
            key = kind
            special = _KEY_ATTR.get(kind, -1)
            for j, a in enumerate(attrs):
                if a.__class__ is str:
                    if j == special:
                        key = f"{kind}:{a}"
                else:
                    _flatten_into(nums, a, {}, {})
            if kind == "Annotate" and len(inputs) > 1 and inputs[1].__class__ is str and inputs[1][:1] == '"':
                keys = (f"{key}={inputs[1].strip(chr(34))}", key, kind)
            elif key is kind:
                keys = (kind,)
            else:
                keys = (key, kind)
            tokens.append((keys, nums))
        for name in outputs:
            if name.__class__ is str and name not in ordinal and name not in bound:
                _define(name, ordinal)
    return tokens


def ms_instruction_kinds(trace) -> list[str]:
    """The kind of every instruction of a trace, with the vocabulary key of keyed kinds (for analysis)."""
    out = []
    for inst in trace[0]:
        k = inst[0]
        j = _KEY_ATTR.get(k, -1)
        if j is not None and j >= 0 and len(inst[2]) > j and inst[2][j].__class__ is str:
            k = f"{k}:{inst[2][j]}"
        out.append(k)
    return out


# --- Ansor / TenSet step lists -----------------------------------------------------------------------

#: auto_scheduler's IteratorAnnotation codes
ANSOR_ANNOTATIONS = ("none", "unroll", "vectorize", "parallel", "vthread", "blockIdx.x", "threadIdx.x",
                     "blockIdx.y", "threadIdx.y", "blockIdx.z", "threadIdx.z", "tensorize")

#: the numbers of each step kind, in order (the vocabulary key is the kind, refined as noted)
ANSOR_LAYOUT = {
    "SP": "stage, iter, extent, inner_to_outer, n_lengths, lengths...",
    "FSP": "stage, iter, src_step, n_split, followed lengths...",
    "FFSP": "stage, iter, n_src_steps, level, factor_or_nparts, followed factor",
    "RE": "stage, n_iters, order...",
    "FU": "stage, n_iters, fused iters...",
    "AN": "stage, iter, annotation code   (key AN:<annotation>)",
    "PR": "stage, iter, pragma value       (key PR:<pragma>)",
    "CA": "stage, target stage, target iter",
    "CI": "stage",
    "CR": "stage",
    "CHR": "stage, n_readers, readers...  (key CHR:<scope>)",
    "CHW": "stage                          (key CHW:<scope>)",
    "RF": "stage, iter, factor iter",
    "SA": "stage, iter, factor, offset",
}


def _num(x) -> float:
    cls = x.__class__
    if cls is int or cls is float:
        return x
    if cls is bool:
        return int(x)
    return 0  # null extents / lengths of symbolic shapes


def _product(values, what: str):
    """The product of some split lengths; ValueError (the record unreadable) when no float holds it (lengths of a
    damaged record: the arrays are float32, and numpy refuses to convert such an integer)."""
    p = math.prod(values)
    try:
        if math.isfinite(p):
            return p
    except OverflowError:  # an integer beyond any float
        pass
    raise ValueError(f"{what}: the product of its followed split lengths is no finite number")


def _split_lengths(steps: list, src: int) -> list:
    if 0 <= src < len(steps):
        s = steps[src]
        if s[0] == "SP" and len(s) > 4 and s[4].__class__ is list:
            return s[4]
    return []


def _nums(seq) -> list:
    if seq.__class__ is not list:
        return []
    return [v if v.__class__ is int else _num(v) for v in seq]


def ansor_tokens(steps) -> list[Token]:
    """Tokens of an Ansor step list (parsed JSON: a list of steps, or ``[[], steps]`` as logged)."""
    if len(steps) == 2 and steps[0] == [] and steps[1].__class__ is list and (
        not steps[1] or steps[1][0].__class__ is list
    ):
        steps = steps[1]
    tokens = []
    for i, step in enumerate(steps):
        kind = step[0]
        if kind.__class__ is not str:
            raise ValueError(f"step {i}: kind {kind!r} is not a string")
        f = step[1:]
        n = len(f)
        keys = (kind,)
        if kind == "SP":
            lengths = _nums(f[3]) if n > 3 else []
            nums = [_num(f[0]), _num(f[1]), _num(f[2]), _num(f[4]) if n > 4 else 0, len(lengths), *lengths]
        elif kind == "FSP":
            # FollowSplitStep: the first n_split - 1 lengths of the followed SP, then the product of the rest
            src, n_split = (int(_num(f[2])), int(_num(f[3]))) if n > 3 else (-1, 0)
            lengths = _nums(_split_lengths(steps, src))
            head = lengths[: max(n_split - 1, 0)]
            last = _product(lengths[len(head):], f"step {i} (FSP)") if lengths else 0
            nums = [_num(f[0]), _num(f[1]), src, n_split, *head, last]
        elif kind == "FFSP":
            # FollowFusedSplitStep: the product of the level-th length of every followed SP
            srcs = f[2] if n > 2 and f[2].__class__ is list else []
            level = int(_num(f[3])) if n > 3 else 0
            picked = []
            for s in srcs:
                lengths = _split_lengths(steps, int(_num(s)))
                picked.append(_num(lengths[level]) if 0 <= level < len(lengths) else 0)
            factor = _product(picked, f"step {i} (FFSP)")
            nums = [_num(f[0]), _num(f[1]), len(srcs), level, _num(f[4]) if n > 4 else 0, factor]
        elif kind in ("RE", "FU"):
            order = _nums(f[1]) if n > 1 else []
            nums = [_num(f[0]), len(order), *order]
        elif kind == "AN":
            code = int(_num(f[2])) if n > 2 else 0
            if 0 <= code < len(ANSOR_ANNOTATIONS):
                keys = (f"AN:{ANSOR_ANNOTATIONS[code]}", kind)
            nums = [_num(f[0]), _num(f[1]), code]
        elif kind == "PR":
            pragma = f[2] if n > 2 and f[2].__class__ is str else ""
            name, _, value = pragma.partition("$")
            try:
                v = float(value) if value else 0
            except ValueError:
                v = 0
            if not math.isfinite(v):  # "$inf", "$nan", "$1e400": a number no feature can hold
                v = 0
            keys = (f"PR:{name}", kind) if name else keys
            nums = [_num(f[0]), _num(f[1]), v]
        elif kind == "CHR":
            if n > 1 and f[1].__class__ is str:
                keys = (f"CHR:{f[1]}", kind)
            readers = _nums(f[2]) if n > 2 else []
            nums = [_num(f[0]), len(readers), *readers]
        elif kind == "CHW":
            if n > 1 and f[1].__class__ is str:
                keys = (f"CHW:{f[1]}", kind)
            nums = [_num(f[0])]
        else:  # CA, CI, CR, RF, SA and kinds this costlab does not know: the fields in order
            nums = []
            for v in f:
                if v.__class__ is list:
                    nums.append(len(v))
                    nums.extend(_nums(v))
                elif v.__class__ is not str:
                    nums.append(_num(v))
        tokens.append((keys, nums))
    return tokens
