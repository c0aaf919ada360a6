"""minifp8.uu: shapes, N(0, 1) init, parameter names, values against the documented rules in NumPy,
gradients against the unit-scaling rule times float64 central differences, the u-muP residual tau
rule, the gemm and attention_core hooks of the FP8 integration contract, and unit scale through a
stack at init, with its documented drift above 1 with depth (a limit of u-muP's attention rule)."""
import functools
import math

import numpy as np
import pytest

import minifp8.functional as F
import minifp8.nn as nn
import minifp8.unit as U
import minifp8.uu as uu
from minifp8.autograd import Tensor, default_dtype
from test_unit import attention_scale, central_differences, gaussian_expectation, harmonic, interp, tie


def rng(seed=0):
    return np.random.default_rng(seed)


def normal(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def as64(t):
    return t.data.astype(np.float64)


def gelu_tanh(h):
    """GPT-2's tanh GELU (Hendrycks & Gimpel 2016), in NumPy."""
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))


def layer_norm_numpy(x, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + eps)


# ---- shapes, init and names ----------------------------------------------------------------------

def test_linear_init_names_and_forward():
    layer = uu.Linear(512, 1024, rng=rng(1))
    assert [(n, p.shape) for n, p in layer.named_parameters()] == [("weight", (1024, 512))]
    assert abs(layer.weight.data.std() - 1.0) < 0.01 and abs(layer.weight.data.mean()) < 0.01
    assert layer.constraint == "to_output_scale" and layer.gemm is F.linear
    with_bias = uu.Linear(5, 3, bias=True, rng=rng(1))
    assert [n for n, _ in with_bias.named_parameters()] == ["weight", "bias"]
    np.testing.assert_array_equal(with_bias.bias.data, 0.0)
    np.testing.assert_array_equal(with_bias.weight.data, uu.Linear(5, 3, rng=rng(1)).weight.data)  # same seed
    x = Tensor(normal(2, 2, 7, 5))
    with_bias.bias.data = normal(3, 3)
    y = with_bias(x)
    assert y.shape == (2, 7, 3)
    # output (x W^T + b) * fan_in^-1/2, whatever the constraint (it ties grad x to the output scale)
    expected = (as64(x) @ as64(with_bias.weight).T + as64(with_bias.bias)) / math.sqrt(5)
    np.testing.assert_allclose(y.data, expected, rtol=1e-5, atol=1e-6)
    unconstrained = uu.Linear(5, 3, rng=rng(1), constraint=None)
    np.testing.assert_allclose(unconstrained(x).data, as64(x) @ as64(unconstrained.weight).T / math.sqrt(5),
                               rtol=1e-5, atol=1e-6)


def test_linear_readout_uses_the_readout_scale():
    layer = uu.LinearReadout(64, 10, rng=rng(3))
    assert layer.constraint is None
    x = Tensor(normal(4, 8, 64))
    y = layer(x)
    assert y.shape == (8, 10)
    np.testing.assert_allclose(y.data, (x.data @ layer.weight.data.T) / 64, rtol=1e-5, atol=1e-6)


def test_embedding_and_layer_norm():
    table = uu.Embedding(1000, 256, rng=rng(5))
    assert [(n, p.shape) for n, p in table.named_parameters()] == [("weight", (1000, 256))]
    assert abs(table.weight.data.std() - 1.0) < 0.01
    ids = np.array([[1, 2, 3], [3, 999, 0]])
    out = table(ids)
    assert out.shape == (2, 3, 256)
    np.testing.assert_array_equal(out.data, table.weight.data[ids])

    norm = uu.LayerNorm(8)
    assert norm.parameters() == []  # non-trainable by default, as unit_scaling.LayerNorm
    affine = uu.LayerNorm(8, elementwise_affine=True)
    assert [n for n, _ in affine.named_parameters()] == ["weight", "bias"]
    x = Tensor(normal(6, 3, 8) * 3 + 1)
    np.testing.assert_allclose(norm(x).data, layer_norm_numpy(as64(x)), rtol=1e-5, atol=1e-5)
    affine.weight.data, affine.bias.data = normal(7, 8), normal(8, 8)  # not the ones and zeros of init
    np.testing.assert_allclose(affine(x).data, layer_norm_numpy(as64(x)) * as64(affine.weight) + as64(affine.bias),
                               rtol=1e-5, atol=1e-5)


