"""The engine, the standard and unit-scaled ops, the modules and the optimizers at their edges:
GELU at the top of the float range, gradchecks of negative-id indexing, hostile inputs, and the
optimizer state round trip."""
import math
import re
import warnings

import numpy as np
import pytest

import minifp8.functional as F
import minifp8.unit as U
import minifp8.nn as nn
import minifp8.uu as uu
from minifp8 import optim
from minifp8.autograd import Tensor, default_dtype
from minifp8.model import GPT, GPTConfig
from minifp8.testing import gradcheck


# ---- non-contiguous leaves -------------------------------------------------------------------------
# gradcheck copies each input into a C-order array, so its finite differences never see a leaf whose data
# is a transposed or strided view. Each case runs twice in float64: on such views, and on C-order copies
# of them, which gradcheck checks against finite differences (the unit ops' scaled gradients are checked
# against scaled finite differences in test_unit); the views' gradients must be the copies'.

NON_CONTIGUOUS_CASES = {
    "add, broadcast": lambda a, b: a + b[:, :1],
    "mul, div": lambda a, b: a * b / (b * b + 1.0),
    "pow": lambda a, b: (a * a + 1.0) ** b,
    "matmul": lambda a, b: a @ b.T,
    "sum, mean": lambda a, b: a.sum(axis=0) * b.mean(axis=-1, keepdims=True),
    "indexing": lambda a, b: a[[0, 2, 2]] + b[::-1, 1:][:, [2, 0, 0, 1]],
    "F.linear": lambda a, b: F.linear(a, b, b[:, 0]),
    "F.softmax, F.layer_norm": lambda a, b: F.softmax(a, axis=0) + F.layer_norm(b, b[0], b[1]),
    "F.scaled_dot_product_attention": lambda a, b: F.scaled_dot_product_attention(a, b, b, causal=True),
    "U.linear, U.gelu": lambda a, b: U.gelu(U.linear(a, b)),
    "U.softmax, U.residual_add": lambda a, b: U.residual_add(U.softmax(a, axis=0), b, tau=0.5),
}


@pytest.mark.parametrize("case", NON_CONTIGUOUS_CASES)
def test_gradients_of_non_contiguous_leaves(case):
    fn = NON_CONTIGUOUS_CASES[case]
    rng = np.random.default_rng(7)
    a_view = rng.standard_normal((6, 8))[::2, 1::2]          # strided: 3 x 4
    b_view = rng.standard_normal((4, 3)).T                    # transposed (F order): 3 x 4
    assert not (a_view.flags.c_contiguous or b_view.flags.c_contiguous)
    grads = []
    with default_dtype(np.float64):
        for a, b in ((a_view, b_view), (np.ascontiguousarray(a_view), np.ascontiguousarray(b_view))):
            leaves = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
            out = fn(*leaves)
            (out * Tensor(np.linspace(-1.0, 1.0, out.data.size).reshape(out.shape))).sum().backward()
            grads.append([leaf.grad for leaf in leaves])
    if not case.startswith("U."):
        gradcheck(fn, *(Tensor(np.ascontiguousarray(x, np.float32), requires_grad=True) for x in (a_view, b_view)))
    for on_views, on_copies in zip(*grads):
        np.testing.assert_allclose(on_views, on_copies, rtol=1e-12, atol=1e-15)


# ---- GELU near the dtype's maximum ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_of_a_huge_finite_input_is_the_input(dtype):
    # y = x/2 (1 + tanh(...)) = x for large x; (s x)/2 overflowed to +inf above half the maximum
    top = np.finfo(dtype).max
    x = np.array([top, top / 2 * 1.5, np.nextafter(top / 2, top), -top, -top / 2 * 1.5], dtype=dtype)
    with default_dtype(dtype), warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        y = F.gelu(Tensor(x)).data
    np.testing.assert_array_equal(y, np.where(x > 0, x, -0.0))
    assert np.signbit(y[x < 0]).all()


