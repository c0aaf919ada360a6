"""A seeded random-graph fuzzer for the autograd engine and the ops of ``minifp8.functional``.

Each case draws a random DAG of 3 to 8 steps (chained, most on the newest node) from every
differentiable op of the engine: elementwise and broadcasting binary ops, reductions with
``axis``/``keepdims``, reshape, transpose, basic and advanced indexing, matmul and linear,
softmax, log_softmax, layer_norm, gelu, concat, stack, split, dropout, embedding, cross-entropy
and attention. Nodes are reused (shared subexpressions, ``x * x``, self-attention ``q = k = v``),
operands broadcast against each other, and every node that no op consumed is an output.
`minifp8.testing.gradcheck` then compares each leaf's analytic gradient of a random projection
of the outputs with central differences in float64; the float32 run is compared with the
float64 gradient. The same graphs check the engine's graph semantics (accumulation,
``zero_grad``, explicit output gradients, ``no_grad``, ``detach``, version counters), and a
5,000-op chain checks that depth is no limit.
"""
import numpy as np
import pytest

from minifp8 import functional as F, optim
from minifp8.autograd import Tensor, default_dtype, no_grad
from minifp8.testing import gradcheck

# ---- the graph generator -------------------------------------------------------------------------
# A graph is a list of steps ``(name, op, refs)``: ``op(*inputs)`` makes the next node from the
# inputs that ``refs`` name, each ("leaf", i) or ("node", j). Integer ids, targets, masks and
# dropout seeds are drawn once, when the graph is; the replay (`_replay`) is deterministic, as
# gradcheck needs, and runs in float32 and in float64 alike.


def _positive(t):
    """t^2 + 1/2: a smooth positive operand for log, sqrt, division and a tensor power's base."""
    return t * t + 0.5


def _scaled(op, factor: float):
    """``op`` with its output times ``factor`` (one more mul node)."""
    return lambda *inputs: op(*inputs) * factor