def test_mhsa_mlp_and_layer_names_and_shapes():
    attention = uu.MHSA(32, 4, rng=rng(0))
    assert [(n, p.shape) for n, p in attention.named_parameters()] == [
        ("linear_qkv.weight", (96, 32)), ("linear_o.weight", (32, 32))]
    mlp = uu.MLP(32, rng=rng(0))
    assert [(n, p.shape) for n, p in mlp.named_parameters()] == [
        ("linear_1.weight", (128, 32)), ("linear_2.weight", (32, 128))]
    assert mlp.linear_1.constraint is None and mlp.linear_2.constraint is None
    layer = uu.TransformerLayer(32, 4, rng=rng(0), tau_attn=0.5, tau_mlp=0.4)
    assert [n for n, _ in layer.named_parameters()] == [
        "attn.linear_qkv.weight", "attn.linear_o.weight", "mlp.linear_1.weight", "mlp.linear_2.weight"]
    x = Tensor(normal(1, 2, 6, 32))
    assert attention(x).shape == mlp(x).shape == layer(x).shape == (2, 6, 32)
    for module in (attention, mlp, layer):
        for _, p in module.named_parameters():
            assert abs(p.data.std() - 1.0) < 0.05
        repr(module)


def test_mhsa_matches_the_documented_rules_in_numpy():
    attention = uu.MHSA(12, 3, rng=rng(2), mult=0.5, causal=True)
    x = Tensor(normal(3, 2, 5, 12))
    qkv = as64(x) @ as64(attention.linear_qkv.weight).T / math.sqrt(12)  # U.linear: * fan_in^-1/2
    q, k, v = (qkv[..., i * 12:(i + 1) * 12].reshape(2, 5, 3, 4).transpose(0, 2, 1, 3) for i in range(3))
    logits = q @ k.swapaxes(-1, -2) * 0.5 / 4 + np.triu(np.full((5, 5), -np.inf), 1)  # mult / d_head, causal
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    alpha = 1 / (1 + 4 * 4 / 0.5 ** 2)  # U.scaled_dot_product_attention's rule, s = 5 keys, causal
    core = probabilities @ v / interp(alpha, math.sqrt(math.log(5) / 5), 1.0)
    expected = core.transpose(0, 2, 1, 3).reshape(2, 5, 12) @ as64(attention.linear_o.weight).T / math.sqrt(12)
    np.testing.assert_allclose(attention(x).data, expected, rtol=1e-5, atol=1e-6)
    # mult is bound into the attention core at construction: setting it later changed the repr and
    # nothing else (a review's find), so it is refused, and the computation keeps its mult
    with pytest.raises(AttributeError, match=r"MHSA: mult is fixed at construction.*MHSA\(\.\.\., mult=16\.0\)"):
        attention.mult = 16.0
    assert attention.mult == 0.5 and "mult=0.5" in repr(attention)
    np.testing.assert_allclose(attention(x).data, expected, rtol=1e-5, atol=1e-6)


def test_mlp_matches_the_documented_rules_in_numpy():
    mlp = uu.MLP(6, hidden_multiplier=2, rng=rng(4), mult=2.0)
    x = Tensor(normal(5, 3, 6))
    hidden = as64(x) @ as64(mlp.linear_1.weight).T / math.sqrt(6)  # U.linear: * fan_in^-1/2
    alpha = 1 / (1 + 0.25 / 2.0 ** 2)  # U.gelu at mult 2, to_output_scale: the output scale
    activation = interp(alpha, 2.0, math.sqrt(2 / (1 - 1 / math.pi))) * gelu_tanh(2.0 * hidden) / 2.0
    expected = activation @ as64(mlp.linear_2.weight).T / math.sqrt(12)
    np.testing.assert_allclose(mlp(x).data, expected, rtol=1e-5, atol=1e-6)


def test_mlp_statistics_follow_the_gelu_moments():
    """The docstring's ~1.15 and ~1.19, from Gaussian integrals of the tanh GELU. U.gelu (mult 1, tied
    to its output scale c) gives c gelu(h) for unit-normal h; linear_2 (unit W, * fan_in^-1/2) passes
    on its RMS, c sqrt(E[gelu(h)^2]) (the GELU output has a mean, so this is not c std = 1.04).
    Backward, linear_2 and linear_1 keep a gradient's std and the GELU multiplies it by c gelu'(h):
    c sqrt(E[gelu'(h)^2]). The weight gradients follow the same two RMS values."""
    out_scale = interp(1 / (1 + 0.25), 2.0, math.sqrt(2 / (1 - 1 / math.pi)))  # U.gelu at mult 1

    def slope(h, step=1e-5):
        return (gelu_tanh(h + step) - gelu_tanh(h - step)) / (2 * step)

    output_std = out_scale * math.sqrt(gaussian_expectation(lambda h: gelu_tanh(h) ** 2))
    gradient_std = out_scale * math.sqrt(gaussian_expectation(lambda h: slope(h) ** 2))
    assert output_std == pytest.approx(1.15, abs=0.005) and gradient_std == pytest.approx(1.19, abs=0.005)
    mlp = uu.MLP(256, rng=rng(0))
    x = Tensor(normal(1, 2048, 256), requires_grad=True)
    y = mlp(x)
    y.backward(normal(2, *y.shape))
    assert y.data.std() == pytest.approx(output_std, rel=0.03)
    assert x.grad.std() == pytest.approx(gradient_std, rel=0.03)
    assert mlp.linear_2.weight.grad.std() == pytest.approx(output_std, rel=0.03)  # sums of g x gelu
    assert mlp.linear_1.weight.grad.std() == pytest.approx(gradient_std, rel=0.03)


