"""The mini-GPT of both families: shapes, errors, hooks, gradients (float64 finite differences), and
the scales at initialisation that make naive FP8 fail for the standard model and work for the unit one."""
import json
import math

import numpy as np
import pytest

from minifp8 import fp8
from minifp8 import functional as F
from minifp8.autograd import default_dtype, make_op
from minifp8.model import GPT, GPTConfig
from minifp8.testing import gradcheck

E5M2_MIN_NORMAL = 2.0 ** -14


def tiny(family, **overrides):
    settings = dict(vocab_size=7, block_size=6, n_layer=2, n_head=2, n_embd=8, family=family)
    settings.update(overrides)
    return GPT(GPTConfig(**settings), rng=np.random.default_rng(0))


def batch(vocab_size, shape, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab_size, shape), rng.integers(0, vocab_size, shape)


# ---- shapes, config and errors -------------------------------------------------------------------

@pytest.mark.parametrize("family", ["standard", "unit"])
def test_shapes_and_loss_at_init(family):
    model = tiny(family, vocab_size=11, block_size=8)
    ids, targets = batch(11, (3, 8))
    logits, loss = model(ids, targets)
    assert logits.shape == (3, 8, 11) and logits.dtype == np.float32
    assert loss.shape == () and loss.requires_grad
    # at init the prediction is close to uniform: the loss is close to ln(V) (small logits)
    assert abs(float(loss.data) - math.log(11)) < 0.1
    # the mean cross-entropy, from the logits, computed independently in float64
    z = logits.data.astype(np.float64).reshape(-1, 11)
    log_probs = z - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)) - z.max(1, keepdims=True)
    expected = -log_probs[np.arange(z.shape[0]), targets.reshape(-1)].mean()
    assert float(loss.data) == pytest.approx(expected, rel=1e-5)
    # shorter sequences work; no targets gives no loss
    logits, loss = model(ids[:, :5])
    assert logits.shape == (3, 5, 11) and loss is None


@pytest.mark.parametrize("family", ["standard", "unit"])
def test_causal(family):
    """Changing a later token never changes the logits at earlier positions."""
    model = tiny(family)
    ids, _ = batch(7, (2, 6))
    changed = ids.copy()
    changed[:, 4] = (changed[:, 4] + 1) % 7
    before, after = model(ids)[0].data, model(changed)[0].data
    np.testing.assert_array_equal(before[:, :4], after[:, :4])
    assert not np.allclose(before[:, 4:], after[:, 4:])


def test_parameters_and_determinism():
    standard, unit = tiny("standard"), tiny("unit")
    d, v, t, hidden = 8, 7, 6, 32
    per_block_standard = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * hidden + hidden) + (hidden * d + d)
    assert standard.num_parameters() == v * d + t * d + 2 * per_block_standard + 2 * d + d * v
    per_block_unit = d * 3 * d + d * d + d * hidden + hidden * d  # no biases, no norm gains
    assert unit.num_parameters() == v * d + t * d + 2 * per_block_unit + d * v
    # the same seed gives the same weights; another seed others
    again = tiny("standard")
    for (name, p), (_, q) in zip(standard.named_parameters(), again.named_parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)
    other = GPT(GPTConfig(7, 6, 2, 2, 8), rng=np.random.default_rng(1))
    assert not np.array_equal(other.wte.weight.data, standard.wte.weight.data)
    # initial scales: GPT-2's 0.02 (residual projections 0.02/sqrt(2 n_layer)); unit: N(0, 1)
    big = GPT(GPTConfig(7, 6, 2, 2, 64), rng=np.random.default_rng(0))
    assert big.blocks[0].mlp.c_fc.weight.data.std() == pytest.approx(0.02, rel=0.05)
    assert big.blocks[0].mlp.c_proj.weight.data.std() == pytest.approx(0.01, rel=0.05)
    big_unit = GPT(GPTConfig(7, 6, 2, 2, 64, family="unit"), rng=np.random.default_rng(0))
    assert big_unit.blocks[0].mlp.linear_1.weight.data.std() == pytest.approx(1.0, rel=0.05)


def _recorded_tensors(monkeypatch, model, ids):
    """The tensors the model passes to `fp8.track` by name (first occurrence), from one forward pass."""
    import minifp8.model as model_module

    seen = {}

    def record(name, x):
        seen.setdefault(name, x)
        return x

    monkeypatch.setattr(model_module, "track", record)
    logits, _ = model(ids)
    return seen, logits


@pytest.mark.parametrize("family", ["standard", "unit"])
def test_embedding_rows_and_readout_by_hand(family, monkeypatch):
    """Position t reads row t of wpe (whatever the sequence length), token ids their rows of wte; the unit
    family scales the sum of its two unit-variance embeddings by 1/sqrt(2) (variance 2 -> 1) and its
    readout by 1/fan_in (u-muP's readout multiplier); the standard model's head is a plain ln_f @ W^T."""
    model = tiny(family)
    ids, _ = batch(7, (2, 5))  # shorter than block_size=6: positions 0..4, not the last rows
    seen, logits = _recorded_tensors(monkeypatch, model, ids)
    wte, wpe = model.wte.weight.data.astype(np.float64), model.wpe.weight.data.astype(np.float64)
    expected = wte[ids] + wpe[np.arange(5)][None]
    if family == "unit":
        expected = expected / math.sqrt(2.0)
    np.testing.assert_allclose(seen["embedding"].data, expected, rtol=1e-6, atol=1e-7)
    head = seen["ln_f"].data.astype(np.float64) @ model.lm_head.weight.data.astype(np.float64).T
    if family == "unit":
        head = head / 8  # fan_in = n_embd
    np.testing.assert_allclose(logits.data, head, rtol=1e-5, atol=1e-7)