@pytest.mark.parametrize("dtype, uint", [(np.float32, np.uint32), (np.float64, np.uint64)])
def test_gelu_values_below_1e30_keep_their_bits(dtype, uint):
    # The value's documented evaluation, x (1 + tanh(x (c + c a x^2))) / 2 in the dtype, bit for bit on a
    # dense sample of all bit patterns (subnormals, both signs, every exponent): the order of operations
    # that keeps huge inputs finite must change no value that training computes.
    bits = np.iinfo(uint).bits
    step = (1 << bits) // (1 << 20) + 1  # odd: every mantissa pattern mod small powers of two is visited
    patterns = (np.arange(1 << 20, dtype=np.uint64) * np.uint64(step)).astype(uint)
    x = patterns.view(dtype)
    x = np.concatenate([x[np.isfinite(x) & (np.abs(x) < 1e30)], np.linspace(-12, 12, 200_001, dtype=dtype)])
    c, a = math.sqrt(2.0 / math.pi), 0.044715
    with np.errstate(over="ignore", under="ignore"):
        s = 1.0 + np.tanh((x * x * (c * a) + c) * x)
        expected = (s * x) * 0.5
    with default_dtype(dtype):
        y = F.gelu(Tensor(x)).data
    assert y.dtype == dtype
    assert y.tobytes() == expected.astype(dtype).tobytes()


# ---- gradchecks of negative-id indexing -----------------------------------------------------------------

@pytest.mark.parametrize("shape, index", [
    ((4, 3), np.array([-1, 0, -1, -4])),       # negative ids: the _sum_rows_by_id path wraps them
    ((5,), np.array([-1, 2, -1])),              # one element per row
    ((3, 2, 2), np.array([[-3, 2], [2, -1]])),  # a 2-D id array picking whole (2, 2) rows
])
def test_indexing_with_negative_integer_arrays_gradcheck(shape, index):
    x = Tensor(np.random.default_rng(0).standard_normal(shape), requires_grad=True)
    gradcheck(lambda t: t[index], x)
    gradcheck(lambda t: t[Tensor(index)], x)
    np.testing.assert_array_equal(x[index].data, x.data[index])


@pytest.mark.parametrize("index", [[], ([],), (0, []), [[]], (slice(None), [])], ids=repr)
def test_indexing_with_an_empty_list_has_a_zero_gradient(index):
    """Found in a review: NumPy reads an empty list index as integers, but its copy for backward
    (np.array([]) is float64) made np.add.at raise "arrays used as indices must be of integer type"
    in backward, after a forward pass that worked (rows picked by a filter that matched nothing)."""
    x = Tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    picked = x[index]
    np.testing.assert_array_equal(picked.data, x.data[index])
    assert picked.data.size == 0
    gradcheck(lambda t: (t[index] * 2.0).sum() + (t * t).sum(), x)
    ((x[index] * 2.0).sum() + x.sum()).backward()
    np.testing.assert_array_equal(x.grad, np.ones((3, 2)))


# ---- hostile inputs ------------------------------------------------------------------------------

@pytest.mark.parametrize("join", [F.concat, F.stack])
@pytest.mark.parametrize("make", [lambda a: Tensor(a), lambda a: a])
def test_joining_one_tensor_is_an_error_not_a_join_of_its_rows(join, make):
    # iterating t would join its rows: a (3, 4) tensor would come back flattened to (12,)
    with pytest.raises(TypeError, match=rf"{join.__name__}: tensors must be a sequence of tensors, got one "
                                        r"\w+ of shape \(3, 4\)"):
        join(make(np.ones((3, 4), dtype=np.float32)))