def test_dropout_modes():
    attention = uu.MHSA(8, 2, rng=rng(0), dropout=0.5)
    x = Tensor(normal(1, 2, 3, 8))
    attention.eval()
    plain = uu.MHSA(8, 2, rng=rng(0))
    # evaluation: no mask, the unit-scaled dropout's sqrt(1 - p), as U.dropout
    np.testing.assert_allclose(attention(x).data, math.sqrt(0.5) * plain(x).data, rtol=1e-6)
    attention.train()
    assert not np.allclose(attention(x).data, math.sqrt(0.5) * plain(x).data)


def test_transformer_layer_wiring_in_evaluation_mode():
    """The docstring's forward pass in NumPy: pre-norm (parameter-free layer norm), each branch through
    unit-scaled dropout (sqrt(1 - p) x in evaluation mode, as U.dropout) and U.residual_add's weights
    tau / sqrt(1 + tau^2) (branch) and 1 / sqrt(1 + tau^2) (skip), attention with tau_attn, MLP with tau_mlp.
    Only the branch modules (checked above against NumPy) are called from the library."""
    tau_attn, tau_mlp, p = 0.6, 0.4, 0.36
    layer = uu.TransformerLayer(8, 2, rng=rng(0), tau_attn=tau_attn, tau_mlp=tau_mlp, hidden_multiplier=2,
                                dropout=p)
    layer.eval()
    x = normal(1, 2, 5, 8).astype(np.float64)

    def branch(module, h):
        return as64(module(Tensor(layer_norm_numpy(h))))

    h = (tau_attn * math.sqrt(1 - p) * branch(layer.attn, x) + x) / math.sqrt(1 + tau_attn ** 2)
    expected = (tau_mlp * math.sqrt(1 - p) * branch(layer.mlp, h) + h) / math.sqrt(1 + tau_mlp ** 2)
    np.testing.assert_allclose(layer(Tensor(x)).data, expected, rtol=1e-4, atol=1e-5)


# ---- gradients: the unit-scaling rule times the true gradient ------------------------------------
# Every U op's input gradient is (backward scale) x (the plain op's gradient) and its value is
# (forward scale) x (the plain op's value) (minifp8.unit docstrings), so along a chain of ops the
# gradient of an input or parameter is the true gradient of the module's output times
# prod(backward scales) / prod(forward scales) on the way from the output to it.

def linear_scales(fan_in, fan_out, constraint="to_output_scale", output_power=0.5, tokens=6):
    """U.linear's (forward, grad x, grad weight and bias) scales: fan_in^-1/2 (linear_readout: fan_in^-1),
    fan_out^-1/2, tokens^-1/2, the first two tied by ``constraint`` (test_unit.tie)."""
    forward, grad_x = tie(constraint, fan_in ** -output_power, fan_out ** -0.5)
    return forward, grad_x, tokens ** -0.5


def linear_ratios(forward, grad_x, grad_weight, bias=True):
    return {"x": grad_x / forward, "weight": grad_weight / forward, **({"bias": grad_weight / forward} if bias else {})}


def two_linear_ratios(first, second, names):
    """linear -> ops with one scale both ways (a tied U.gelu, the attention core, U.dropout) -> linear."""
    (forward_1, grad_x_1, grad_weight_1), (forward_2, grad_x_2, grad_weight_2) = first, second
    return {"x": grad_x_2 * grad_x_1 / (forward_2 * forward_1),
            names[0]: grad_x_2 * grad_weight_1 / (forward_2 * forward_1), names[1]: grad_weight_2 / forward_2}


# dim 4 and 6 tokens: MLP(4, hidden_multiplier=2) (both linears unconstrained), MHSA(4, heads=2)
MLP_RATIOS = two_linear_ratios(linear_scales(4, 8, None), linear_scales(8, 4, None),
                               ("linear_1.weight", "linear_2.weight"))
MHSA_RATIOS = two_linear_ratios(linear_scales(4, 12), linear_scales(4, 4), ("linear_qkv.weight", "linear_o.weight"))


