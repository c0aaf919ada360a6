"""minifp8.uu: shapes, N(0, 1) init, parameter names, the u-muP residual tau rule, the gemm and
attention_core hooks of the FP8 integration contract, and unit scale through a stack at init."""
import functools
import math

import numpy as np
import pytest

import minifp8.functional as F
import minifp8.unit as U
import minifp8.uu as uu
from minifp8.autograd import Tensor


def rng(seed=0):
    return np.random.default_rng(seed)


def normal(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


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
    y = with_bias(x)
    assert y.shape == (2, 7, 3)
    np.testing.assert_array_equal(y.data, U.linear(x, with_bias.weight, with_bias.bias).data)
    unconstrained = uu.Linear(5, 3, rng=rng(1), constraint=None)
    np.testing.assert_array_equal(unconstrained(x).data, U.linear(x, unconstrained.weight, constraint=None).data)


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
    x = Tensor(normal(6, 3, 8))
    np.testing.assert_array_equal(norm(x).data, F.layer_norm(x).data)
    np.testing.assert_array_equal(affine(x).data, F.layer_norm(x, affine.weight, affine.bias).data)


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


def test_mhsa_matches_the_unit_ops_written_out():
    attention = uu.MHSA(12, 3, rng=rng(2), mult=0.5, causal=True)
    x = Tensor(normal(3, 2, 5, 12))
    qkv = U.linear(x, attention.linear_qkv.weight).data
    heads = [qkv[..., i * 12:(i + 1) * 12].reshape(2, 5, 3, 4).transpose(0, 2, 1, 3) for i in range(3)]
    core = U.scaled_dot_product_attention(*(Tensor(h) for h in heads), causal=True, mult=0.5).data
    expected = U.linear(Tensor(core.transpose(0, 2, 1, 3).reshape(2, 5, 12)), attention.linear_o.weight).data
    np.testing.assert_allclose(attention(x).data, expected, rtol=1e-5, atol=1e-6)


def test_mlp_matches_the_unit_ops_written_out():
    mlp = uu.MLP(6, hidden_multiplier=2, rng=rng(4), mult=2.0)
    x = Tensor(normal(5, 3, 6))
    hidden = U.linear(x, mlp.linear_1.weight, constraint=None)
    expected = U.linear(U.gelu(hidden, mult=2.0), mlp.linear_2.weight, constraint=None)
    np.testing.assert_array_equal(mlp(x).data, expected.data)


def test_dropout_modes():
    attention = uu.MHSA(8, 2, rng=rng(0), dropout=0.5)
    x = Tensor(normal(1, 2, 3, 8))
    attention.eval()
    plain = uu.MHSA(8, 2, rng=rng(0))
    # evaluation: no mask, the unit-scaled dropout's sqrt(1 - p), as U.dropout
    np.testing.assert_allclose(attention(x).data, math.sqrt(0.5) * plain(x).data, rtol=1e-6)
    attention.train()
    assert not np.allclose(attention(x).data, math.sqrt(0.5) * plain(x).data)


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
    for i, activation in enumerate(activations):
        assert 0.25 <= activation.data.std() <= 4, f"activation {i}: std {activation.data.std()}"
        assert 0.25 <= activation.grad.std() <= 4, f"gradient {i}: std {activation.grad.std()}"
    for layer in layers:
        for name, p in layer.named_parameters():
            assert 0.25 <= p.grad.std() <= 4, f"{name}: grad std {p.grad.std()}"


# ---- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda: uu.Linear(4, 4, rng=rng(), constraint="gmaen"), ValueError,
     r"unknown constraint .*None, 'to_output_scale', 'gmean'"),
    (lambda: uu.LinearReadout(4, 4, rng=rng(), constraint="nope"), ValueError, "unknown constraint"),
    (lambda: uu.Linear(4, 4, rng=None), TypeError, "Generator"),
    (lambda: uu.Linear(0, 4, rng=rng()), ValueError, "in_features"),
    (lambda: uu.Embedding(10, 4, rng=1), TypeError, "Generator"),
    (lambda: uu.MHSA(10, 3, rng=rng()), ValueError, "multiple of heads"),
    (lambda: uu.MHSA(12, 3, rng=rng(), mult=0.0), ValueError, "mult"),
    (lambda: uu.MHSA(12, 3, rng=rng())(Tensor(np.zeros((2, 12), np.float32))), ValueError, "batch, seq"),
    (lambda: uu.TransformerLayer(8, 2, rng=rng(), tau_attn=0.0, tau_mlp=0.5), ValueError, "tau_attn"),
    (lambda: uu.TransformerLayer(8, 2, rng=rng(), tau_attn=0.5, tau_mlp=-1.0), ValueError, "tau_mlp"),
    (lambda: uu.residual_taus(0), ValueError, "n_layer"),
    (lambda: uu.residual_taus(2, residual_mult=0.0), ValueError, "residual_mult"),
    (lambda: uu.residual_taus(2, residual_attn_ratio=-1.0), ValueError, "residual_attn_ratio"),
])
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