class _Graph:
    """A random graph being drawn: its leaves, its steps and the values they gave (float64)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.leaves: list[Tensor] = []
        self.nodes: list[Tensor] = []  # generation-time values (float64), to know shapes
        self.steps: list[tuple] = []
        self.used: set[tuple] = set()  # the ("node", j) refs some step consumed

    # -- leaves and node choice --

    def leaf(self, shape) -> tuple:
        self.leaves.append(Tensor(self.rng.standard_normal(shape), requires_grad=True))
        return ("leaf", len(self.leaves) - 1)

    def value(self, ref) -> Tensor:
        kind, i = ref
        return self.leaves[i] if kind == "leaf" else self.nodes[i]

    def pick(self) -> tuple:
        """The newest node (depth grows) or, often, any earlier node or leaf (shared subexpressions)."""
        if self.nodes and self.rng.random() < 0.6:
            return ("node", len(self.nodes) - 1)
        pool = [("leaf", i) for i in range(len(self.leaves))] + [("node", j) for j in range(len(self.nodes))]
        return pool[self.rng.integers(len(pool))]

    def add(self, name: str, op, *refs) -> None:
        out = op(*[self.value(r) for r in refs])
        assert isinstance(out, Tensor) and out.requires_grad, name
        largest = float(np.abs(out.data).max(initial=0.0))
        if largest > 8.0:  # back to O(1), so that rounding errors cannot swamp the finite differences
            name, op, out = f"{name} / {largest:.3g}", _scaled(op, 1.0 / largest), out * (1.0 / largest)
        self.steps.append((name, op, refs))
        self.nodes.append(out)
        self.used.update(r for r in refs if r[0] == "node")

    def broadcast_shape_for(self, shape) -> tuple:
        """A random shape that broadcasts against ``shape``: some axes 1, some leading ones dropped."""
        shape = list(shape)
        shape = [1 if self.rng.random() < 0.3 else n for n in shape]
        drop = int(self.rng.integers(0, len(shape) + 1)) if self.rng.random() < 0.4 else 0
        shape = shape[drop:]
        if not drop and self.rng.random() < 0.15:
            shape = [int(self.rng.integers(1, 3))] + shape  # a new leading axis: the output grows
        return tuple(shape)

    # -- one random op on node x --

    def step(self) -> None:
        rng = self.rng
        x_ref = self.pick()
        x = self.value(x_ref)
        s, nd = x.shape, x.ndim
        choices = ["unary", "scalar", "binary", "binary", "reduce", "pow"]
        if nd >= 1:
            choices += ["softmax", "index", "advanced_index", "reshape", "matmul", "linear", "concat", "stack",
                        "split", "layer_norm", "dropout", "cross_entropy"]
        if nd >= 2:
            choices += ["transpose", "attention", "embedding"]
        kind = choices[rng.integers(len(choices))]

        if kind == "unary":
            name = ["neg", "exp", "log", "tanh", "sqrt", "relu", "sigmoid", "gelu", "square"][rng.integers(9)]
            op = {"neg": lambda a: -a, "exp": lambda a: F.exp(a.tanh()), "log": lambda a: F.log(_positive(a)),
                  "tanh": F.tanh, "sqrt": lambda a: F.sqrt(_positive(a)), "relu": F.relu, "sigmoid": F.sigmoid,
                  "gelu": F.gelu, "square": lambda a: a**2}[name]
            self.add(name, op, x_ref)
        elif kind == "scalar":
            c = float(rng.choice([-1.5, 0.5, 2.0]))
            name = ["radd", "rsub", "rmul", "rdiv", "rpow", "div_const"][rng.integers(6)]
            op = {"radd": lambda a: c + a, "rsub": lambda a: c - a, "rmul": lambda a: c * a,
                  "rdiv": lambda a: c / _positive(a), "rpow": lambda a: 2.0 ** a.tanh(),
                  "div_const": lambda a: a / c}[name]
            self.add(name, op, x_ref)
        elif kind == "pow":
            p = float(rng.choice([3.0, 1.5, -0.5]))
            self.add(f"pow{p}", (lambda a: a**p) if p == 3.0 else (lambda a: _positive(a) ** p), x_ref)
        elif kind == "binary":
            y_ref = self.pick()
            y = self.value(y_ref)
            try:
                np.broadcast_shapes(s, y.shape)
            except ValueError:
                y_ref = self.leaf(self.broadcast_shape_for(s))
            if rng.random() < 0.3:
                y_ref = self.leaf(self.broadcast_shape_for(s))
            name = ["add", "sub", "mul", "div", "tensor_pow"][rng.integers(5)]
            op = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
                  "div": lambda a, b: a / _positive(b), "tensor_pow": lambda a, b: _positive(a) ** b.tanh()}[name]
            self.add(name, op, x_ref, y_ref)
        elif kind == "reduce":
            axes = tuple(int(a) for a in np.flatnonzero(rng.random(nd) < 0.5))
            axis = None if rng.random() < 0.25 else (axes[0] - nd if len(axes) == 1 else axes)
            keepdims = bool(rng.random() < 0.5)
            name = ["sum", "mean"][rng.integers(2)]
            self.add(f"{name}{axis}{'k' if keepdims else ''}",
                     lambda a: getattr(a, name)(axis=axis, keepdims=keepdims), x_ref)
        elif kind == "softmax":
            axis = int(rng.integers(-nd, nd))
            op = F.softmax if rng.random() < 0.5 else F.log_softmax
            self.add(op.__name__, lambda a: op(a, axis=axis), x_ref)
        elif kind == "index":
            axis = int(rng.integers(nd))
            n = s[axis]
            pick = [slice(None, None, -1), slice(n // 2, None), slice(None, None, 2), int(rng.integers(-n, n)),
                    None, Ellipsis][rng.integers(6)]
            index = (slice(None),) * axis + (pick,)
            self.add(f"getitem{index}", lambda a: a[index], x_ref)
        elif kind == "advanced_index":
            n = s[0]
            ids = rng.integers(-n, n, size=int(rng.integers(1, 5)))  # repeats and negative ids
            form = ["array", "tensor", "mask", "pair"][rng.integers(4) if nd >= 2 else rng.integers(3)]
            if form == "array":
                index = ids
            elif form == "tensor":
                index = Tensor(ids.reshape(2, -1) if ids.size % 2 == 0 else ids)
            elif form == "mask":
                index = rng.random(n) < 0.6
                index[0] = True
            else:
                index = (ids, rng.integers(0, s[1], size=ids.size))
            self.add(f"getitem[{form}]", lambda a: a[index], x_ref)
        elif kind == "reshape":
            shapes = [(-1,), s[::-1], s + (1,), (1,) + s]
            if x.size % 2 == 0:
                shapes.append((2, -1))
            shape = shapes[rng.integers(len(shapes))]
            self.add(f"reshape{shape}", lambda a: a.reshape(shape), x_ref)
        elif kind == "transpose":
            perm = tuple(int(a) for a in rng.permutation(nd))
            op = (lambda a: a.T) if rng.random() < 0.3 else (lambda a: a.transpose(perm))
            self.add(f"transpose{perm}", op, x_ref)
        elif kind == "matmul":
            k = s[-1]
            batch = (2 if nd < 3 or s[-3] == 1 else s[-3],)  # batch axes that broadcast against x's
            right = [(k,), (k, int(rng.integers(1, 4))), batch + (k, int(rng.integers(1, 4)))][rng.integers(3)]
            w_ref = self.leaf(right)
            if nd < 2 or rng.random() < 0.5:
                self.add("matmul", lambda a, b: a @ b, x_ref, w_ref)
            else:  # x on the right, a matrix or a vector on the left, broadcast over x's batch axes
                left_ref = self.leaf(((int(rng.integers(1, 4)),) if rng.random() < 0.5 else ()) + (s[-2],))
                self.add("left_matmul", lambda a, b: b @ a, x_ref, left_ref)
        elif kind == "linear":
            out = int(rng.integers(1, 4))
            refs = [x_ref, self.leaf((out, s[-1]))] + ([self.leaf((out,))] if rng.random() < 0.5 else [])
            self.add("linear", F.linear, *refs)
        elif kind == "concat":
            axis = int(rng.integers(nd))
            other = list(s)
            other[axis] = int(rng.integers(1, 3))
            y_ref = self.leaf(tuple(other))
            self.add(f"concat{axis}", lambda a, b: F.concat([a, b, a], axis=axis), x_ref, y_ref)  # a twice
        elif kind == "stack":
            axis = int(rng.integers(-nd - 1, nd + 1))
            self.add(f"stack{axis}", lambda a: F.stack([a, a.tanh(), a], axis=axis), x_ref)
        elif kind == "split":
            axis = int(rng.integers(nd))
            size = int(rng.integers(1, s[axis] + 1))
            self.add(f"split{axis}", lambda a: F.concat(F.split(a, size, axis=axis)[::-1], axis=axis), x_ref)
        elif kind == "layer_norm":
            refs = [x_ref] + [self.leaf((s[-1],)) for _ in range(int(rng.integers(0, 3)))]
            self.add("layer_norm", lambda a, *wb: F.layer_norm(a, *wb), *refs)
        elif kind == "dropout":
            seed = int(rng.integers(1 << 30))
            self.add("dropout", lambda a: F.dropout(a, 0.3, np.random.default_rng(seed)), x_ref)
        elif kind == "cross_entropy":
            targets = rng.integers(0, s[-1], size=s[:-1])
            ignore = -100 if rng.random() < 0.3 else None
            if ignore is not None and targets.size > 1:
                targets.flat[0] = ignore
            self.add("cross_entropy", lambda a: F.cross_entropy(a, targets, ignore_index=ignore), x_ref)
        elif kind == "attention":
            causal = bool(rng.random() < 0.5)
            if rng.random() < 0.5:  # self-attention: one node as q, k and v
                self.add("self_attention", lambda a: F.scaled_dot_product_attention(a, a, a, causal=causal), x_ref)
            else:
                k_ref = self.leaf(s[:-2] + (int(rng.integers(1, 4)), s[-1]))
                v_ref = self.leaf(self.value(k_ref).shape[:-1] + (int(rng.integers(1, 4)),))
                self.add("attention", lambda q, k_, v: F.scaled_dot_product_attention(q, k_, v, causal=causal),
                         x_ref, k_ref, v_ref)
        elif kind == "embedding":
            table = x.reshape(s[0], -1).shape
            ids = rng.integers(0, table[0], size=(2, 3))
            self.add("embedding", lambda a: F.embedding(ids, a.reshape(a.shape[0], -1)), x_ref)

    def outputs(self) -> list[int]:
        """Every node that no step consumed (the last node is one of them)."""
        return [j for j in range(len(self.nodes)) if ("node", j) not in self.used]


def _random_graph(seed: int) -> _Graph:
    rng = np.random.default_rng(seed)
    graph = _Graph(rng)
    ndim = int(rng.integers(0, 4))
    base = tuple(int(n) for n in rng.integers(1, 5, size=ndim))
    with default_dtype(np.float64):
        for _ in range(int(rng.integers(1, 4))):
            graph.leaf(graph.broadcast_shape_for(base) if rng.random() < 0.5 else base)
        depth = int(rng.integers(3, 9))
        while len(graph.steps) < depth:
            graph.step()
    return graph


def _replay(graph: _Graph):
    def fn(*leaves):
        nodes = []
        for _, op, refs in graph.steps:
            nodes.append(op(*[leaves[i] if kind == "leaf" else nodes[i] for kind, i in refs]))
        return tuple(nodes[j] for j in graph.outputs())
    return fn


def _gradients(fn, leaves, dtype, seed: int) -> list[np.ndarray]:
    """Each leaf's gradient of ``sum_k sum(out_k * r_k)``, the graph run on copies of the leaves in
    ``dtype`` (``r_k`` standard normal, drawn in float32 from ``seed``, as gradcheck draws them)."""
    with default_dtype(dtype):
        copies = [Tensor(leaf.data.astype(dtype), requires_grad=True) for leaf in leaves]
        outputs = fn(*copies)
        rng = np.random.default_rng(seed)
        for out in outputs:
            assert out.dtype == dtype, f"an output of dtype {out.dtype} from {np.dtype(dtype)} leaves"
            out.backward(rng.standard_normal(out.shape).astype(np.float32))  # one backward per output
    grads = [np.zeros(c.shape, dtype) if c.grad is None else c.grad for c in copies]
    assert all(g.dtype == dtype and g.shape == c.shape for g, c in zip(grads, copies))
    return grads


# ---- the fuzz test -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(400))
def test_random_graph_gradients_match_finite_differences(seed):
    """float64 backward against central differences (gradcheck's first check, for every leaf), and
    the float32 backward against the float64 one. gradcheck's own float32 check scales its tolerance
    by each leaf's largest gradient; here the scale is the largest of all leaves', since a leaf whose
    exact gradient is 0 (a layer norm over one feature, a softmax over an axis of length 1) gets a
    float32 residue of rounding errors from the rest of the graph. The 1e-5 floor is a hundred
    float32 ulps of the O(1) values and weights: a saturated softmax's gradient, ~1e-7 in float64,
    is 0 in float32, where its largest probability rounds to 1 (the formula cancels), and a
    near-certain cross-entropy's 1e-7 times the factors of the ops after it."""
    graph = _random_graph(seed)
    program = " -> ".join(name for name, _, _ in graph.steps)
    fn = _replay(graph)
    names = [f"leaf {i}" for i in range(len(graph.leaves))]
    report = gradcheck(fn, *graph.leaves, names=names, raise_on_failure=False)
    failed = [entry for entry in report.inputs if not entry.error <= 1.0]
    assert not failed, f"seed {seed}: {program}\n{report}"
    grads32 = _gradients(fn, graph.leaves, np.float32, seed)
    grads64 = _gradients(fn, graph.leaves, np.float64, seed)
    scale = max(float(np.abs(g).max()) for g in grads64)
    for name, g32, g64 in zip(names, grads32, grads64):
        difference = np.abs(g32 - g64)
        tolerance = 1e-4 * scale + 1e-5 + 1e-3 * np.abs(g64)
        assert (difference <= tolerance).all(), (
            f"seed {seed}: {program}\n{name}: float32 {g32}\nfloat64 {g64}")


@pytest.mark.parametrize("seed", range(0, 400, 4))
def test_random_graph_semantics(seed):
    """The module docstring's graph semantics, on the fuzzer's graphs in float32: a second backward
    adds the same gradient again (exactly twice the first), ``zero_grad`` starts afresh, an explicit
    gradient on a non-scalar output is the gradient of ``sum(out * grad)``, gradients are float32,
    ``no_grad`` and ``detach`` build no graph, and a leaf changed in place after the forward pass
    makes ``backward`` refuse before any ``.grad`` changes."""
    graph = _random_graph(seed)
    fn = _replay(graph)
    rng = np.random.default_rng(seed)
    leaves = [Tensor(leaf.data.astype(np.float32), requires_grad=True) for leaf in graph.leaves]
    outputs = fn(*leaves)
    weights = [rng.standard_normal(out.shape).astype(np.float32) for out in outputs]
    loss = outputs[0].sum() * 0.0  # one scalar loss over every output, each with its weights
    for out, weight in zip(outputs, weights):
        loss = loss + (out * weight).sum()
    assert loss.requires_grad and not loss.is_leaf and all(leaf.is_leaf for leaf in leaves)

    loss.backward()
    first = [np.zeros(leaf.shape, np.float32) if leaf.grad is None else leaf.grad.copy() for leaf in leaves]
    assert all(g.dtype == np.float32 and g.shape == leaf.shape for g, leaf in zip(first, leaves))
    loss.backward()  # the graph is kept; gradients accumulate
    for leaf, g in zip(leaves, first):
        np.testing.assert_array_equal(0.0 if leaf.grad is None else leaf.grad, 2 * g)
    optim.zero_grad(leaves)
    assert all(leaf.grad is None for leaf in leaves)
    loss.backward()
    for leaf, g in zip(leaves, first):
        np.testing.assert_array_equal(0.0 if leaf.grad is None else leaf.grad, g)

    # backward(grad) of each output, one after another, against the scalar losses sum(out * grad)
    for out, weight in zip(outputs, weights):
        optim.zero_grad(leaves)
        out.backward(weight)
        explicit = [leaf.grad for leaf in leaves]
        optim.zero_grad(leaves)
        (out * weight).sum().backward()
        for by_hand, g in zip([leaf.grad for leaf in leaves], explicit):
            assert (by_hand is None) == (g is None)
            if g is not None:
                np.testing.assert_array_equal(g, by_hand)

    with no_grad():
        values = fn(*leaves)
    detached = fn(*[leaf.detach() for leaf in leaves])
    for out, value, cut in zip(outputs, values, detached):
        np.testing.assert_array_equal(value.data, out.data)
        np.testing.assert_array_equal(cut.data, out.data)
        assert not value.requires_grad and not cut.requires_grad and value.is_leaf and cut.is_leaf

    optim.zero_grad(leaves)
    loss.backward()
    before = [leaf.grad.copy() if leaf.grad is not None else None for leaf in leaves]
    reached = [leaf for leaf in leaves if leaf.grad is not None]  # (a leaf the graph never used saved nothing)
    changed = reached[int(rng.integers(len(reached)))]
    changed.data[...] = changed.data  # the same values, written in place: the version says so
    changed.bump_version()
    with pytest.raises(RuntimeError, match="was changed in place after the forward pass"):
        loss.backward()
    for leaf, g in zip(leaves, before):
        np.testing.assert_array_equal(0.0 if leaf.grad is None else leaf.grad, 0.0 if g is None else g)
    fn(*leaves)[0].sum().backward()  # a new forward pass works


def test_a_five_thousand_op_chain_of_every_kind_of_op(default_recursion_limit):
    """The module docstring: backward sorts the graph with an explicit stack, so depth is no limit.
    A chain five times CPython's default recursion limit (set for the test) through views (reshape, transpose, getitem),
    fused ops whose closures hold their inputs (layer_norm, softmax, gelu) and a node used twice
    per link, backward and freed. Residual links ``y + r op(y)`` keep the gradient O(1) over
    thousands of links; it is checked against the chain's Jacobian multiplied out in float64 NumPy."""
    links, r = 5 * default_recursion_limit, 1e-3
    x = Tensor(np.linspace(-1.0, 1.0, 6), requires_grad=True)
    y = x
    for i in range(links):
        kind = i % 6
        if kind == 0:
            y = y.reshape(2, 3).T.reshape(6)
        elif kind == 1:
            y = F.concat([y[3:], y[:3]])
        elif kind == 2:
            y = y + r * F.layer_norm(y.reshape(1, 6)).reshape(6)
        elif kind == 3:
            y = y + r * F.softmax(y)
        elif kind == 4:
            y = y + r * F.gelu(y)
        else:
            y = y * 0.5 + y * 0.5
    weights = np.arange(1.0, 7.0)
    (y * weights).sum().backward()
    del y  # freeing the chain must not recurse either
    assert x.grad.dtype == np.float32
    # the same chain in float64 NumPy: value and Jacobian, link by link, from the ops' formulas
    value, jacobian, eye = np.linspace(-1.0, 1.0, 6), np.eye(6), np.eye(6)
    for i in range(links):
        kind = i % 6
        if kind in (0, 1):  # (2, 3).T flattened takes elements 0 3 1 4 2 5; the concat, 3 4 5 0 1 2
            step = eye[[0, 3, 1, 4, 2, 5]] if kind == 0 else eye[[3, 4, 5, 0, 1, 2]]
            update = step @ value - value
        elif kind == 2:
            centred = value - value.mean()
            rstd = 1.0 / np.sqrt(np.mean(centred**2) + 1e-5)
            normed = centred * rstd
            update, step = r * normed, eye + r * rstd * (eye - 1.0 / 6 - np.outer(normed, normed) / 6)
        elif kind == 3:
            s = np.exp(value - value.max())
            s /= s.sum()
            update, step = r * s, eye + r * (np.diag(s) - np.outer(s, s))
        elif kind == 4:
            c, a = np.sqrt(2.0 / np.pi), 0.044715
            t = np.tanh(c * (value + a * value**3))
            update = r * 0.5 * value * (1 + t)
            step = eye + r * np.diag(0.5 * (1 + t) + 0.5 * value * (1 - t**2) * c * (1 + 3 * a * value**2))
        else:
            update, step = 0.0, eye
        value, jacobian = value + update, step @ jacobian
    expected = weights @ jacobian
    assert np.abs(expected).min() > 0.1  # no vanishing gradient to compare trivially
    np.testing.assert_allclose(x.grad, expected, rtol=1e-3)