def transformer_layer_ratios(tau_attn, tau_mlp):
    """U.residual_add weighs a branch by tau / sqrt(1 + tau^2) forward and passes the gradient unchanged;
    U.residual_split gives the branch's input the same weight backward (and the skip 1 / sqrt(1 + tau^2)
    both ways). So x, whose every path has matching weights and true-gradient branches (the MLP docstring;
    the attention's ratio is 1 too), gets its true gradient, and a branch's parameters their module's
    ratio over the branch weight (the layers after it pass a true gradient)."""
    ratios = {"x": 1.0}
    for prefix, tau, branch in (("attn.", tau_attn, MHSA_RATIOS), ("mlp.", tau_mlp, MLP_RATIOS)):
        ratios.update({prefix + name: ratio * math.sqrt(1 + tau * tau) / tau for name, ratio in branch.items()
                       if name != "x"})
    return ratios


def check_module_gradients(module, x, expected, replay):
    """In float64, the gradients of <r, module(x)> (fixed random r) for x and every parameter equal
    ``expected[name]`` times float64 central differences of it (test_unit.central_differences).

    The parameters get fresh N(0, 1) values first (LayerNorm's ones and zero biases could hide a
    swapped gradient). Every forward replays ``replay``, the module's Generator, from its state
    here, so that the dropout masks are the same in all of them.
    """
    named = list(module.named_parameters())
    names = ["x"] + [name for name, _ in named]
    assert sorted(expected) == sorted(names if x.dtype.kind == "f" else names[1:])  # token ids have no gradient
    saved, state = [(p, p.data) for _, p in named], replay.bit_generator.state
    arrays = [x] + [normal(10 + i, *p.shape).astype(np.float64) for i, (_, p) in enumerate(named)]

    def forward(x, *values):
        replay.bit_generator.state = state
        for (_, p), value in zip(named, values):
            p.data = value.data
        return module(x)

    try:
        with default_dtype(np.float64):
            tensors = [Tensor(a, requires_grad=i == 0 and a.dtype.kind == "f") for i, a in enumerate(arrays)]
            out = forward(*tensors)
            weight = np.random.default_rng(7).standard_normal(out.shape)
            out.backward(weight)
        grads = [tensors[0].grad] + [p.grad for _, p in named]
        for index, (name, grad) in enumerate(zip(names, grads)):
            if name in expected:
                scaled_true = expected[name] * central_differences(forward, arrays, index, [weight])
                np.testing.assert_allclose(grad, scaled_true, rtol=1e-6, atol=1e-7 * np.abs(scaled_true).max(),
                                           err_msg=f"{type(module).__name__} {name}: not {expected[name]:.6g} x true")
    finally:
        for p, data in saved:
            p.data, p.grad = data, None


X = normal(1, 2, 3, 4).astype(np.float64)  # 6 tokens of width 4
X5, X6 = normal(2, 2, 3, 5).astype(np.float64), normal(3, 2, 3, 6).astype(np.float64)


@pytest.mark.parametrize("make, x, expected", [
    pytest.param(lambda g: uu.Linear(5, 3, bias=True, rng=g), X5, linear_ratios(*linear_scales(5, 3)), id="Linear"),
    pytest.param(lambda g: uu.Linear(5, 3, bias=True, rng=g, constraint=None), X5,
                 linear_ratios(*linear_scales(5, 3, None)), id="Linear-None"),
    pytest.param(lambda g: uu.Linear(5, 3, rng=g, constraint="gmean"), X5,
                 linear_ratios(*linear_scales(5, 3, "gmean"), bias=False), id="Linear-gmean"),
    pytest.param(lambda g: uu.LinearReadout(5, 3, bias=True, rng=g), X5,
                 linear_ratios(*linear_scales(5, 3, None, output_power=1.0)), id="LinearReadout"),
    pytest.param(lambda g: uu.Embedding(5, 3, rng=g), np.array([[0, 3, 3, 1], [4, 0, 3, 3]]),
                 {"weight": math.sqrt(5 / 8)}, id="Embedding"),
    pytest.param(lambda g: uu.LayerNorm(6), X6, {"x": 1.0}, id="LayerNorm"),
    pytest.param(lambda g: uu.LayerNorm(6, elementwise_affine=True), X6,
                 {"x": 1.0, "weight": math.sqrt(6 / 36), "bias": math.sqrt(6 / 36)}, id="LayerNorm-affine"),
    pytest.param(lambda g: uu.LayerNorm(6, elementwise_affine=True, bias=False), X6,
                 {"x": 1.0, "weight": math.sqrt(6 / 36)}, id="LayerNorm-weight"),
    pytest.param(lambda g: uu.MLP(4, hidden_multiplier=2, rng=g, mult=1.5), X, MLP_RATIOS, id="MLP"),
    pytest.param(lambda g: uu.MHSA(4, 2, rng=g, mult=1.5, dropout=0.2), X, MHSA_RATIOS, id="MHSA-dropout"),
    pytest.param(lambda g: uu.MHSA(4, 2, rng=g, causal=False), X, MHSA_RATIOS, id="MHSA-noncausal"),
    pytest.param(lambda g: uu.TransformerLayer(4, 2, rng=g, tau_attn=0.6, tau_mlp=0.4, mult=1.5, mlp_mult=0.7,
                                               hidden_multiplier=2, dropout=0.2), X,
                 transformer_layer_ratios(0.6, 0.4), id="TransformerLayer"),
])
def test_module_gradients_are_the_rule_times_the_true_gradients(make, x, expected):
    generator = rng(0)
    check_module_gradients(make(generator), x, expected, replay=generator)