@pytest.mark.parametrize("make", [
    lambda eps: F.layer_norm(Tensor(np.ones((2, 3))), eps=eps),
    lambda eps: nn.LayerNorm(3, eps=eps),
    lambda eps: uu.LayerNorm(3, eps=eps),
])
@pytest.mark.parametrize("eps", [math.inf, math.nan, -1.0])
def test_layer_norm_eps_must_be_finite(make, eps):
    # an infinite eps would zero every output (and every gradient)
    with pytest.raises(ValueError, match=r"eps must be >= 0 and finite"):
        make(eps)


def test_standard_attention_module_names_a_wrong_input_shape():
    model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=2, n_embd=4), rng=np.random.default_rng(0))
    attention = model.blocks[0].attn
    for shape in [(3, 4), (1, 3, 5)]:  # was "not enough values to unpack", or a reshape error
        with pytest.raises(ValueError, match=r"CausalSelfAttention: x must have shape \(batch, seq, 4\), got "
                                             + re.escape(str(shape))):
            attention(Tensor(np.ones(shape)))
    assert attention(np.ones((1, 3, 4))).shape == (1, 3, 4)


# ---- optimizers: malformed state and gradients ---------------------------------------------------

def params(seed=0):
    rng = np.random.default_rng(seed)
    return [Tensor(rng.standard_normal((2, 3)), requires_grad=True), Tensor(rng.standard_normal(3), requires_grad=True)]


def stepped(optimizer_class, **kwargs):
    ps = params()
    opt = optimizer_class(ps, lr=0.1, **kwargs)
    for p in ps:
        p.grad = np.ones(p.shape, dtype=np.float32)
    opt.step()
    return opt


@pytest.mark.parametrize("optimizer_class, kwargs", [(optim.AdamW, {}), (optim.SGD, {"momentum": 0.9})])
@pytest.mark.parametrize("corrupt, message", [
    (lambda sd: sd.update(state=None), r"'state' must be a dict of parameter index -> state dict, got NoneType"),
    (lambda sd: sd.update(state=[{}]), r"'state' must be a dict .* got list"),
    (lambda sd: sd["state"].update({0: None}), r"the state of parameter 0 must be a dict, got NoneType"),
    (lambda sd: sd.update(param_groups=None), r"'param_groups' must be a list of dicts, each with a 'params' list"),
    (lambda sd: sd["param_groups"][0].pop("params"), r"'param_groups' must be a list of dicts"),
    (lambda sd: sd["param_groups"].__setitem__(0, [0, 1]), r"'param_groups' must be a list of dicts"),
])
def test_load_state_dict_names_a_malformed_state_dict(optimizer_class, kwargs, corrupt, message):
    # each a TypeError that names the field, not an AttributeError or KeyError from inside
    source = stepped(optimizer_class, **kwargs)
    target = stepped(optimizer_class, **kwargs)
    before = target.state_dict()
    bad = source.state_dict()
    corrupt(bad)
    with pytest.raises(TypeError, match=rf"{optimizer_class.__name__}.load_state_dict: {message}"):
        target.load_state_dict(bad)
    after = target.state_dict()  # nothing loaded
    assert after["param_groups"] == before["param_groups"]
    for i, state in before["state"].items():
        for name, value in state.items():
            np.testing.assert_array_equal(after["state"][i][name], value)


@pytest.mark.parametrize("optimizer_class, kwargs", [
    (optim.AdamW, {"weight_decay": 0.01}), (optim.SGD, {}), (optim.SGD, {"momentum": 0.5}),
])
@pytest.mark.parametrize("bad, got", [([1.0, 1.0, 1.0], "list"), (np.full(3, 0.5 + 1j), "complex128"),
                                      (np.full(3, "1"), "<U1")])