def test_unit_residual_taus_follow_the_u_mup_rule():
    """u-muP's rule with its default hyperparameters (alpha_attn = alpha_mlp = 1): before residual branch i
    (attention of block l is i = 2l, its MLP i = 2l + 1) the stream holds weight n_layer (the embedding) + i
    (one per branch so far), so tau_i = 1/sqrt(n_layer + i)."""
    model = tiny("unit", n_layer=3)
    taus = [(block.tau_attn, block.tau_mlp) for block in model.blocks]
    expected = [(1 / math.sqrt(3 + 2 * layer), 1 / math.sqrt(3 + 2 * layer + 1)) for layer in range(3)]
    assert taus == [pytest.approx(pair, rel=1e-12) for pair in expected]


@pytest.mark.parametrize("family", ["standard", "unit"])
def test_every_random_weight_comes_from_the_given_generator(family):
    """Every randomly initialised parameter changes with the generator's seed (none is drawn from another
    generator); the constant ones (biases 0, norm gains 1) do not. Each has its documented std: GPT-2's
    0.02, 0.02/sqrt(2 n_layer) for the two projections into the residual stream; unit: N(0, 1)."""
    config = GPTConfig(vocab_size=40, block_size=32, n_layer=2, n_head=2, n_embd=64, family=family)
    first = dict(GPT(config, rng=np.random.default_rng(0)).named_parameters())
    second = dict(GPT(config, rng=np.random.default_rng(1)).named_parameters())
    for name, p in first.items():
        constant = p.ndim == 1
        assert np.array_equal(p.data, second[name].data) == constant, name
        if constant:
            continue
        if family == "unit":
            std = 1.0
        else:
            std = 0.02 / math.sqrt(2 * 2) if name.endswith("c_proj.weight") else 0.02
        assert float(p.data.std()) == pytest.approx(std, rel=0.1), name


@pytest.mark.parametrize("arguments, overrides, error, message", [
    (("7", 6), {}, TypeError, "GPTConfig: vocab_size must be an int, got str '7'"),
    ((7.0, 6), {}, TypeError, "GPTConfig: vocab_size must be an int, got float 7.0"),
    ((7, True), {}, TypeError, "GPTConfig: block_size must be an int, got bool True"),
    ((7, 6), {"n_head": 2.0}, TypeError, "GPTConfig: n_head must be an int, got float 2.0"),
    ((7, 6), {"family": ["unit"]}, TypeError, r"GPTConfig: family must be a str, one of standard, unit; got list \['unit'\]"),
    ((7, 6), {"family": None}, TypeError, "GPTConfig: family must be a str"),
    ((1, 6), {}, ValueError, r"GPTConfig: vocab_size must be >= 2, got 1"),
    ((0, 6), {}, ValueError, r"GPTConfig: vocab_size must be >= 2, got 0"),  # (it said >= 1 here)
    ((1, 6), {"family": "unit"}, ValueError, "GPTConfig: vocab_size must be >= 2"),
    ((7, 0), {}, ValueError, "GPTConfig: block_size must be >= 1, got 0"),
], ids=["vocab-str", "vocab-float", "block-bool", "heads-float", "family-list", "family-none", "one-token",
        "no-token", "one-token-unit", "block-0"])
def test_config_type_and_range_errors(arguments, overrides, error, message):
    """A wrong type is a TypeError (as for bias, dropout and the mults), a value out of range a ValueError;
    one token is refused up front (the unit cross-entropy would fail only at the first loss)."""
    with pytest.raises(error, match=message):
        GPTConfig(*arguments, **overrides)