# ---- the u-muP residual rule ---------------------------------------------------------------------

@pytest.mark.parametrize("n_layer", [1, 2, 6])
def test_default_taus_are_one_over_sqrt_of_layers_plus_branch_index(n_layer):
    taus = uu.residual_taus(n_layer)
    flat = [tau for pair in taus for tau in pair]
    expected = [1.0 / math.sqrt(n_layer + i) for i in range(2 * n_layer)]
    np.testing.assert_allclose(flat, expected, rtol=1e-15)
    if n_layer == 2:
        assert taus[0] == pytest.approx((1 / math.sqrt(2), 1 / math.sqrt(3)))
        assert taus[1] == pytest.approx((1 / 2, 1 / math.sqrt(5)))


def final_variance_weights(taus):
    """Squared weight of the embedding and of each branch in the final stream, from residual_add's formula."""
    weights = [1.0]  # the embedding
    for tau in taus:
        skip_weight = 1.0 / math.sqrt(1.0 + tau * tau)
        weights = [w * skip_weight for w in weights] + [tau / math.sqrt(1.0 + tau * tau)]
    return np.square(weights)


@pytest.mark.parametrize("n_layer, residual_mult, residual_attn_ratio",
                         [(3, 1.0, 1.0), (4, 1.0, 1.0), (4, 2.0, 1.0), (5, 1.0, 0.5), (3, 0.7, 3.0)])
def test_every_branch_of_a_kind_contributes_equally(n_layer, residual_mult, residual_attn_ratio):
    """The property the rule is defined by (u-muP Appendix G), checked on the residual_add weights."""
    taus = [t for pair in uu.residual_taus(n_layer, residual_mult=residual_mult,
                                             residual_attn_ratio=residual_attn_ratio) for t in pair]
    squares = final_variance_weights(taus)
    assert squares.sum() == pytest.approx(1.0)  # unit-scaled stream
    embedding, attention, mlp = squares[0], squares[1::2], squares[2::2]
    np.testing.assert_allclose(attention, attention[0], rtol=1e-12)  # every attention layer the same
    np.testing.assert_allclose(mlp, mlp[0], rtol=1e-12)              # every MLP layer the same
    assert attention[0] / mlp[0] == pytest.approx(residual_attn_ratio ** 2)
    # on average the residual families have residual_mult^2 times the embedding's variance
    assert (attention.sum() + mlp.sum()) / 2 / embedding == pytest.approx(residual_mult ** 2)
    if residual_mult == residual_attn_ratio == 1.0:  # thirds
        assert embedding == pytest.approx(1 / 3) and attention.sum() == pytest.approx(1 / 3)


# ---- hooks ---------------------------------------------------------------------------------------

class CountingGemm:
    def __init__(self):
        self.calls = []

    def __call__(self, x, weight, bias):
        self.calls.append((x.shape, weight.shape, bias is not None))
        return F.linear(x, weight, bias)


def test_custom_gemm_is_called_and_state_dict_is_unaffected():
    layer = uu.TransformerLayer(16, 2, rng=rng(0), tau_attn=0.7, tau_mlp=0.6)
    x = Tensor(normal(1, 2, 5, 16), requires_grad=True)
    before_state = layer.state_dict()
    reference = layer(x)
    reference.backward(normal(2, *reference.shape))
    reference_grad = x.grad.copy()
    x.grad = None
    hooks = {}
    for name, module in layer.named_modules():
        if hasattr(module, "gemm"):
            hooks[name] = module.gemm = CountingGemm()
    assert sorted(hooks) == ["attn.linear_o", "attn.linear_qkv", "mlp.linear_1", "mlp.linear_2"]
    assert list(layer.state_dict()) == list(before_state)
    out = layer(x)
    out.backward(normal(2, *out.shape))
    assert all(len(hook.calls) == 1 for hook in hooks.values())
    assert hooks["attn.linear_qkv"].calls[0] == ((2, 5, 16), (48, 16), False)
    np.testing.assert_array_equal(out.data, reference.data)
    np.testing.assert_array_equal(x.grad, reference_grad)
    readout = uu.LinearReadout(16, 4, bias=True, rng=rng(1))
    readout.gemm = CountingGemm()
    readout(x)
    assert readout.gemm.calls == [((2, 5, 16), (4, 16), True)]
    assert [n for n, _ in readout.named_parameters()] == ["weight", "bias"]