def test_a_gradient_that_is_not_a_floating_array_raises_before_any_update(optimizer_class, kwargs, bad, got):
    """A list raised AttributeError ('list' object has no attribute 'shape'). A complex gradient was
    half-applied: AdamW updated the parameters before it, decayed its own and counted its step before
    NumPy refused the update (a retry then used another bias correction); SGD with momentum dropped
    the imaginary part without a word."""
    ps = params()
    opt = optimizer_class(ps, lr=0.1, **kwargs)
    ps[0].grad = np.ones((2, 3), dtype=np.float32)
    ps[1].grad = bad
    before = [p.data.copy() for p in ps]
    with pytest.raises(TypeError, match=rf"{optimizer_class.__name__}: the gradient of parameter .* must be a "
                                        rf"floating ndarray \(as backward leaves it\), got .*{got}"):
        opt.step()
    for p, data in zip(ps, before):
        np.testing.assert_array_equal(p.data, data)
    assert opt.state_dict()["state"] == {}


def test_clip_grad_norm_refuses_a_read_only_gradient_before_scaling_any():
    """The gradients are scaled in place, one after another: a read-only one (a broadcast view)
    raised only after the ones before it had been clipped."""
    first, second = Tensor(np.ones(3), requires_grad=True), Tensor(np.ones(3), requires_grad=True)
    first.grad = np.full(3, 10.0)
    second.grad = np.broadcast_to(10.0, (3,))
    with pytest.raises(ValueError, match=r"clip_grad_norm: every \.grad must be writable .*read-only"):
        optim.clip_grad_norm([first, second], 1.0)
    np.testing.assert_array_equal(first.grad, [10.0, 10.0, 10.0])


@pytest.mark.parametrize("grad, got", [([1.0, 2.0, 2.0], "list"), (np.ones(3, dtype=np.int64), "dtype int64")])
def test_clip_grad_norm_names_a_gradient_that_is_not_a_floating_array(grad, got):
    p = Tensor(np.ones(3), requires_grad=True)
    p.grad = grad
    with pytest.raises(TypeError, match=rf"clip_grad_norm: every \.grad must be a floating ndarray .*got .*{got}"):
        optim.clip_grad_norm([p], 1.0)


def test_sgd_momentum_resumes_bit_exactly_from_float64_gradients():
    # float32 parameters, float64 gradients set by hand: the momentum buffer took the gradient's
    # dtype (float64), load_state_dict restores it in the parameter's (float32), and the resumed run
    # drifted from the uninterrupted one. The buffer now has the parameter's dtype from the start.
    rng = np.random.default_rng(3)
    grads = [[rng.standard_normal((2, 3)), rng.standard_normal(3)] for _ in range(6)]

    def run(steps, optimizer=None, ps=None):
        ps = ps or params()
        optimizer = optimizer or optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)
        for step in steps:
            for p, g in zip(ps, grads[step]):
                p.grad = g
            optimizer.step()
        return ps, optimizer

    straight, _ = run(range(6))
    first, optimizer = run(range(3))
    saved = optimizer.state_dict()
    assert all(s["momentum_buffer"].dtype == np.float32 for s in saved["state"].values())
    resumed_params = params()
    for p, q in zip(resumed_params, first):
        p.data = q.data.copy()
    resumed_optimizer = optim.SGD(resumed_params, lr=0.1, momentum=0.9, nesterov=True)
    resumed_optimizer.load_state_dict(saved)
    resumed, _ = run(range(3, 6), resumed_optimizer, resumed_params)
    for p, q in zip(straight, resumed):
        assert p.data.tobytes() == q.data.tobytes()


def test_attention_with_head_dim_0_needs_an_explicit_scale():
    q = np.zeros((2, 3, 0))
    with pytest.raises(ValueError, match=r"head_dim 0 .*has no default scale"):
        F.scaled_dot_product_attention(q, q, np.ones((2, 3, 4)))
    out = F.scaled_dot_product_attention(q, q, np.arange(24.0).reshape(2, 3, 4), scale=1.0)
    v_mean = np.arange(24.0).reshape(2, 3, 4).mean(axis=1, keepdims=True)  # q k^T is all zeros: uniform weights
    np.testing.assert_allclose(out.data, np.broadcast_to(v_mean, (2, 3, 4)), rtol=1e-6)


