"""Simulate a MetaSchedule trace on a per-task analysis of its workload, giving the scheduled ``Program``
without TVM: no replay, no lowering, no TIR walk per candidate.

The workload is analysed once per task (``TaskModel``: its blocks, iterators, affine accesses and FLOPs,
from ``tir_nest``) and cached. A trace is then run instruction by instruction on a light model of the loop
tree: loops carry extents and kinds; each block iterator is a sum of *atoms* ``coef * ((x // lower) % span)``
over loop variables ``x``, so splits, fuses and reorders stay exact, and ``compute_at`` / cache stages /
inlining rebuild the moved block's loops from the region its consumer (or producer) touches. The result
matches walking the replayed schedule's TIR (tests compare the two) at a fraction of the cost.

Instructions outside the modelled set (rfactor, tensorize, layout transforms other than weight-layout
rewriting, ...) raise ``Unsupported``; callers fall back to replaying the trace in TVM.
"""

from __future__ import annotations

import json
from dataclasses import replace

from costlab.featurizers.psa.loopnest import SERIAL, Access, Loop, Program, Stmt, compose_terms, divmod_terms
from costlab.featurizers.psa.tir_nest import AxisAccess, walk_blocks


class Unsupported(Exception):
    """The trace uses something the simulator does not model."""


class _Loop:
    """A loop; ``red`` says whether it iterates a reduction iterator (None: mixed or unknown)."""

    __slots__ = ("extent", "kind", "unroll", "children", "parent", "red")

    def __init__(self, extent, kind=SERIAL, unroll=0, red=False):
        self.extent = int(extent)
        self.kind = kind
        self.unroll = unroll
        self.children = []
        self.parent = None
        self.red = red


class _Root:
    __slots__ = ("children", "parent")

    def __init__(self):
        self.children = []
        self.parent = None


class _Block:
    """A block: iterators (extent, is_reduce), accesses over iterators, and per iterator its atoms
    ``[loop, coef, lower, span]``."""

    __slots__ = ("name", "axes", "accesses", "flops", "init", "atoms", "parent", "has_init", "loads")

    def __init__(self, name, axes, accesses, flops, init=False, has_init=False, loads=None):
        self.name = name
        # buffer -> how many times the block's stored value loads it (an inlined producer's FLOPs count per use)
        self.loads = dict(loads or {})
        self.axes = axes
        self.accesses = accesses  # [AxisAccess], copied per simulation: cache stages and layouts edit them
        self.flops = flops
        self.init = init
        self.has_init = has_init
        self.atoms = [[] for _ in axes]
        self.parent = None


class TaskModel:
    """The per-task analysis a trace is simulated on: the workload's blocks, each under its own loops."""

    def __init__(self, mod, gpu: bool = False):
        self.gpu = gpu
        self.blocks = []
        for rec in walk_blocks(mod):
            n = len(rec.loops)
            trivial = len(rec.axes) == n and all(
                b == [(i, 1, 1, rec.loops[i].extent)] or (rec.loops[i].extent == 1 and not b)
                for i, b in enumerate(rec.binding))
            if not trivial:
                raise Unsupported(f"workload block {rec.name} is not one loop per iterator")
            accesses = list(rec.accesses)
            # a reduction block's init statement: written by TVM once the block is decomposed
            has_init = any(red for _, red in rec.axes) and rec.store_value is not None
            self.blocks.append((rec.name, list(rec.axes), accesses, rec.flops, [lp.kind for lp in rec.loops],
                                has_init, _load_counts(rec.store_value)))

    def fresh(self):
        root = _Root()
        blocks = []
        for name, axes, accesses, flops, kinds, has_init, loads in self.blocks:
            b = _Block(name, axes, [replace(a) for a in accesses], flops, has_init=has_init, loads=loads)
            parent = root
            for i, (ext, red) in enumerate(axes):
                lp = _Loop(ext, kinds[i] if i < len(kinds) else SERIAL, red=red)
                _attach(parent, lp)
                b.atoms[i].append([lp, 1, 1, ext])
                parent = lp
            _attach(parent, b)
            blocks.append(b)
        return root, blocks


def _attach(parent, node, index=None):
    node.parent = parent
    if index is None:
        parent.children.append(node)
    else:
        parent.children.insert(index, node)


def _detach(node):
    node.parent.children.remove(node)
    node.parent = None


def _path(node):
    """Loops around a node, outermost first."""
    out = []
    p = node.parent
    while p is not None and isinstance(p, _Loop):
        out.append(p)
        p = p.parent
    out.reverse()
    return out


def _blocks_under(node):
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, _Block):
            out.append(n)
        else:
            stack.extend(reversed(n.children))
    return out


def _order(root):
    out = []

    def visit(n):
        for c in n.children:
            if isinstance(c, _Block):
                out.append(c)
            else:
                visit(c)

    visit(root)
    return out