def test_attention_core_hook():
    attention = uu.MHSA(12, 3, rng=rng(0), causal=False, mult=2.0)
    assert isinstance(attention.attention_core, functools.partial)
    assert attention.attention_core.func is U.scaled_dot_product_attention
    assert attention.attention_core.keywords == {"mult": 2.0}
    x = Tensor(normal(1, 2, 5, 12))
    reference = attention(x)
    calls = []
    default_core = attention.attention_core

    def core(q, k, v, causal):
        calls.append((q.shape, k.shape, v.shape, causal))
        return default_core(q, k, v, causal)

    names = [n for n, _ in attention.named_parameters()]
    attention.attention_core = core
    np.testing.assert_array_equal(attention(x).data, reference.data)
    assert calls == [((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4), False)]
    assert [n for n, _ in attention.named_parameters()] == names


# ---- unit scale through a stack at init ----------------------------------------------------------

def test_transformer_stack_is_unit_scaled_at_init():
    """Causal, seq 32: near 1 everywhere, with the documented drift (TransformerLayer's docstring) as
    the only slack. The first layer's output and the top layers' gradients are within 10% of 1; the
    stream then rises (1.04, 1.10, 1.23, 1.32 with this input) and the input's gradient is 1.29. The bounds fail
    without residual_add's forward weights 1/sqrt(1 + tau^2) (the stream: 1.25 after one layer,
    1.77 after four) or residual_split's backward ones (gradients 1.40 after one layer, 2.23 at the input)."""
    n_layer, dim = 4, 64
    generator = rng(0)
    layers = [uu.TransformerLayer(dim, 4, rng=generator, tau_attn=a, tau_mlp=m)
              for a, m in uu.residual_taus(n_layer)]
    x = Tensor(normal(1, 8, 32, dim), requires_grad=True)
    activations = [x]
    for layer in layers:
        activations.append(layer(activations[-1]).retain_grad())
    out = activations[-1]
    out.backward(normal(2, *out.shape))
    stds = [float(a.data.std()) for a in activations]
    grads = [float(a.grad.std()) for a in activations]
    assert abs(stds[1] - 1.0) < 0.1, stds
    assert all(a <= b for a, b in zip(stds, stds[1:])) and stds[-1] < 1.45, stds  # the drift, bounded
    assert all(abs(g - 1.0) < 0.1 for g in grads[1:]) and 1.0 < grads[0] < 1.35, grads
    for layer in layers:
        for name, p in layer.named_parameters():
            # linear_o's input is the attention output, above 1 (the drift), and so is its weight gradient
            high = 2.6 if name == "attn.linear_o.weight" else 1.5
            assert 1.0 <= p.grad.std() <= high, f"{name}: grad std {p.grad.std()}"