# ---- options whose position would mean different things in F, U and torch -----------------------

@pytest.mark.parametrize("call", [
    # U's third argument was mult, F's ignore_index (and unit_scaling's order differs again)
    lambda: U.cross_entropy(Tensor(np.zeros((3, 4))), np.zeros(3, dtype=int), 2.0),
    lambda: F.cross_entropy(Tensor(np.zeros((3, 4))), np.zeros(3, dtype=int), -1),
    # the fifth of attention was mult in U and scale in F
    lambda: U.scaled_dot_product_attention(*[Tensor(np.ones((1, 2, 4)))] * 3, True, 0.5),
    lambda: F.scaled_dot_product_attention(*[Tensor(np.ones((1, 2, 4)))] * 3, True, 0.5),
    # torch's order is (eps, elementwise_affine, bias): a positional False would switch off another flag
    lambda: nn.LayerNorm(4, 1e-5, False),
    lambda: uu.LayerNorm(4, 1e-5, False),
], ids=["U.cross_entropy", "F.cross_entropy", "U.attention", "F.attention", "nn.LayerNorm", "uu.LayerNorm"])
def test_options_whose_position_differs_between_modules_are_keyword_only(call):
    with pytest.raises(TypeError, match="positional argument"):
        call()


def _failing_parameters():
    yield Tensor(np.ones(2), requires_grad=True)
    raise TypeError("the parameters' own error")


@pytest.mark.parametrize("call, message", [
    (lambda: optim.zero_grad(3), "zero_grad: params must be a Tensor or an iterable of Tensors, got int 3"),
    (lambda: optim.zero_grad([3]), "zero_grad: params .* got an element int 3"),
    (lambda: optim.clip_grad_norm([np.ones(2)], 1.0), "clip_grad_norm: params .* got an element ndarray"),
    (lambda: optim.AdamW(3), "AdamW: params must be an iterable of Tensors or of parameter groups, got int 3"),
    (lambda: optim.AdamW([{"params": 5}]), "AdamW: a group's 'params' must be a list of Tensors, got int 5"),
    (lambda: optim.SGD(_failing_parameters(), lr=0.1), "^the parameters' own error$"),  # (passes through)
])
def test_optimizer_functions_name_params_that_are_not_tensors(call, message):
    # ('int' object is not iterable, or an AttributeError on .grad; found in an API review)
    with pytest.raises(TypeError, match=message):
        call()


def test_module_load_names_a_path_that_is_neither_a_path_nor_a_file():
    # (AttributeError: 'int' object has no attribute 'tell'; found in an API review)
    with pytest.raises(TypeError, match="Module.load: path must be a file path .* got int 3"):
        nn.Linear(2, 3, rng=np.random.default_rng(0)).load(3)


def test_small_input_checks_a_review_found_missing():
    """Each of these was accepted, or failed with a raw NumPy error, before."""
    import tempfile

    from minifp8 import golden, mx
    from minifp8.autograd import Tensor, default_dtype

    q = Tensor(np.ones((1, 2, 4), np.float32))
    with pytest.raises(TypeError, match="rng must be a np.random.Generator"):  # ignored when dropout_p was 0
        F.scaled_dot_product_attention(q, q, q, rng="not a generator")
    with pytest.raises(TypeError, match="default_dtype must be float32 or float64, got None"):  # float64 before
        with default_dtype(None):
            pass
    with pytest.raises(TypeError, match="values must hold real numbers"):  # a lexicographic max before
        mx.row_max(np.array([1 + 5j, 2, 9j, 1 + 1j]), 2)
    with tempfile.TemporaryDirectory() as folder, pytest.raises(TypeError, match="arrays must be a mapping"):
        golden.write_npz(f"{folder}/x.npz", [np.ones(2)])