def _load_counts(value) -> dict:
    """Buffer name -> how many times an expression loads it, anywhere in it (a condition too, where
    ``tir_nest.count_flops`` counts no FLOPs: a producer inlined into a comparison counts more here than there)."""
    counts: dict = {}
    stack = [value] if value is not None else []
    while stack:
        e = stack.pop()
        if type(e).__name__ in ("TensorLoad", "BufferLoad"):
            buf = e.source if hasattr(e, "source") else getattr(e, "buffer", None)
            name = str(getattr(buf, "name", ""))
            counts[name] = counts.get(name, 0) + 1
            continue
        for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
            sub = getattr(e, attr, None)
            if sub is not None and not isinstance(sub, (int, float, str)):
                stack.append(sub)
        stack.extend(getattr(e, "args", ()) or ())
    return counts


def _decompose(atoms, weights, extents, new_loops, exact):
    """Re-express atoms on one loop over new loops of the given radix weights (mixed-radix digits)."""
    out = []
    for coef, lower, span in atoms:
        hi_atom = lower * span
        for lp, w, f in zip(new_loops, weights, extents):
            lo = max(lower, w)
            hi = min(hi_atom, w * f)
            if lo >= hi:
                continue
            if lo % lower or lo % w:
                exact[0] = False
            sub_span = -(-hi // lo)
            if sub_span > 1:
                out.append([lp, coef * (lo // lower), lo // w if lo % w == 0 else 1, max(1, sub_span)])
    return out


class Simulator:
    def __init__(self, task: TaskModel):
        self.task = task
        self.root, self.blocks = task.fresh()
        self.rv: dict = {}
        self.exact = [True]

    # -- helpers -----------------------------------------------------------------------------------------
    def _val(self, x):
        if isinstance(x, str):
            if x == "None":
                return None
            if len(x) > 1 and x[0] in "blv" and x[1:].isdigit():
                if x not in self.rv:
                    raise Unsupported(f"unknown random variable {x}")
                return self.rv[x]
            if x.startswith('"'):
                return json.loads(x)
            return x
        if isinstance(x, list):
            return [self._val(v) for v in x]
        return x

    def _writes(self, b):
        return {a.buffer for a in b.accesses if a.write}

    def _reads(self, b):
        return {a.buffer for a in b.accesses if not a.write}

    def _consumers(self, b):
        out = self._writes(b)
        return [c for c in _order(self.root) if c is not b and self._reads(c) & out]

    def _producers(self, b):
        ins = self._reads(b)
        return [p for p in _order(self.root) if p is not b and self._writes(p) & ins]

    # -- loop transformations ------------------------------------------------------------------------------
    def split(self, loop, factors):
        ext = loop.extent
        known = 1
        for f in factors:
            if f is not None:
                known *= max(1, int(f))
        factors = [(-(-ext // known) if f is None else max(1, int(f))) for f in factors]
        prod = 1
        for f in factors:
            prod *= f
        if prod != ext:
            self.exact[0] = False
        new = [_Loop(f, SERIAL, red=loop.red) for f in factors]
        parent = loop.parent
        idx = parent.children.index(loop)
        parent.children[idx] = new[0]
        new[0].parent = parent
        for a, b in zip(new, new[1:]):
            a.children = [b]
            b.parent = a
        new[-1].children = loop.children
        for c in loop.children:
            c.parent = new[-1]
        weights = []
        w = 1
        for f in reversed(factors):
            weights.append(w)
            w *= f
        weights.reverse()
        exact = self.exact
        for b in _blocks_under(new[0]):
            for axis_atoms in b.atoms:
                out = []
                for at in axis_atoms:
                    if at[0] is loop:
                        out.extend(_decompose([(at[1], at[2], at[3])], weights, factors, new, exact))
                    else:
                        out.append(at)
                axis_atoms[:] = out
        return new

    def fuse(self, loops):
        if len(loops) == 1:
            return loops[0]
        ext = 1
        for lp in loops:
            ext *= lp.extent
        reds = {lp.red for lp in loops}
        f = _Loop(ext, SERIAL, red=reds.pop() if len(reds) == 1 else None)
        first, last = loops[0], loops[-1]
        parent = first.parent
        idx = parent.children.index(first)
        parent.children[idx] = f
        f.parent = parent
        f.children = last.children
        for c in last.children:
            c.parent = f
        weight = {}
        w = 1
        for lp in reversed(loops):
            weight[id(lp)] = w
            w *= lp.extent
        for b in _blocks_under(f):
            for axis_atoms in b.atoms:
                for at in axis_atoms:
                    if id(at[0]) in weight:
                        at[2] = at[2] * weight[id(at[0])]
                        at[0] = f
        return f

    def reorder(self, loops):
        wanted = set(map(id, loops))
        inner = max(loops, key=lambda lp: len(_path(lp)))
        path = _path(inner) + [inner]
        start = next(i for i, lp in enumerate(path) if id(lp) in wanted)
        seq = path[start:]
        if any(len(lp.children) != 1 for lp in seq[:-1]):
            raise Unsupported("reorder of loops that are not a single chain")
        it = iter(loops)
        new_seq = [next(it) if id(lp) in wanted else lp for lp in seq]
        parent = seq[0].parent
        body = seq[-1].children
        idx = parent.children.index(seq[0])
        parent.children[idx] = new_seq[0]
        new_seq[0].parent = parent
        for a, b in zip(new_seq, new_seq[1:]):
            a.children = [b]
            b.parent = a
        new_seq[-1].children = body
        for c in body:
            c.parent = new_seq[-1]

    # -- block transformations -----------------------------------------------------------------------------
    def _remove_block(self, b):
        node = b
        while node.parent is not None and not isinstance(node.parent, _Root) and len(node.parent.children) == 1:
            node = node.parent
        _detach(node)
        self.blocks.remove(b)

    def _block_atoms_terms(self, b, dims):
        """An access of block ``b`` (dims over its iterators) as per-dimension atoms ``[loop, coef, lower, span]``
        (``loop`` None for a range one instance accesses)."""
        mapping = {i: [(lp, c, lw, sp) for lp, c, lw, sp in atoms] for i, atoms in enumerate(b.atoms)}
        out = []
        for terms in dims:
            d = [[None, coef, 1, span] for axis, coef, lower, span in terms if axis < 0]
            d.extend([lp, c, lw, sp] for lp, c, lw, sp in
                     compose_terms([t for t in terms if t[0] >= 0], mapping, self.exact))
            out.append(d)
        return out

    def _move_under(self, b, loop, region_dims, shape, before_consumers, scope="global", preserve_unit=True):
        """Put block ``b`` (whose iterators index ``shape`` one to one) under ``loop``: new loops cover the
        region ``region_dims`` (atoms per dimension) takes below ``loop``. As in TVM, loops bound to threads
        that share the buffer's storage scope (threadIdx / vthread for shared memory, every thread loop for
        global memory) are covered too."""
        rank = _STORAGE_RANK.get(scope.split(".")[0], 0)
        outer = set()
        for lp in _path(loop) + [loop]:
            if not (lp.kind != SERIAL and "." in lp.kind and _thread_rank(lp.kind) >= rank):
                outer.add(id(lp))
        self._remove_block(b)
        new_atoms, new_loops = [], []
        for d, atoms in enumerate(region_dims):
            width = 1
            keep = []
            for lp, coef, lower, span in atoms:
                if lp is not None and id(lp) in outer:
                    keep.append([lp, coef, lower, span])
                else:
                    width += abs(coef) * (span - 1)
            if d < len(shape) and shape[d] > 0:
                width = min(width, shape[d])
            if width > 1 or preserve_unit:
                lp = _Loop(width, red=b.axes[d][1] if d < len(b.axes) else False)
                new_loops.append(lp)
                keep.append([lp, 1, 1, width])
            new_atoms.append(keep)
        b.atoms = new_atoms
        parent = loop
        for lp in new_loops:
            _attach(parent, lp, self._insert_index(parent, b, before_consumers) if parent is loop else None)
            parent = lp
        _attach(parent, b)
        self.blocks.append(b)

    def _insert_index(self, loop, b, before_consumers):
        if not before_consumers:
            return None
        outs = self._writes(b)
        for i, child in enumerate(loop.children):
            if any(self._reads(c) & outs for c in _blocks_under(child)):
                return i
        return None

    def compute_at(self, b, loop, reverse, preserve_unit=True):
        if loop == "root":
            return
        if loop == "inline":
            return self.compute_inline(b) if not reverse else self.reverse_compute_inline(b)
        under = [c for c in _blocks_under(loop) if c is not b]
        if reverse:
            buffers = self._reads(b)
            peers = [c for c in under if self._writes(c) & buffers]
            own = [a for a in b.accesses if not a.write and a.buffer in buffers]
            peer_acc = [(c, a) for c in peers for a in c.accesses if a.write and a.buffer in buffers]
        else:
            buffers = self._writes(b)
            peers = [c for c in under if self._reads(c) & buffers]
            own = [a for a in b.accesses if a.write and a.buffer in buffers]
            peer_acc = [(c, a) for c in peers for a in c.accesses if not a.write and a.buffer in buffers]
        # the moved block's access of a buffer the blocks under the loop share with it (it may read or write
        # others that flow nowhere under the loop)
        own = [a for a in own if any(acc.buffer == a.buffer for _, acc in peer_acc)]
        if not own:
            raise Unsupported(f"compute-at of {b.name}: no data flow to the blocks under the loop")
        own = own[0]
        # the moved block must index the connecting buffer one iterator per dimension
        axis_of_dim = []
        for terms in own.dims:
            if len(terms) != 1 or terms[0][1] != 1 or terms[0][2] != 1 or terms[0][0] < 0:
                raise Unsupported(f"compute-at of {b.name}: its index of {own.buffer} is not one iterator per dim")
            axis_of_dim.append(terms[0][0])
        if len(set(axis_of_dim)) != len(axis_of_dim):
            raise Unsupported(f"compute-at of {b.name}: iterators do not map one to one on {own.buffer}")
        # iterators the buffer does not index (a reduction's) get loops over their whole range
        region = None
        for c, acc in peer_acc:
            if acc.buffer != own.buffer:
                continue
            dims = self._block_atoms_terms(c, acc.dims)
            if region is None:
                region = dims
            else:  # several accesses: widen each dimension to cover all of them
                region = [r if _width(r) >= _width(d2) else d2 for r, d2 in zip(region, dims)]
        by_axis = [[[None, 1, 1, ext]] for ext, _ in b.axes]
        for d, axis in enumerate(axis_of_dim):
            by_axis[axis] = region[d]
        shape = [ext for ext, _ in b.axes]
        for d, axis in enumerate(axis_of_dim):
            shape[axis] = own.shape[d] if d < len(own.shape) else 0
        self._move_under(b, loop, by_axis, shape, before_consumers=not reverse, scope=own.scope,
                         preserve_unit=preserve_unit)

    def cache_read(self, b, consumers, index, scope):
        reads = [a for a in b.accesses if not a.write]
        seen, ordered = set(), []
        for a in reads:  # block.reads order: distinct buffers in access order
            if a.buffer not in seen:
                seen.add(a.buffer)
                ordered.append(a)
        if index >= len(ordered):
            raise Unsupported("cache_read index out of range")
        src = ordered[index]
        name, old_scope, nbytes, shape = src.buffer, src.scope, src.nbytes, src.shape
        new_name = f"{name}_{scope}"
        targets = consumers or [c for c in self.blocks if name in self._reads(c)]
        for c in targets:
            for a in c.accesses:
                if a.buffer == name and not a.write:
                    a.buffer, a.scope = new_name, scope
            if name in c.loads:
                c.loads[new_name] = c.loads.pop(name)
        nd = len(shape)
        ident = [[(i, 1, 1, shape[i])] for i in range(nd)]
        blk = _Block(new_name, [(int(s), False) for s in shape],
                     [AxisAccess(new_name, scope, nbytes, True, shape, ident),
                      AxisAccess(name, old_scope, nbytes, False, shape, ident)], 0.0, loads={name: 1})
        self._place_root(blk, before=b)
        return blk

    def cache_write(self, b, index, scope):
        writes = [a for a in b.accesses if a.write]
        if index >= len(writes):
            raise Unsupported("cache_write index out of range")
        dst = writes[index]
        name, nbytes, shape, old_scope = dst.buffer, dst.nbytes, dst.shape, dst.scope
        new_name = f"{name}_{scope}"
        for a in b.accesses:
            if a.buffer == name:
                a.buffer, a.scope = new_name, scope
        if name in b.loads:
            b.loads[new_name] = b.loads.pop(name)
        nd = len(shape)
        ident = [[(i, 1, 1, shape[i])] for i in range(nd)]
        blk = _Block(new_name, [(int(s), False) for s in shape],
                     [AxisAccess(name, old_scope, nbytes, True, shape, ident),
                      AxisAccess(new_name, scope, nbytes, False, shape, ident)],
                     0.0, loads={new_name: 1})
        self._place_root(blk, after=b)
        return blk

    def _root_index(self, anchor, after: bool) -> int:
        """Position among the root's children just before (or after) the nest holding ``anchor``."""
        node = anchor
        while not isinstance(node.parent, _Root):
            node = node.parent
        return self.root.children.index(node) + (1 if after else 0)

    def _nest_at_root(self, blk, idx: int, order) -> None:
        """A new nest at root position ``idx``: one loop per axis of ``blk`` (outermost first, in ``order``),
        each axis bound to its loop, ``blk`` innermost."""
        parent, first = self.root, True
        for i in order:
            ext, red = blk.axes[i]
            lp = _Loop(ext, red=red)
            _attach(parent, lp, idx if first else None)
            first = False
            blk.atoms[i] = [[lp, 1, 1, ext]]
            parent = lp
        _attach(parent, blk, idx if first else None)

    def _place_root(self, blk, before=None, after=None):
        self._nest_at_root(blk, self._root_index(before or after, after is not None), range(len(blk.axes)))
        self.blocks.append(blk)

    def compute_inline(self, b):
        writes = [a for a in b.accesses if a.write]
        if len(writes) != 1:
            raise Unsupported(f"compute_inline of {b.name}: not one write")
        out = writes[0]
        dim_axis = _identity_axes(out, len(b.axes))
        reads = [a for a in b.accesses if not a.write]
        for c in self._consumers(b):
            new_acc = []
            for a in c.accesses:
                if a.buffer != out.buffer or a.write:
                    new_acc.append(a)
                    continue
                axis_terms = {dim_axis[d]: terms for d, terms in enumerate(a.dims)}
                for r in reads:
                    new_acc.append(replace(r, write=False, dims=self._substitute(r.dims, axis_terms)))
            c.accesses = new_acc
            # TVM substitutes the producer's expression at every load of its buffer
            uses = c.loads.pop(out.buffer, 1)
            c.flops += b.flops * uses
            for buf, n in b.loads.items():
                c.loads[buf] = c.loads.get(buf, 0) + n * uses
        self._remove_block(b)

    def reverse_compute_inline(self, b):
        reads = [a for a in b.accesses if not a.write]
        producers = self._producers(b)
        if len(producers) != 1:
            raise Unsupported(f"reverse_compute_inline of {b.name}: not one producer")
        p = producers[0]
        link = next(a for a in reads if a.buffer in self._writes(p))
        dim_axis = _identity_axes(link, len(b.axes))
        p_write = next(a for a in p.accesses if a.write and a.buffer == link.buffer)
        axis_terms = {dim_axis[d]: terms for d, terms in enumerate(p_write.dims)}
        new_acc = [a for a in p.accesses if not (a.buffer == link.buffer)]
        for a in b.accesses:
            if a is link or (a.buffer == link.buffer):
                continue
            new_acc.append(replace(a, dims=self._substitute(a.dims, axis_terms)))
        p.accesses = new_acc
        # the consumer's expression, with the producer's value at every load of the producer's buffer
        uses = b.loads.get(link.buffer, 1)
        loads = {buf: n for buf, n in b.loads.items() if buf != link.buffer}
        for buf, n in p.loads.items():
            loads[buf] = loads.get(buf, 0) + n * uses
        p.flops = b.flops + p.flops * uses
        p.loads = loads
        self._remove_block(b)

    def decompose_reduction(self, b, loop):
        if isinstance(b.parent, _Root):
            raise Unsupported("decompose_reduction without loops")
        path = _path(b)
        if loop not in path:
            raise Unsupported("decompose_reduction at a loop not around the block")
        inner = path[path.index(loop):]
        reduce_axes = {i for i, (_, red) in enumerate(b.axes) if red}
        spatial_loops = {id(at[0]) for i, atoms in enumerate(b.atoms) if i not in reduce_axes for at in atoms}
        reduce_loops = {id(at[0]) for i in reduce_axes for at in b.atoms[i]} - spatial_loops
        copies = {}
        init = _Block(b.name + "_init", [ax for ax in b.axes], [], 0.0, init=True)
        parent = loop.parent
        idx = parent.children.index(loop)
        first = True
        for lp in inner:
            if id(lp) in reduce_loops or (lp.red and id(lp) not in spatial_loops):
                continue
            cp = _Loop(lp.extent, lp.kind, lp.unroll)
            copies[id(lp)] = cp
            _attach(parent, cp, idx if first else None)
            first = False
            parent = cp
        _attach(parent, init, idx if first else None)
        inner_ids = set(map(id, inner))
        for i, atoms in enumerate(b.atoms):
            if i in reduce_axes:
                init.atoms[i] = []
                continue
            init.atoms[i] = [[copies[id(at[0])], at[1], at[2], at[3]] if id(at[0]) in inner_ids else list(at)
                             for at in atoms if id(at[0]) not in inner_ids or id(at[0]) in copies]
        writes = [a for a in b.accesses if a.write]
        for a in writes:
            init.accesses.append(replace(a, write=True))
        # the update statement now reads what it accumulates into, first among its reads (as in TVM)
        b.accesses = writes + [replace(a, write=False) for a in writes] + \
            [a for a in b.accesses if not a.write]
        b.name = b.name + "_update"
        b.has_init = False
        self.blocks.append(init)
        return init

    def _substitute(self, dims, axis_terms):
        """Dims over an inlined block's iterators, rewritten over the other block's iterators (iterators not
        determined by the other block's index become a range of one instance)."""
        out = []
        for terms in dims:
            d = [t for t in terms if t[0] < 0]
            for axis, coef, lower, span in terms:
                if axis >= 0 and axis not in axis_terms:
                    d.append((-1, 1, 1, span))
            d.extend(compose_terms([t for t in terms if t[0] >= 0 and t[0] in axis_terms], axis_terms, self.exact))
            out.append(d)
        return out

    def rfactor(self, loop, factor_axis):
        """``rfactor(loop, factor_axis)``: the reduction block under ``loop`` keeps the loop nest but writes
        partial results into a new buffer with one more dimension (the loop's iteration, at ``factor_axis``);
        the original block becomes a reduction of those partial results, under new loops after the nest.

        As in TVM, the partial-result block's iterators are [the factored loop (spatial), the original
        spatial iterators, one reduction iterator per other reduction loop]; the reduction's are
        [the factored one (reduction), the spatial ones]."""
        blocks = [b for b in _blocks_under(loop) if any(red for _, red in b.axes)]
        if len(blocks) != 1:
            raise Unsupported("rfactor: not one reduction block under the loop")
        b = blocks[0]
        writes = [a for a in b.accesses if a.write]
        if len(writes) != 1:
            raise Unsupported("rfactor: the reduction writes more than one buffer")
        out = writes[0]
        name, scope, nbytes, shape, dims = out.buffer, out.scope, out.nbytes, tuple(out.shape), out.dims
        ext = loop.extent
        k = max(0, min(int(factor_axis), len(shape)))
        rf_name = f"{name}.rf"  # TVM's name for the partial-results buffer
        spatial = [i for i, (_, red) in enumerate(b.axes) if not red]
        reduce_ = [i for i, (_, red) in enumerate(b.axes) if red]
        # iterators of the partial-result block
        axes, atoms, mapping = [(ext, False)], [[[loop, 1, 1, ext]]], {}
        for i in spatial:
            mapping[i] = [(len(axes), 1, 1, b.axes[i][0])]
            axes.append(b.axes[i])
            atoms.append([list(at) for at in b.atoms[i]])
        loop_axis = {id(loop): 0}
        red_loops = {id(at[0]) for i in reduce_ for at in b.atoms[i]}
        spatial_loops = {id(at[0]) for i in spatial for at in b.atoms[i]}
        for lp in _path(b):
            if lp is not loop and (id(lp) in red_loops or (lp.red and id(lp) not in spatial_loops)):
                loop_axis[id(lp)] = len(axes)
                axes.append((lp.extent, True))
                atoms.append([[lp, 1, 1, lp.extent]])
        for i in reduce_:
            mapping[i] = [(loop_axis[id(at[0])], at[1], at[2], at[3]) for at in b.atoms[i]]
        rf = _Block(b.name + "_rf", axes, [], b.flops, has_init=b.has_init, loads=b.loads)
        rf.atoms = atoms

        def remap(dims_):
            return [[t for t in terms if t[0] < 0] + compose_terms([t for t in terms if t[0] >= 0], mapping, self.exact)
                    for terms in dims_]

        rf_shape = shape[:k] + (ext,) + shape[k:]
        out_dims = remap(dims)
        rf_dims = out_dims[:k] + [[(0, 1, 1, ext)]] + out_dims[k:]
        rf.accesses = [AxisAccess(rf_name, "global", nbytes, True, rf_shape, rf_dims)]
        rf.accesses += [replace(a, write=False, dims=remap(a.dims))
                        for a in b.accesses if not a.write and a.buffer != name]
        if any(not a.write and a.buffer == name for a in b.accesses):
            rf.accesses.append(AxisAccess(rf_name, "global", nbytes, False, rf_shape, rf_dims))
        loop.red = False
        # the partial-result block takes the original block's place under the loops
        parent = b.parent
        parent.children[parent.children.index(b)] = rf
        rf.parent = parent
        b.parent = None
        # the original block reduces the partial results: iterators [factored (reduction), spatial...], under
        # new loops [spatial..., factored] right after the nest
        new_index = {old: 1 + j for j, old in enumerate(spatial)}
        new_dims = [[(new_index[a], c, lw, sp) if a >= 0 else (a, c, lw, sp) for a, c, lw, sp in terms
                     if a < 0 or a in new_index] for terms in dims]
        b.axes = [(ext, True)] + [b.axes[i] for i in spatial]
        b.atoms = [[] for _ in b.axes]
        b.accesses = [AxisAccess(name, scope, nbytes, True, shape, new_dims),
                      AxisAccess(rf_name, "global", nbytes, False, rf_shape,
                           new_dims[:k] + [[(0, 1, 1, ext)]] + new_dims[k:])]
        b.flops = 1.0
        b.has_init = True
        self._nest_at_root(b, self._root_index(rf, after=True), list(range(1, len(b.axes))) + [0])
        self.blocks.append(rf)
        return rf

    def transform_layout(self, b, index, is_read, index_map):
        """``transform_layout``: the buffer's layout changes everywhere, each access's index becomes the
        index map applied to the old one (MetaSchedule's RewriteLayout uses it for weights)."""
        accs = [a for a in b.accesses if (not a.write) == is_read]
        names = []
        for a in accs:
            if a.buffer not in names:
                names.append(a.buffer)
        if index >= len(names):
            raise Unsupported("transform_layout index out of range")
        name = names[index]
        old_shape = next(a.shape for a in accs if a.buffer == name)
        final, new_shape = _index_map(index_map, old_shape, self.exact)
        for blk in self.blocks:
            for a in blk.accesses:
                if a.buffer != name:
                    continue
                old = {i: terms for i, terms in enumerate(a.dims)}
                dims = []
                for terms in final:
                    d = compose_terms(terms, old, self.exact)
                    dims.append([t for t in d if t[0] < 0 or isinstance(t[0], int)])
                a.shape, a.dims = new_shape, dims

    # -- running a trace -----------------------------------------------------------------------------------
    def run(self, trace):
        insts, decisions = trace[0], trace[1]
        dec = {int(i): d for i, d in decisions}
        rv = self.rv
        for i, inst in enumerate(insts):
            kind, inputs, attrs, outputs = inst[0], inst[1], inst[2], inst[3]
            handler = _HANDLERS.get(kind)
            if handler is None:
                raise Unsupported(f"instruction {kind}")
            result = handler(self, [self._val(x) for x in inputs], attrs, dec.get(i))
            if outputs:
                if len(outputs) == 1 and not isinstance(result, list):
                    rv[outputs[0]] = result
                else:
                    if result is None or len(result) != len(outputs):
                        raise Unsupported(f"instruction {kind}: {len(outputs)} outputs expected")
                    for name, value in zip(outputs, result):
                        rv[name] = value
        return self

    def release(self) -> None:
        """Break the loop tree's parent links so that it is freed at once (not by the cycle collector)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            node.parent = None
            children = getattr(node, "children", None)
            if children:
                stack.extend(children)
                node.children = []
        for b in self.blocks:
            b.atoms = []
        self.rv.clear()

    def program(self) -> Program:
        stmts = []
        loops: dict = {}  # one Loop per simulated loop, shared by the statements under it
        for b in _order(self.root):
            path = _path(b)
            pos = {id(lp): i for i, lp in enumerate(path)}
            n = len(path)
            out_loops = []
            for lp in path:
                o = loops.get(id(lp))
                if o is None:
                    o = loops[id(lp)] = Loop(lp.extent, lp.kind, lp.unroll)
                out_loops.append(o)
            accesses = []
            for a in b.accesses:
                dims = []
                for atoms in self._block_atoms_terms(b, a.dims):
                    dims.append([(n if lp is None else pos.get(id(lp), n), coef, span) for lp, coef, lower, span in atoms])
                accesses.append(Access(a.buffer, a.scope, a.nbytes, a.write, a.shape, dims))
            stmts.append(Stmt(b.name, out_loops, b.flops, accesses, b.init))
        return Program(stmts, gpu=self.task.gpu, exact=self.exact[0])


_STORAGE_RANK = {"global": 0, "shared": 1, "warp": 2, "local": 3}


def _thread_rank(tag: str) -> int:
    return 0 if tag.startswith("blockIdx") else 1


def _width(dims):
    return sum(abs(c) * (s - 1) for _, c, _, s in dims)


def _identity_axes(acc, n_axes):
    out = []
    for terms in acc.dims:
        if len(terms) != 1 or terms[0][1] != 1 or terms[0][2] != 1 or terms[0][0] < 0:
            raise Unsupported(f"inline: index of {acc.buffer} is not one iterator per dimension")
        out.append(terms[0][0])
    return out


# -- instruction handlers: (sim, inputs, attrs, decision) -> result ------------------------------------------

def _get_block(sim, inp, attrs, dec):
    name = attrs[0]
    if name == "root":
        return sim.root
    for b in sim.blocks:
        if b.name == name:
            return b
    raise Unsupported(f"no block named {name}")


def _get_loops(sim, inp, attrs, dec):
    b = inp[0]
    if not isinstance(b, _Block):
        raise Unsupported("get_loops of a non-block")
    return _path(b)


def _child_blocks(sim, inp, attrs, dec):
    node = inp[0]
    if isinstance(node, _Root):
        return _order(sim.root)
    if isinstance(node, _Loop):
        return _blocks_under(node)
    return []


def _sample_tile(sim, inp, attrs, dec):
    if dec is None:
        raise Unsupported("sample_perfect_tile without a decision")
    return [int(x) for x in dec]


def _sample_cat(sim, inp, attrs, dec):
    if dec is None:
        raise Unsupported("sample_categorical without a decision")
    return attrs[0][int(dec)]


def _sample_loc(sim, inp, attrs, dec):
    if dec is None:
        raise Unsupported("sample_compute_location without a decision")
    d = int(dec)
    if d == -1:
        return "root"
    if d == -2:
        return "inline"
    consumers = sim._consumers(inp[0])
    if not consumers:
        return "root"
    path = _path(consumers[0])
    if d >= len(path):
        raise Unsupported("compute location out of range")
    return path[d]


def _split(sim, inp, attrs, dec):
    return sim.split(inp[0], inp[1:])


def _annotate(sim, inp, attrs, dec):
    target, value = inp[0], inp[1]
    if isinstance(target, _Loop) and attrs[0] == "pragma_auto_unroll_max_step":
        target.unroll = int(value)


def _unannotate(sim, inp, attrs, dec):
    if isinstance(inp[0], _Loop) and attrs[0] == "pragma_auto_unroll_max_step":
        inp[0].unroll = 0


def _kind(kind):
    def handler(sim, inp, attrs, dec):
        inp[0].kind = kind
    return handler


def _bind(sim, inp, attrs, dec):
    inp[0].kind = attrs[0]


def _compute_at(reverse):
    def handler(sim, inp, attrs, dec):
        sim.compute_at(inp[0], inp[1], reverse, bool(attrs[0]) if attrs else True)
    return handler


def _cache_read(sim, inp, attrs, dec):
    return sim.cache_read(inp[0], [c for c in (inp[1] or []) if isinstance(c, _Block)], int(attrs[0]), attrs[1])


def _cache_write(sim, inp, attrs, dec):
    return sim.cache_write(inp[0], int(attrs[0]), attrs[1])


def _consumers(sim, inp, attrs, dec):
    return sim._consumers(inp[0])


def _producers(sim, inp, attrs, dec):
    return sim._producers(inp[0])


def _transform_layout(sim, inp, attrs, dec):
    # inputs: block, index map (TVM JSON text); attrs: buffer_index, buffer_index_type (0 read / 1 write), ...
    return sim.transform_layout(inp[0], int(attrs[0]), int(attrs[1]) == 0, inp[1])


def _index_map(text, old_shape, exact):
    """An index map in TVM's JSON node-graph form as per-output-dimension terms over the input dimensions
    (keys 0..n-1), and the shape it maps ``old_shape`` to."""
    try:
        graph = json.loads(text) if isinstance(text, str) else None
        nodes = graph["nodes"]
        root = nodes[graph["root_index"]]
        if root.get("type") != "tirx.IndexMap":
            raise KeyError("type")
        inputs = nodes[root["data"]["initial_indices"]]["data"]
        outputs = nodes[root["data"]["final_indices"]]["data"]
    except (ValueError, KeyError, TypeError, IndexError):
        raise Unsupported("transform_layout: index map not understood") from None
    key_of = {ref: i for i, ref in enumerate(inputs)}
    spans = {i: int(old_shape[i]) if i < len(old_shape) else 1 for i in range(len(inputs))}

    def form(ref):
        node = nodes[ref]
        kind, data = node.get("type"), node.get("data")
        if ref in key_of:
            i = key_of[ref]
            return [(i, 1, 1, spans[i])], 0
        if kind == "ir.IntImm":  # fields refer to other nodes; the value is an "int" node
            return form(data["value"])
        if kind == "int":
            return [], int(data)
        if kind in ("prim.Add", "prim.Sub"):
            fa, ca = form(data["a"])
            fb, cb = form(data["b"])
            if kind == "prim.Sub":
                fb, cb = [(k, -c, lw, sp) for k, c, lw, sp in fb], -cb
            return fa + fb, ca + cb
        if kind == "prim.Mul":
            fa, ca = form(data["a"])
            fb, cb = form(data["b"])
            if not fb:
                return [(k, c * cb, lw, sp) for k, c, lw, sp in fa], ca * cb
            if not fa:
                return [(k, c * ca, lw, sp) for k, c, lw, sp in fb], ca * cb
        if kind in ("prim.FloorDiv", "prim.FloorMod"):
            fa, ca = form(data["a"])
            fb, d = form(data["b"])
            if not fb and d > 0:
                is_div = kind == "prim.FloorDiv"
                return divmod_terms(fa, d, is_div, exact), (ca // d if is_div else ca % d)
        raise Unsupported(f"transform_layout: {kind} in an index map")

    final = []
    shape = []
    for ref in outputs:
        terms, _ = form(ref)
        final.append(terms)
        shape.append(1 + sum(abs(c) * (sp - 1) for _, c, _, sp in terms))
    return final, tuple(shape)


def _noop(sim, inp, attrs, dec):
    return None


_HANDLERS = {
    "GetSBlock": _get_block, "GetBlock": _get_block, "GetLoops": _get_loops, "GetChildBlocks": _child_blocks,
    "GetConsumers": _consumers, "GetProducers": _producers,
    "SamplePerfectTile": _sample_tile, "SampleCategorical": _sample_cat, "SampleComputeLocation": _sample_loc,
    "Split": _split, "Fuse": lambda s, i, a, d: s.fuse(i), "Reorder": lambda s, i, a, d: s.reorder(i),
    "Parallel": _kind("parallel"), "Vectorize": _kind("vectorized"), "Unroll": _kind("unrolled"), "Bind": _bind,
    "Annotate": _annotate, "Unannotate": _unannotate,
    "ComputeAt": _compute_at(False), "ReverseComputeAt": _compute_at(True),
    "ComputeInline": lambda s, i, a, d: s.compute_inline(i[0]),
    "ReverseComputeInline": lambda s, i, a, d: s.reverse_compute_inline(i[0]),
    "CacheRead": _cache_read, "CacheWrite": _cache_write,
    "DecomposeReduction": lambda s, i, a, d: s.decompose_reduction(i[0], i[1]),
    "TransformLayout": _transform_layout,
    "RFactor": lambda s, i, a, d: s.rfactor(i[0], int(a[0])),
    "EnterPostproc": _noop,
}


def simulate(task: TaskModel, trace) -> Program:
    """The ``Program`` a trace (JSON text or its parsed ``[instructions, decisions]``) makes of the task."""
    if isinstance(trace, (str, bytes)):
        trace = json.loads(trace)
    sim = Simulator(task)
    try:
        return sim.run(trace).program()
    finally:
        sim.release()