@pytest.mark.parametrize("causal, core_stds, ratios, stream_std, v_grad_stds, input_grad_std", [
    (False, [0.98, 4.93, 10.4, 11.56], [0.08, 0.45, 0.91, 0.98], 4.81, [8.81, 2.17, 1.10, 0.89], 3.98),
    (True, [1.01, 2.20, 3.36, 4.21], [0.08, 0.34, 0.59, 0.79], 1.97, [4.06, 2.04, 1.32, 1.00], 2.07),
], ids=["bidirectional", "causal"])
def test_stack_attention_drifts_above_unit_scale_with_depth(causal, core_stds, ratios, stream_std, v_grad_stds,
                                                           input_grad_std):
    """The documented limit of u-muP's attention rule (U.scaled_dot_product_attention, uu.TransformerLayer;
    the unit_scaling library's TransformerStack behaves the same): the rule assumes independent value
    rows, but at init each layer's near-flat attention outputs a (prefix) mean of its value rows, so
    the next layer's value rows share a per-sequence vector that the scale sqrt(s) (causal
    sqrt(s / ln s)) multiplies unshrunk. Seq 128, 4 layers of dim 64: the first layer is unit-scaled;
    then the RMS of the per-sequence mean of v (over std v; 1/sqrt(128) = 0.09 for independent rows)
    rises, the attention output is the flat-limit one (its scale times the (prefix) mean of v) ever
    more closely and grows with it, and so does the stream. The backward pass mirrors it from the top
    down. Pinned to the docstrings' numbers (deterministic seeds) within 3%."""
    seq, dim, heads = 128, 64, 4
    scale = attention_scale(seq, dim // heads, causal, 1.0)
    generator = rng(0)
    layers = [uu.TransformerLayer(dim, heads, rng=generator, tau_attn=a, tau_mlp=m, causal=causal)
              for a, m in uu.residual_taus(4)]
    seen = []
    for layer in layers:
        def spy(q, k, v, is_causal, core=layer.attn.attention_core):
            out = core(q, k, v, is_causal)
            values = v.data.astype(np.float64)
            if is_causal:
                flat = np.cumsum(values, axis=-2) / np.arange(1, seq + 1)[:, None]
            else:
                flat = np.broadcast_to(values.mean(axis=-2, keepdims=True), values.shape)
            seen.append({"v": v.retain_grad(), "out": out, "std": float(out.data.std()),
                         "ratio": math.sqrt(np.mean(values.mean(axis=-2) ** 2)) / values.std(),
                         "off_flat": math.sqrt(np.mean((out.data - scale * flat) ** 2)) / out.data.std()})
            return out.retain_grad()
        layer.attn.attention_core = spy
    # (the input as the docstrings' measurement drew it: float64 normals rounded to float32)
    x = Tensor(rng(1).standard_normal((8, seq, dim)).astype(np.float32), requires_grad=True)
    h = x
    for layer in layers:
        h = layer(h)
    h.backward(rng(2).standard_normal(h.shape).astype(np.float32))

    stds, measured_ratios = [r["std"] for r in seen], [r["ratio"] for r in seen]
    unit = math.sqrt(harmonic(seq) / math.log(seq)) if causal else 1.0  # the rule's own flat-limit value
    assert abs(stds[0] / unit - 1) < 0.1 and abs(measured_ratios[0] * math.sqrt(seq) - 1) < 0.15
    assert all(a < b for a, b in zip(stds, stds[1:])), stds
    assert all(a < b for a, b in zip(measured_ratios, measured_ratios[1:])), measured_ratios
    off_flat = [r["off_flat"] for r in seen]
    assert all(a > b for a, b in zip(off_flat, off_flat[1:])) and max(off_flat[1:]) < 0.15, off_flat
    np.testing.assert_allclose(stds, core_stds, rtol=0.03)
    np.testing.assert_allclose(measured_ratios, ratios, rtol=0.03, atol=0.005)  # (two decimals)
    assert float(h.data.std()) == pytest.approx(stream_std, rel=0.03)
    # backward, from the top layer down: the share of the output gradient's per-sequence mean grows,
    # and the v gradient (near-flat attention passes each v row the mean output gradient) with it
    v_grads = [float(r["v"].grad.std()) for r in seen]
    shared = [math.sqrt(np.mean(r["out"].grad.mean(axis=-2) ** 2)) / r["out"].grad.std() for r in seen]
    assert all(a > b for a, b in zip(shared, shared[1:])), shared
    np.testing.assert_allclose(v_grads, v_grad_stds, rtol=0.03)
    assert float(x.grad.std()) == pytest.approx(input_grad_std, rel=0.03)


def test_mhsa_takes_nested_lists_like_the_other_layers():
    attention = uu.MHSA(4, 2, rng=rng())
    x = np.random.default_rng(1).standard_normal((1, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(attention(x.tolist()).data, attention(Tensor(x)).data)


# ---- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda: uu.Linear(4, 4, rng=rng(), constraint="gmaen"), ValueError,
     r"unknown constraint .*None, 'to_output_scale', 'gmean'"),
    (lambda: uu.LinearReadout(4, 4, rng=rng(), constraint="nope"), ValueError, "unknown constraint"),
    (lambda: uu.Linear(4, 4, rng=None), TypeError, "Generator"),
    (lambda: uu.Linear(0, 4, rng=rng()), ValueError, "in_features"),
    (lambda: uu.Embedding(10, 4, rng=1), TypeError, "Generator"),
    # each layer names itself (without its own check, the first Linear inside it raised, naming Linear)
    (lambda: uu.MHSA(12, 3, rng=None), TypeError, "^MHSA needs rng=np.random.Generator"),
    (lambda: uu.MLP(8, rng=None), TypeError, "^MLP needs rng=np.random.Generator"),
    (lambda: uu.TransformerLayer(8, 2, rng=None, tau_attn=0.5, tau_mlp=0.5), TypeError,
     "^TransformerLayer needs rng=np.random.Generator"),
    (lambda: uu.MHSA(10, 3, rng=rng()), ValueError, "multiple of heads"),
    (lambda: uu.MHSA(12, 3, rng=rng(), mult=0.0), ValueError, "mult"),
    (lambda: uu.MHSA(12, 3, rng=rng())(Tensor(np.zeros((2, 12), np.float32))), ValueError, "batch, seq"),
    (lambda: uu.MHSA(12, 3, rng=rng())(Tensor(np.zeros((2, 5, 8), np.float32))), ValueError,
     r"MHSA: x must have shape \(batch, seq, 12\), got \(2, 5, 8\)"),
    (lambda: uu.TransformerLayer(8, 2, rng=rng(), tau_attn=0.0, tau_mlp=0.5), ValueError, "tau_attn"),
    (lambda: uu.TransformerLayer(8, 2, rng=rng(), tau_attn=0.5, tau_mlp=-1.0), ValueError, "tau_mlp"),
    (lambda: uu.TransformerLayer(8, 2, rng=rng(), tau_attn=0.5, tau_mlp=0.5, dropout="0.1"), TypeError,
     "TransformerLayer: dropout must be a real number, got str"),
    (lambda: uu.MHSA(12, 3, rng=rng(), dropout=None), TypeError, "MHSA: dropout must be a real number, got NoneType"),
    (lambda: uu.LayerNorm(4, eps="1e-5"), TypeError, "LayerNorm: eps must be a real number, got str"),
    (lambda: uu.residual_taus(0), ValueError, "n_layer"),
    # (refused up front, naming the argument: the branch-weight check below also refused them, vaguely)
    (lambda: uu.residual_taus(2, residual_mult=0.0), ValueError,
     r"residual_taus: residual_mult must be a finite number > 0, got 0\.0"),
    (lambda: uu.residual_taus(2, residual_attn_ratio=-1.0), ValueError,
     r"residual_taus: residual_attn_ratio must be a finite number > 0, got -1\.0"),
    (lambda: uu.residual_taus(2, residual_mult="1"), TypeError, "residual_taus: residual_mult must be a real number"),
    # (a bare OverflowError from Python's float ** before)
    (lambda: uu.residual_taus(2, residual_mult=1e200), ValueError,
     "residual_mult 1e\\+200 and residual_attn_ratio 1 are too large for its float64 arithmetic"),
    (lambda: uu.residual_taus(2, residual_attn_ratio=1e200), ValueError, "a square of one overflows"),
    (lambda: uu.residual_taus(2, residual_attn_ratio=5e-324), ValueError, "branch weights 0 to 1; each must be"),
])
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("make", [lambda: uu.LayerNorm(8), lambda: nn.LayerNorm(8, elementwise_affine=False),
                                  lambda: uu.LayerNorm(8, elementwise_affine=True),
                                  lambda: uu.LayerNorm(8, elementwise_affine=True, bias=False)],
                         ids=["uu", "nn", "uu-affine", "uu-affine-no-bias"])