def test_bad_config_and_inputs():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(7, 6, n_head=3, n_embd=8)
    with pytest.raises(ValueError, match="family"):
        GPTConfig(7, 6, family="fp8")
    with pytest.raises(ValueError, match="n_layer"):
        GPTConfig(7, 6, n_layer=0)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(7, 6, dropout=1.0)
    with pytest.raises(TypeError, match="GPTConfig"):
        GPT({"vocab_size": 7}, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng"):
        GPT(GPTConfig(7, 6), rng=0)
    model = tiny("standard")
    with pytest.raises(ValueError, match="block_size=6"):
        model(np.zeros((1, 7), dtype=np.int64))
    with pytest.raises(TypeError, match="integer array"):
        model(np.zeros((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):  # (a shape is a value: it was a TypeError)
        model(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="lr"):
        model.optimizer_groups(0.0)


def test_round_trip_config():
    config = GPTConfig(7, 6, family="unit", dropout=0.1)
    assert GPTConfig(**config.to_dict()) == config


def test_config_from_numpy_numbers_is_plain_python_for_json():
    config = GPTConfig(np.int64(7), np.int32(6), n_embd=np.int64(8), n_head=np.int64(2), dropout=np.float32(0.25),
                       attention_mult=np.float32(2.0), bias=np.bool_(False))
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    assert config == GPTConfig(7, 6, n_embd=8, n_head=2, dropout=0.25, attention_mult=2.0, bias=False)


@pytest.mark.parametrize("overrides, error, message", [
    ({"attention_mult": float("inf")}, ValueError, "attention_mult must be a finite number > 0, got inf"),
    ({"mlp_mult": "2"}, TypeError, "mlp_mult must be a real number, got str"),
    ({"dropout": "0.1"}, TypeError, "dropout must be a real number, got str"),
    ({"bias": "no"}, TypeError, "bias must be a bool, got str 'no'"),
])
def test_config_rejects_wrongly_typed_or_infinite_values(overrides, error, message):
    with pytest.raises(error, match=message):
        GPTConfig(7, 6, **overrides)


def test_optimizer_groups_checks_its_arguments():
    model = tiny("standard")
    assert all(group["lr"] == pytest.approx(0.1) for group in model.optimizer_groups(np.float32(0.1)))
    with pytest.raises(ValueError, match="weight_decay must be >= 0 and finite, got inf"):
        model.optimizer_groups(0.1, weight_decay=float("inf"))
    with pytest.raises(TypeError, match="weight_decay must be a real number, got str"):
        model.optimizer_groups(0.1, weight_decay="0.1")


# ---- hooks and optimizer groups --------------------------------------------------------------------

@pytest.mark.parametrize("family", ["standard", "unit"])
def test_apply_recipe_finds_every_gemm_and_attention(family):
    model = tiny(family, n_layer=3)
    state = fp8.apply_recipe(model, "current")
    kinds = [point.kind for point in state.points.values()]
    assert kinds.count("gemm") == 4 * 3 + 1 and kinds.count("attention") == 3
    assert "lm_head" in state.points
    ids, targets = batch(7, (2, 6))
    _, loss = model(ids, targets)
    loss.backward()
    assert all({"x", "w", "grad"} <= set(point.stats) for point in state.points.values() if point.kind == "gemm")
    assert all({"q", "k", "v", "grad"} <= set(point.stats) for point in state.points.values()
               if point.kind == "attention")
    # the hooks are not parameters: state_dict is unchanged by a recipe
    assert list(model.state_dict()) == list(tiny(family, n_layer=3).state_dict())


def test_optimizer_groups():
    standard = tiny("standard")
    groups = standard.optimizer_groups(1e-3, weight_decay=0.1)
    assert all(group["lr"] == 1e-3 for group in groups)
    decayed = {id(p) for group in groups if group["weight_decay"] for p in group["params"]}
    assert decayed == {id(p) for p in standard.parameters() if p.ndim == 2}
    unit = tiny("unit", n_embd=16, n_layer=4)
    lr = {name: group["lr"] for (name, _), group in zip(unit.named_parameters(), unit.optimizer_groups(0.5))}
    # u-muP (unit_scaling.optim.lr_scale_func_adam): embeddings lr/sqrt(width), hidden lr/sqrt(fan_in)/sqrt(depth),
    # readout lr
    assert lr["wte.weight"] == pytest.approx(0.5 / 4)
    assert lr["blocks.1.mlp.linear_1.weight"] == pytest.approx(0.5 / 4 / 2)
    assert lr["blocks.1.mlp.linear_2.weight"] == pytest.approx(0.5 / 8 / 2)
    assert lr["lm_head.weight"] == 0.5



def first_adam_step_change(width, name, lr, rng):
    """The RMS change of a unit-scaled layer's output after one AdamW step at ``lr`` (a sign step)
    from N(0, 1) weights, with 4 unit-variance inputs and output gradients (a batch much smaller than
    the width, muP's regime: a batch of 256 spreads the step over more directions as width grows)."""
    from minifp8 import optim, uu
    from minifp8.autograd import Tensor
    if name == "wte.weight":
        layer, x = uu.Embedding(64, width, rng=rng), rng.integers(0, 64, size=(4,))
    else:
        kind = uu.LinearReadout if name == "lm_head.weight" else uu.Linear
        layer = kind(width, width, rng=rng)
        x = Tensor(rng.standard_normal((4, width)).astype(np.float32))
    before = layer(x)
    before.backward(rng.standard_normal(before.shape).astype(np.float32))
    optim.AdamW([{"params": [layer.weight], "lr": lr}], weight_decay=0.0).step()
    return float(np.sqrt(np.mean((layer(x).data - before.data) ** 2)))


def test_optimizer_groups_width_rule_is_what_the_docstring_says():
    """Under u-muP's Adam rule a first step moves a hidden layer's and the readout's output by about
    the same amount at width 64 and 256, and an embedding's by half as much (its lr / sqrt(width) is
    u-muP's empirical rule, not muP's): what GPT.optimizer_groups' docstring and tutorial 6 say."""
    changes = {}
    for width in (64, 256):
        unit = tiny("unit", n_embd=width, n_head=4, n_layer=1)
        lr = {name: group["lr"] for (name, _), group in zip(unit.named_parameters(), unit.optimizer_groups(1e-2))}
        for name in ("blocks.0.mlp.linear_1.weight", "lm_head.weight", "wte.weight"):
            changes[name, width] = first_adam_step_change(width, name, lr[name], np.random.default_rng(0))
    ratio = {name: changes[name, 256] / changes[name, 64] for name, _ in changes}
    assert 0.8 < ratio["blocks.0.mlp.linear_1.weight"] < 1.25, ratio
    assert 0.8 < ratio["lm_head.weight"] < 1.25, ratio
    assert ratio["wte.weight"] == pytest.approx(0.5, rel=0.02), ratio


# ---- gradients ----------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [{}, {"bias": False, "n_layer": 1}, {"dropout": 0.3, "n_layer": 1}],
                         ids=["bias", "no-bias", "dropout"])
def test_gradcheck_standard_gpt(overrides):
    """Every parameter's gradient against float64 central differences (the whole model)."""
    model = tiny("standard", n_embd=4, block_size=4, **overrides)
    ids, targets = batch(7, (2, 4))
    names, params = zip(*model.named_parameters())
    # LayerNorm gains start at 1 and biases at 0: perturb them so that no gradient is trivially symmetric
    rng = np.random.default_rng(5)
    for p in params:
        p.data = p.data + rng.normal(0.0, 0.1, p.shape).astype(np.float32)
    # q and k 10x larger, so that the attention logits are far from 0 (an audit found dq or dk off by 1%
    # passed at the 0.02 initialisation, whose near-uniform attention hides them)
    for name, p in zip(names, params):
        if name.endswith("c_attn.weight"):
            p.data = p.data * np.float32(10)
    masks = model.drop.rng  # the Generator every dropout draws its masks from
    state = masks.bit_generator.state

    def loss(*_):  # every evaluation replays the same masks
        masks.bit_generator.state = state
        return model(ids, targets)[1]

    gradcheck(loss, *params, names=list(names))
    if overrides.get("dropout"):  # the masks do drop something
        masks.bit_generator.state = state
        assert model(ids, targets)[1].item() != model.eval()(ids, targets)[1].item()


def unit_gradient_factors(config, n_tokens):
    """The closed-form factor ``c`` of each parameter of a unit GPT: its unit-scaled gradient is ``c`` times
    the true gradient of the mean loss. Derived from the documented scale rules, not from the model's code.

    The rule (`minifp8.unit`'s module docstring; Blake et al. 2023, arXiv:2303.11257, the scaled op): a
    ``scale_fwd(x, a)`` multiplies the value by ``a`` and passes the gradient unchanged, so the true gradient
    below it carries the ``a`` that the unit backward leaves out; a ``scale_bwd(x, b)`` multiplies only the
    gradient. Walking from the loss down, the factor is multiplied by ``b`` at every ``scale_bwd`` and
    divided by ``a`` at every ``scale_fwd``. Each parameter has one path here, or paths of one factor (the
    collinearity check in the test confirms it), so each has one ``c``.
    """
    V, d, N = config.vocab_size, config.n_embd, n_tokens
    # U.cross_entropy: the logit gradient is (softmax - onehot) * V / sqrt(V - 1), "not divided by N";
    # the true gradient of the mean loss is divided by N
    logits = N * V / math.sqrt(V - 1)
    # U.linear_readout, unconstrained: output * fan_in^-1 (fan_in = d), grad x * fan_out^-1/2 (fan_out = V),
    # grad weight * batch^-1/2 (batch = the N rows)
    factors = {"lm_head.weight": logits / d ** -1.0 * N ** -0.5}
    stream = logits / d ** -1.0 * V ** -0.5
    # ln_f: U.layer_norm without parameters, "no scale". Each layer maps the stream's factor to itself: the
    # skip path has U.residual_add's forward weight 1/sqrt(1 + tau^2) and U.residual_split's equal backward
    # one; the branch has tau/sqrt(1 + tau^2) forward (residual_add) at its output and the same backward
    # (residual_split) at its input, and is neutral in between (below). So inside the branch the factor is
    # the stream's divided by tau/sqrt(1 + tau^2), with tau_i = 1/sqrt(n_layer + i) for branch i
    # (uu.residual_taus with its defaults; u-muP, arXiv:2407.17465).
    for layer in range(config.n_layer):
        for kind, index in (("attn", 2 * layer), ("mlp", 2 * layer + 1)):
            tau = 1.0 / math.sqrt(config.n_layer + index)
            # the layer's U.dropout on the branch: sqrt(1 - p) forward and backward (neutral)
            branch = stream / (tau / math.sqrt(1.0 + tau ** 2))
            block = f"blocks.{layer}.{kind}."
            if kind == "attn":
                # linear_o: U.linear, output fan_in^-1/2 = d^-1/2, grad weight * N^-1/2 (never constrained)
                factors[block + "linear_o.weight"] = branch / d ** -0.5 * N ** -0.5
                # its grad x is tied to its output scale (to_output_scale): neutral; U.scaled_dot_product_attention
                # applies one scale to the output and to the q, k and v gradients: neutral
                qkv = branch / d ** -0.5 * d ** -0.5
                factors[block + "linear_qkv.weight"] = qkv / d ** -0.5 * N ** -0.5
            else:
                # uu.MLP: unconstrained linears, hidden width 4d; linear_2's output (4d)^-1/2, grad x d^-1/2
                factors[block + "linear_2.weight"] = branch / (4 * d) ** -0.5 * N ** -0.5
                # U.gelu ties its grad x to its output scale (to_output_scale): neutral
                hidden = branch / (4 * d) ** -0.5 * d ** -0.5
                factors[block + "linear_1.weight"] = hidden / d ** -0.5 * N ** -0.5
    # the model sums the two embeddings and scales the sum by 1/sqrt(2) with scale_fwd (forward only);
    # U.embedding: grad weight * sqrt(num_embeddings / ids.size), N ids for the tokens and N position ids
    # (the (batch, seq) positions of model.py's forward)
    embedding = stream / 2.0 ** -0.5
    factors["wte.weight"] = embedding * math.sqrt(V / N)
    factors["wpe.weight"] = embedding * math.sqrt(config.block_size / N)
    return factors


@pytest.mark.parametrize("overrides, shape", [
    ({"n_embd": 4, "block_size": 4}, (2, 4)),
    ({"n_embd": 4, "block_size": 5, "n_layer": 3, "attention_mult": 3.0, "mlp_mult": 0.4, "dropout": 0.3}, (3, 3)),
], ids=["plain", "mults-dropout-3-layers-short"])
def test_unit_gpt_gradients_are_scaled_true_gradients(overrides, shape):
    """Unit scaling changes each parameter's gradient by one constant factor, never its direction, and
    that factor is the one the documented scale rules give (`unit_gradient_factors`).

    The backward of a unit-scaled op is not the derivative of its forward (`minifp8.unit`'s module
    docstring), so a plain gradcheck does not apply. What the constraints guarantee (Blake et al. 2023,
    the cut-edge rule) is that each parameter tensor's gradient is the true gradient times a positive
    constant. Checked in float64: analytic unit-scaled gradient against central differences of the
    loss, one fitted factor per parameter tensor, compared with its closed form. The second case has
    mults (neutral by the rules: tied or one scale both ways), dropout in training mode (the masks
    replayed at every evaluation), three layers (three more taus) and 3 of 5 positions (wpe's factor
    counts the table's rows, not the positions used).
    """
    model = tiny("unit", **overrides)
    ids, targets = batch(7, shape)
    expected = unit_gradient_factors(model.config, ids.size)
    named = list(model.named_parameters())
    assert sorted(expected) == sorted(name for name, _ in named)
    saved = [(p, p.data) for _, p in named]
    masks = model.blocks[0].rng  # the Generator every dropout draws its masks from
    state = masks.bit_generator.state

    def loss():  # every evaluation replays the same masks
        masks.bit_generator.state = state
        return model(ids, targets)[1]

    eps = 1e-6
    try:
        with default_dtype(np.float64):
            for _, p in named:
                p.data = p.data.astype(np.float64)
                p.grad = None
            loss().backward()
            for name, p in named:
                analytic = p.grad.reshape(-1)
                flat = p.data.reshape(-1)
                numeric = np.empty_like(analytic)
                for i in range(flat.size):
                    original = flat[i]
                    flat[i] = original + eps
                    plus = float(loss().data)
                    flat[i] = original - eps
                    minus = float(loss().data)
                    flat[i] = original
                    numeric[i] = (plus - minus) / (2 * eps)
                factor = float(analytic @ numeric / (numeric @ numeric))
                error = np.abs(analytic - factor * numeric).max() / np.abs(analytic).max()
                assert error < 1e-6, f"{name}: unit-scaled gradient is not a multiple of the true one ({error:.2g})"
                assert factor == pytest.approx(expected[name], rel=1e-6), name
        if model.config.dropout:  # the masks do drop something
            assert loss().item() != model.eval()(ids, targets)[1].item()
    finally:
        for p, data in saved:
            p.data, p.grad = data, None


# ---- an independent float64 NumPy GPT: the wiring of both families --------------------------------
# Written from the papers and the documented rules, not from the model's code: nanoGPT's model.py
# (Karpathy 2022) for the standard family, the u-muP rules of the minifp8.unit docstrings for the unit
# family. Parameters are read by their state_dict names (checked separately below).

def np_layer_norm(x, weight=None, bias=None, eps=1e-5):
    centred = x - x.mean(axis=-1, keepdims=True)
    y = centred / np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def np_gelu(x):
    """GPT-2's tanh approximation of GELU."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def np_linear(x, params, name):
    y = x @ params[f"{name}.weight"].T
    bias = params.get(f"{name}.bias")
    return y if bias is None else y + bias


def split_heads(x, n_head):
    """(batch, seq, n_embd) -> (batch, n_head, seq, head_dim): head h owns features h*head_dim..(h+1)*head_dim-1."""
    batch, seq, width = x.shape
    return x.reshape(batch, seq, n_head, width // n_head).transpose(0, 2, 1, 3)


def merge_heads(y):
    batch, n_head, seq, head_dim = y.shape
    return y.transpose(0, 2, 1, 3).reshape(batch, seq, n_head * head_dim)


def np_causal_attention(q, k, v, scale):
    """softmax(q k^T * scale) v, each position attending to itself and the positions before it."""
    seq = q.shape[-2]
    logits = np.where(np.tril(np.ones((seq, seq), dtype=bool)), q @ k.swapaxes(-1, -2) * scale, -np.inf)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True) @ v


def np_mean_cross_entropy(logits, targets):
    z = logits.reshape(-1, logits.shape[-1])
    z = z - z.max(axis=-1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -log_probs[np.arange(len(z)), targets.reshape(-1)].mean()


def reference_standard_gpt(params, config, ids, targets):
    """nanoGPT's forward pass in evaluation mode (no dropout): pre-norm blocks, GELU MLP, final norm."""
    seq = ids.shape[1]
    x = params["wte.weight"][ids] + params["wpe.weight"][:seq]
    for layer in range(config.n_layer):
        block = f"blocks.{layer}."
        h = np_layer_norm(x, params[block + "ln_1.weight"], params.get(block + "ln_1.bias"))
        q, k, v = (split_heads(t, config.n_head) for t in np.split(np_linear(h, params, block + "attn.c_attn"), 3, -1))
        y = np_causal_attention(q, k, v, scale=1.0 / math.sqrt(config.n_embd // config.n_head))
        x = x + np_linear(merge_heads(y), params, block + "attn.c_proj")
        h = np_layer_norm(x, params[block + "ln_2.weight"], params.get(block + "ln_2.bias"))
        x = x + np_linear(np_gelu(np_linear(h, params, block + "mlp.c_fc")), params, block + "mlp.c_proj")
    x = np_layer_norm(x, params["ln_f.weight"], params.get("ln_f.bias"))
    logits = x @ params["lm_head.weight"].T
    return logits, np_mean_cross_entropy(logits, targets)


def reference_unit_gpt(params, config, ids, targets):
    """The unit family's forward pass in evaluation mode, from u-muP's rules (minifp8.unit docstrings).

    Embeddings summed and scaled by 1/sqrt(2); linears ``* fan_in^-1/2``, the readout ``* 1/fan_in``;
    parameter-free layer norms; attention logits ``* attention_mult / head_dim`` and output
    ``/ interp(alpha; sqrt(ln(s)/s), 1)`` with alpha = 1/(1 + 4 head_dim / mult^2) (causal, s keys);
    ``gelu(mlp_mult h) / mlp_mult * interp(alpha; 2, sqrt(2/(1 - 1/pi)))`` with
    alpha = 1/(1 + 1/(4 mult^2)); each branch through evaluation-mode unit dropout (``* sqrt(1 - p)``)
    and added as ``(tau branch + stream) / sqrt(1 + tau^2)`` with tau_i = 1/sqrt(n_layer + i) for
    branch i = 0, 1, ... (attention even, MLP odd).
    """
    def interp(alpha, lower, upper):
        return lower ** (1.0 - alpha) * upper ** alpha

    width, n_layer, seq = config.n_embd, config.n_layer, ids.shape[1]
    head_dim = width // config.n_head
    attention_mult, mlp_mult = config.attention_mult, config.mlp_mult
    attention_scale = 1.0 / interp(1.0 / (1.0 + 4.0 * head_dim / attention_mult ** 2), math.sqrt(math.log(seq) / seq), 1.0)
    gelu_scale = interp(1.0 / (1.0 + 1.0 / (4.0 * mlp_mult ** 2)), 2.0, math.sqrt(2.0 / (1.0 - 1.0 / math.pi)))
    keep = math.sqrt(1.0 - config.dropout)

    def add_branch(x, branch, index):
        tau = 1.0 / math.sqrt(n_layer + index)
        return (tau * keep * branch + x) / math.sqrt(1.0 + tau ** 2)

    x = (params["wte.weight"][ids] + params["wpe.weight"][:seq]) / math.sqrt(2.0)
    for layer in range(n_layer):
        block = f"blocks.{layer}."
        qkv = np_layer_norm(x) @ params[block + "attn.linear_qkv.weight"].T / math.sqrt(width)
        q, k, v = (split_heads(t, config.n_head) for t in np.split(qkv, 3, axis=-1))
        y = np_causal_attention(q, k, v, scale=attention_mult / head_dim) * attention_scale
        x = add_branch(x, merge_heads(y) @ params[block + "attn.linear_o.weight"].T / math.sqrt(width), 2 * layer)
        hidden = np_layer_norm(x) @ params[block + "mlp.linear_1.weight"].T / math.sqrt(width)
        y = gelu_scale * np_gelu(mlp_mult * hidden) / mlp_mult
        x = add_branch(x, y @ params[block + "mlp.linear_2.weight"].T / math.sqrt(4 * width), 2 * layer + 1)
    logits = np_layer_norm(x) @ params["lm_head.weight"].T / width
    return logits, np_mean_cross_entropy(logits, targets)


def float64_parameters(model, noise=0.0, seed=3):
    """Make every parameter float64, plus N(0, noise^2) (LayerNorm gains and biases away from 1 and 0);
    return copies of the arrays by name."""
    rng = np.random.default_rng(seed)
    with default_dtype(np.float64):
        for _, p in model.named_parameters():
            p.data = p.data.astype(np.float64) + rng.normal(0.0, noise, p.shape)
    return {name: p.data.copy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_standard_gpt_matches_an_independent_numpy_gpt(bias):
    """Logits and loss to float64 rounding, and every parameter gradient against central differences of
    the NumPy reference: the wiring (head split, q/k/v order, GELU, pre-norm with ln_1 and ln_2, ln_f)
    is nanoGPT's. Weights are N(0, 0.3^2) away from their init, so attention and GELU are nonlinear."""
    config = GPTConfig(vocab_size=7, block_size=5, n_layer=2, n_head=2, n_embd=8, dropout=0.2, bias=bias)
    model = GPT(config, rng=np.random.default_rng(0)).eval()  # evaluation mode: dropout off
    params = float64_parameters(model, noise=0.3)
    ids, targets = batch(7, (2, 5))
    with default_dtype(np.float64):
        logits, loss = model(ids, targets)
        loss.backward()
    expected_logits, expected_loss = reference_standard_gpt(params, config, ids, targets)
    assert logits.dtype == np.float64 and np.abs(expected_logits).max() > 1.0
    np.testing.assert_allclose(logits.data, expected_logits, rtol=1e-12, atol=1e-12)
    assert float(loss.data) == pytest.approx(expected_loss, rel=1e-12)
    eps = 1e-6
    for name, p in model.named_parameters():
        flat, numeric = params[name].reshape(-1), np.empty(p.size)
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            plus = reference_standard_gpt(params, config, ids, targets)[1]
            flat[i] = original - eps
            minus = reference_standard_gpt(params, config, ids, targets)[1]
            flat[i] = original
            numeric[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(p.grad.reshape(-1), numeric, rtol=1e-6, atol=1e-8 * np.abs(numeric).max(),
                                   err_msg=name)


def test_unit_gpt_matches_an_independent_numpy_gpt():
    """Logits and loss of the unit family with attention_mult, mlp_mult (different, not 1) and dropout
    (evaluation mode: unit dropout keeps its sqrt(1 - p) scale) against the u-muP rules in NumPy: all
    three reach the layers where they belong."""
    config = GPTConfig(vocab_size=7, block_size=5, n_layer=2, n_head=2, n_embd=8, family="unit",
                       attention_mult=3.0, mlp_mult=0.4, dropout=0.3)
    model = GPT(config, rng=np.random.default_rng(0)).eval()
    params = float64_parameters(model)
    ids, targets = batch(7, (2, 5))
    with default_dtype(np.float64):
        logits, loss = model(ids, targets)
    expected_logits, expected_loss = reference_unit_gpt(params, config, ids, targets)
    assert logits.dtype == np.float64
    np.testing.assert_allclose(logits.data, expected_logits, rtol=1e-12, atol=1e-13)
    assert float(loss.data) == pytest.approx(expected_loss, rel=1e-12)
    # in training mode the dropout masks act: the output is not the evaluation-mode one
    assert not np.allclose(model.train()(ids)[0].data, logits.data)


def test_parameter_names_and_shapes_with_and_without_bias():
    """nanoGPT's parameter names; bias=False removes every bias (linears and layer norms), and only those."""
    d, v, t = 8, 7, 6

    def expected(bias):
        names = [("wte.weight", (v, d)), ("wpe.weight", (t, d))]
        for layer in range(2):
            block = f"blocks.{layer}."
            for name, shape in (("ln_1", (d,)), ("attn.c_attn", (3 * d, d)), ("attn.c_proj", (d, d)),
                                ("ln_2", (d,)), ("mlp.c_fc", (4 * d, d)), ("mlp.c_proj", (d, 4 * d))):
                names.append((f"{block}{name}.weight", shape))
                if bias:
                    names.append((f"{block}{name}.bias", shape[:1]))
        names += [("ln_f.weight", (d,))] + ([("ln_f.bias", (d,))] if bias else []) + [("lm_head.weight", (v, d))]
        return names

    for bias in (True, False):
        model = tiny("standard", bias=bias)
        assert [(name, p.shape) for name, p in model.named_parameters()] == expected(bias)
    unit = tiny("unit")
    assert [name for name, _ in unit.named_parameters()] == ["wte.weight", "wpe.weight"] + [
        f"blocks.{layer}.{name}.weight" for layer in range(2)
        for name in ("attn.linear_qkv", "attn.linear_o", "mlp.linear_1", "mlp.linear_2")] + ["lm_head.weight"]


def test_docstring_examples_run():
    """Every ``>>>`` example in the package's modules runs and shows what it says (doctest)."""
    import doctest
    import importlib
    from pathlib import Path

    import minifp8

    tested = {}
    for path in sorted(Path(minifp8.__file__).parent.glob("*.py")):
        if ">>>" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(f"minifp8.{path.stem}")
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
        assert result.failed == 0, f"{path.name}: {result.failed} of {result.attempted} examples failed (output above)"
        tested[path.stem] = result.attempted
    assert {"data", "formats", "model"} <= set(tested) and all(tested.values()), tested


# ---- scales at initialisation (issue 5, must-show 3) ------------------------------------------------

def _record_cast_tensors(model):
    """Hooks that track exactly the tensors FP8 casts see: each GEMM's input x and output gradient,
    each attention core's q, k, v and output gradient (as `fp8.apply_recipe` would cast them)."""
    for name, module in model.named_modules():
        if hasattr(module, "gemm"):
            module.gemm = lambda x, w, b=None, name=name: fp8.track(
                f"{name}:gemm_out", F.linear(fp8.track(f"{name}:gemm_x", x), w, b))
        if hasattr(module, "attention_core"):
            core = module.attention_core
            module.attention_core = lambda q, k, v, causal, name=name, core=core: fp8.track(
                f"{name}:out", core(fp8.track(f"{name}:q", q), fp8.track(f"{name}:k", k), fp8.track(f"{name}:v", v), causal))


def _scales_at_init(family):
    config = GPTConfig(vocab_size=14, block_size=32, n_layer=2, n_head=4, n_embd=64, family=family)
    model = GPT(config, rng=np.random.default_rng(0))
    _record_cast_tensors(model)
    ids, targets = batch(14, (16, 32))
    with fp8.ScaleTracker() as tracker:
        model(ids, targets)[1].backward()
    return model, tracker.records


def test_unit_gpt_is_unit_scaled_at_init():
    """At initialisation the unit GPT's tensors have the scales its design gives them: exactly where a rule
    makes a scale exact, about 1 where only the weights' sampling moves it, and the documented deviations.

    * Layer-norm outputs (``ln_f`` and the inputs x of the qkv, first-MLP and readout GEMMs): std 1 to
      within eps (a parameter-free layer norm gives every row mean 0 and variance var / (var + eps)).
    * The logits: std fan_in^-1/2, u-muP's readout multiplier 1/fan_in by design (`U.linear_readout`): a
      logit is ``x . w / fan_in`` with ``|x|^2 = fan_in`` (layer norm) and w ~ N(0, 1), so its variance is
      1/fan_in, up to the sampling of the readout weights (10%).
    * The logits' gradient, the start of the backward pass: std 1. At a uniform softmax each row of
      ``softmax - onehot`` has mean 0 and sum of squares (V - 1)/V, so ``* V / sqrt(V - 1)``
      (`U.cross_entropy`) gives V / V = 1 per element; the logits' std fan_in^-1/2 moves it at second
      order (and through the mean of p[target] - 1/V over the tokens), well under 1/fan_in.
    * The weights: N(0, 1) draws, std 1 within five standard errors (1/sqrt(2 n) for n draws).
    * The embedding (two N(0, 1) tables summed, then ``* 1/sqrt(2)``) and the outputs of the unit linears
      that read a layer norm (q, k, v, the MLP's hidden layer: rows of norm^2 fan_in times N(0, 1) weights
      ``* fan_in^-1/2``, `U.linear`): std 1 up to the weights' sampling (10%).
    * The gradients of q and k at the attention input: by design well below 1, 0.1-0.2 at this width per
      head (tutorial 6; near-flat attention passes little gradient to them,
      `U.scaled_dot_product_attention`); bounded within a factor 2 of that band, not unit.
    * Everything else, every tensor an FP8 cast sees and every weight gradient, forward and backward: in
      [0.25, 4] (tutorial 6's claim), which holds the documented drifts (the attention output's growth
      with depth, the MLP's ~1.15 from GELU's mean).

    Left out: the raw GEMM results inside ``U.linear`` (``:gemm_out`` forward, ``:gemm_x`` backward: the
    ops' scale factors are applied to them next). How each weight gradient relates to the true gradient
    is checked exactly by `test_unit_gpt_gradients_are_scaled_true_gradients`.
    """
    model, records = _scales_at_init("unit")
    fan_in = model.config.n_embd

    def is_qk(name):  # q and k at the attention input, recorded twice: by the cast-point wrapper (":q") and
        return name.endswith((":q", ":k")) or name.split("#")[0] in ("q", "k")  # the model ("q", "q#2")

    normed = [name for name in records if name == "ln_f" or name.endswith(
        ("linear_qkv:gemm_x", "linear_1:gemm_x", "lm_head:gemm_x"))]
    assert len(normed) == 6
    for name in normed:
        assert records[name].forward_std == pytest.approx(1.0, abs=1e-3), name
    assert records["logits"].forward_std == pytest.approx(fan_in ** -0.5, rel=0.1)
    assert records["logits"].backward_std == pytest.approx(1.0, abs=1.0 / fan_in)
    unit_linear_outputs = [name for name in records if name.split("#")[0] in ("q", "k", "v", "mlp_hidden")]
    assert len(unit_linear_outputs) == 8
    for name in ["embedding"] + unit_linear_outputs:
        assert records[name].forward_std == pytest.approx(1.0, abs=0.1), name
    for name, p in model.named_parameters():
        assert float(p.data.std()) == pytest.approx(1.0, abs=5 / math.sqrt(2 * p.size)), name
    qk_grads = {name: record.backward_std for name, record in records.items() if is_qk(name)}
    assert len(qk_grads) == 8
    assert all(0.1 / 2 <= std <= 0.2 * 2 for std in qk_grads.values()), qk_grads

    checked = []
    for name, record in records.items():
        if not name.endswith(":gemm_out") and name != "logits":
            checked.append((name, "forward", record.forward_std))
        if not (name.endswith(":gemm_x") or is_qk(name)):
            checked.append((name, "backward", record.backward_std))
    for name, p in model.named_parameters():
        checked += [(name, "weight", float(p.data.std())), (name, "weight gradient", float(p.grad.std()))]
    assert len(checked) > 60
    bad = [(name, kind, std) for name, kind, std in checked if not 0.25 <= std <= 4]
    assert not bad, bad


def test_standard_gpt_gradients_fall_below_e5m2_normal_range():
    """The same GPT with GPT-2's initialisation and a mean loss over 512 tokens: the output gradients
    of the attention input projections (cast to E5M2) and the q/k gradients have std below E5M2's
    smallest normal 2^-14, the attention scores' gradients even below its smallest subnormal 2^-16."""
    model, records = _scales_at_init("standard")
    for layer in range(2):
        qkv = records[f"blocks.{layer}.attn.c_attn:gemm_out"]
        attention = records[f"blocks.{layer}.attn:q"], records[f"blocks.{layer}.attn:k"]
        assert qkv.backward_std < E5M2_MIN_NORMAL
        assert all(r.backward_std < 2.0 ** -16 for r in attention)
    # and every gradient that reaches a GEMM output is far below the unit model's (~1)
    assert max(r.backward_std for name, r in records.items() if name.endswith(":gemm_out")) < 2.0 ** -8


@pytest.mark.parametrize("family", ["standard", "unit"])
def test_center_lm_head_moves_only_what_the_softmax_ignores(family):
    """The mean of the LM head's rows is a direction the softmax ignores: removing it leaves the
    loss as it was, to float32 rounding of the logits, and keeps every difference between rows.
    An exact logit gradient never moves it (the weight gradient's rows sum to zero, to rounding),
    while an E5M2 cast of that gradient breaks the sums."""
    model = tiny(family)
    ids, targets = batch(7, (4, 6))
    rng = np.random.default_rng(3)
    weight = model.lm_head.weight.data
    weight += (rng.standard_normal(weight.shape[1]) * 4 * np.abs(weight).max()).astype(weight.dtype)
    before, rows = float(model(ids, targets)[1].data), weight.copy()
    stale = model(ids, targets)[1]
    model.center_lm_head()
    assert model.lm_head.weight.data is weight  # (in place: the optimizer holds the array)
    with pytest.raises(RuntimeError, match="changed in place after the forward pass"):  # (it bumps the version)
        stale.backward()
    assert np.abs(weight.mean(axis=0)).max() <= 1e-6 * np.abs(rows).max()
    np.testing.assert_allclose(weight - weight[0], rows - rows[0], atol=1e-6 * np.abs(rows).max())
    assert math.isclose(float(model(ids, targets)[1].data), before, rel_tol=1e-6)
    seen = {}

    def gemm(x, w, b=None):  # records the logits' gradient
        out = F.linear(x, w, b)
        return make_op(out.data, (out,), lambda g: (seen.setdefault("grad", g),), "record")

    model.lm_head.gemm = gemm
    model(ids, targets)[1].backward()
    grad = seen["grad"].reshape(-1, 7).astype(np.float64)
    assert np.abs(grad.sum(axis=1)).max() <= 1e-6 * np.abs(grad).sum(axis=1).max()
    cast, _ = fp8.fake_quantize(grad.astype(np.float32), "current", "E5M2")
    assert np.abs(cast.astype(np.float64).sum(axis=1)).max() > 1e-3 * np.abs(grad).sum(axis=1).max()


def test_both_families_track_the_same_tensors():
    """The unit-scaled layers call `fp8.track` where the standard model does, so scale plots line up."""
    names = {}
    for family in ("standard", "unit"):
        config = GPTConfig(vocab_size=14, block_size=8, n_layer=2, n_head=2, n_embd=16, family=family)
        model = GPT(config, rng=np.random.default_rng(0))
        ids, targets = batch(14, (2, 8))
        with fp8.ScaleTracker() as tracker:
            model(ids, targets)[1].backward()
        names[family] = list(tracker.records)
        assert all(record.backward_std is not None for record in tracker.records.values())
    assert names["unit"] == names["standard"]
    assert {"q", "k#2", "attention", "mlp_hidden#2", "logits"} <= set(names["unit"])


@pytest.mark.parametrize("family", ["standard", "unit"])
def test_the_rows_of_a_batch_are_independent(family):
    """Permuting a batch's rows permutes the logits, bit for bit, and a row run alone gives its logits to
    float32 rounding (a GEMM over fewer rows may sum in another order): nothing mixes the sequences of a
    batch (a review found no test of it)."""
    model = tiny(family)
    ids, _ = batch(7, (5, 6), seed=3)
    order = np.array([3, 0, 4, 1, 2])
    logits = model(ids)[0].data
    assert np.array_equal(model(ids[order])[0].data, logits[order])
    alone = model(ids[2:3])[0].data
    np.testing.assert_allclose(alone[0], logits[2], rtol=1e-5, atol=1e-6)