def test_layer_norm_checks_the_feature_count_of_x(make):
    """With or without parameters, the message names x (with a weight it used to blame the weight's shape)."""
    with pytest.raises(ValueError, match=r"LayerNorm\(8\): x must have 8 features on its last axis, got shape \(5, 7\)"):
        make()(Tensor(np.ones((5, 7), np.float32)))


def test_mult_outside_its_range_is_a_clear_error():
    x = Tensor(np.ones((2, 3, 4), np.float32))
    for call in (lambda m: U.gelu(x, mult=m), lambda m: U.softmax(x, mult=m),
                 lambda m: U.scaled_dot_product_attention(x, x, x, mult=m),
                 lambda m: uu.MHSA(8, 2, rng=np.random.default_rng(0), mult=m)):
        for mult in (1e-200, 1e200):
            with pytest.raises(ValueError, match=r"mult must be in \[2\*\*-30, 2\*\*30\]"):
                call(mult)
    with pytest.raises(ValueError, match="lower and upper must be > 0"):
        U.logarithmic_interpolation(0.5, 0.0, 1.0)


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_layer_norm_uses_its_eps(affine):
    """A mutation audit: uu.LayerNorm passing U.layer_norm its default eps for its own passed
    every test (each used the default eps, or checked only the attribute). eps = 0.5 against
    variances ~0.25 moves every output far from the default eps's."""
    norm = uu.LayerNorm(5, eps=0.5, elementwise_affine=affine)
    x = Tensor(0.5 * normal(9, 3, 5))
    expected = layer_norm_numpy(as64(x), eps=0.5)
    if affine:
        norm.weight.data, norm.bias.data = normal(10, 5), normal(11, 5)
        expected = expected * as64(norm.weight) + as64(norm.bias)
    np.testing.assert_allclose(norm(x).data, expected, rtol=1e-5, atol=1e-6)


def test_transformer_layer_passes_eps_to_both_norms_and_layer_norm_starts_as_the_identity_affine():
    """A third mutation audit: LayerNorm(dim) for LayerNorm(dim, eps) in either norm of a
    TransformerLayer passed (every test used the default eps), and so did a weight of 2s for the
    documented ones (every test set the affine parameters before use)."""
    layer = uu.TransformerLayer(8, 2, rng=np.random.default_rng(0), tau_attn=0.6, tau_mlp=0.4, eps=0.5)
    assert layer.attn_norm.eps == layer.mlp_norm.eps == 0.5
    norm = uu.LayerNorm(8, elementwise_affine=True)
    assert norm.weight.data.tolist() == [1.0] * 8 and norm.bias.data.tolist() == [0.0] * 8
