"""minifp8.nn and minifp8.optim: module gradients, parameter discovery, state round trips, the
published optimizer equations, schedules and determinism."""
import copy
import math

import numpy as np
import pytest

import minifp8.functional as F
from minifp8 import fp8lm, nn, optim
from minifp8.autograd import Tensor, default_dtype
from minifp8.testing import gradcheck


def rng(seed=0):
    return np.random.default_rng(seed)


def inputs(*shape, seed=1):
    return Tensor(rng(seed).standard_normal(shape), requires_grad=True)


# ---- modules: gradients ----------------------------------------------------------------------------

def check_module(module, *args):
    """gradcheck of a module with respect to its inputs and all its parameters."""
    params = module.parameters()
    count = len(args)
    report = gradcheck(lambda *t: module(*t[:count]), *args, *params,
                       names=[f"arg {i}" for i in range(count)] + [n for n, _ in module.named_parameters()])
    assert report.passed and len(report.inputs) == sum(isinstance(a, Tensor) and a.requires_grad for a in args) + len(params)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_module_gradcheck(bias):
    check_module(nn.Linear(4, 3, bias=bias, rng=rng()), inputs(2, 5, 4))


def test_embedding_layernorm_dropout_modules_gradcheck():
    check_module(nn.Embedding(7, 3, rng=rng()), np.array([[1, 6, 1], [0, 0, 2]]))
    norm = nn.LayerNorm(5)
    norm.weight.data[:] = rng(2).standard_normal(5)  # away from the trivial ones/zeros
    norm.bias.data[:] = rng(3).standard_normal(5)
    check_module(norm, inputs(3, 5))
    check_module(nn.LayerNorm(5, bias=False), inputs(3, 5))
    check_module(nn.LayerNorm(5, elementwise_affine=False), inputs(3, 5))

    class FixedDropout(nn.Module):  # a fresh generator per call, so that fn is deterministic
        def forward(self, x):
            return nn.Dropout(0.3, rng=rng(5))(x)

    check_module(FixedDropout(), inputs(4, 5))


def test_layernorm_module_uses_its_eps():
    # eps = 0.5 against variances ~0.25: the result is far from the default eps's
    x = Tensor(0.5 * rng(4).standard_normal((3, 5)))
    data = x.data.astype(np.float64)
    centred = data - data.mean(axis=1, keepdims=True)
    expected = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + 0.5)  # biased variance, as torch
    np.testing.assert_allclose(nn.LayerNorm(5, eps=0.5)(x).data, expected, rtol=1e-5, atol=1e-6)


def test_parameter_holds_its_own_copy_of_the_data():
    data = np.ones(3, dtype=np.float32)
    p = nn.Parameter(data)
    data[0] = 5.0
    source = Tensor(np.ones(2))
    q = nn.Parameter(source)
    source.data[0] = 7.0
    np.testing.assert_array_equal(p.data, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(q.data, [1.0, 1.0])


def test_sequential_mlp_gradcheck():
    generator = rng()
    mlp = nn.Sequential(nn.Linear(3, 8, rng=generator), nn.GELU(), nn.Linear(8, 8, rng=generator), nn.ReLU(),
                        nn.Linear(8, 2, rng=generator))
    check_module(mlp, inputs(4, 3))


# ---- modules: structure ----------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, generator):
        self.norm = nn.LayerNorm(4)
        self.fc = nn.Linear(4, 4, rng=generator)


class Net(nn.Module):
    def __init__(self, generator):
        self.embed = nn.Embedding(10, 4, rng=generator)
        self.blocks = [Block(generator), Block(generator)]
        self.scale = nn.Parameter(np.ones(1))
        self.head = nn.Linear(4, 10, bias=False, rng=generator)
        self.head.weight = self.embed.weight  # tied weights
        self.drop = nn.Dropout(0.5, rng=generator)
        self.not_a_param = Tensor(np.ones(3), requires_grad=True)  # plain tensors are not registered

    def forward(self, ids):
        x = self.drop(self.embed(ids))
        for block in self.blocks:
            x = x + block.fc(block.norm(x))
        return self.head(x * self.scale)


def test_named_parameters_in_attribute_order_with_lists_and_tied_weights():
    net = Net(rng())
    names = [name for name, _ in net.named_parameters()]
    assert names == ["embed.weight",
                     "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.fc.weight", "blocks.0.fc.bias",
                     "blocks.1.norm.weight", "blocks.1.norm.bias", "blocks.1.fc.weight", "blocks.1.fc.bias",
                     "scale"]  # head.weight is embed.weight: listed once
    assert net.num_parameters() == 40 + 2 * (4 + 4 + 16 + 4) + 1
    assert [n for n, _ in nn.Sequential(nn.Linear(2, 2, rng=rng()), nn.GELU()).named_parameters()] == ["0.weight",
                                                                                                          "0.bias"]


def test_train_eval_reach_every_submodule_and_switch_dropout():
    net = Net(rng())
    assert all(m.training for m in net.modules())
    net.eval()
    assert not any(m.training for m in net.modules()) and len(list(net.modules())) == 1 + 1 + 2 * 3 + 2
    ids = np.array([[1, 2, 3]])
    assert np.array_equal(net(ids).data, net(ids).data)  # no dropout in eval mode
    net.train()
    assert not np.array_equal(net(ids).data, net(ids).data)  # dropout draws a new mask each call


def test_zero_grad_and_tied_gradients_accumulate():
    net = Net(rng())
    net.eval()
    loss = F.cross_entropy(net(np.array([[1, 2, 3]])), np.array([[2, 3, 4]]))
    loss.backward()
    assert all(p.grad is not None for p in net.parameters())
    # the tied matrix receives both the embedding and the head gradient
    net2 = Net(rng())
    net2.eval()
    net2.head.weight = nn.Parameter(net2.embed.weight)  # untied copy, same values
    F.cross_entropy(net2(np.array([[1, 2, 3]])), np.array([[2, 3, 4]])).backward()
    np.testing.assert_allclose(net.embed.weight.grad, net2.embed.weight.grad + net2.head.weight.grad, rtol=1e-6,
                               atol=1e-7)
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_state_dict_round_trips_bit_exactly(tmp_path):
    source, target = Net(rng(0)), Net(rng(1))
    state = source.state_dict()
    assert list(state) == [n for n, _ in source.named_parameters()]
    target.load_state_dict(state)
    for (name, p), (_, q) in zip(source.named_parameters(), target.named_parameters()):
        assert p.data.dtype == q.data.dtype == np.float32
        assert p.data.tobytes() == q.data.tobytes(), name
    state["scale"][0] = 5.0  # state_dict holds copies
    assert source.scale.data[0] == 1.0 and target.scale.data[0] == 1.0
    # through a .npz file
    third = Net(rng(2))
    source.save(tmp_path / "net.npz")
    third.load(tmp_path / "net.npz")
    for p, q in zip(source.parameters(), third.parameters()):
        assert p.data.tobytes() == q.data.tobytes()
    ids = np.array([[4, 5, 6]])
    source.eval(), third.eval()
    assert source(ids).data.tobytes() == third(ids).data.tobytes()


def test_load_state_dict_errors_are_clear_and_load_nothing():
    net = Net(rng())
    good = net.state_dict()
    before = net.embed.weight.data.copy()
    missing = {k: v for k, v in good.items() if k != "scale"}
    missing["embed.weight"] = np.zeros((10, 4))
    with pytest.raises(KeyError, match=r"missing keys \['scale'\], unexpected keys \[\]"):
        net.load_state_dict(missing)
    with pytest.raises(KeyError, match=r"missing keys \[\], unexpected keys \['extra'\]"):
        net.load_state_dict({**good, "extra": np.ones(1)})
    with pytest.raises(ValueError, match=r"'scale' has shape \(2,\), the parameter has \(1,\)"):
        net.load_state_dict({**good, "scale": np.ones(2), "embed.weight": np.zeros((10, 4))})
    with pytest.raises(TypeError, match="floating"):
        net.load_state_dict({**good, "scale": np.ones(1, dtype=np.int64)})
    with pytest.raises(TypeError, match="load_state_dict: state must be a mapping of names to arrays, got list"):
        net.load_state_dict(list(good.items()))
    assert np.array_equal(net.embed.weight.data, before)  # nothing was half-loaded


def test_load_state_dict_failing_on_a_later_key_leaves_earlier_parameters_alone():
    # "embed.weight" comes first in named_parameters and "scale" last: checking must finish before loading
    for bad_scale, error in ((np.ones(2), ValueError), (np.ones(1, dtype=np.int64), TypeError)):
        net = Net(rng())
        before = {name: p.data.copy() for name, p in net.named_parameters()}
        with pytest.raises(error, match="'scale'"):
            net.load_state_dict({**net.state_dict(), "embed.weight": np.zeros((10, 4)), "scale": bad_scale})
        for name, p in net.named_parameters():
            assert np.array_equal(p.data, before[name]), name


@pytest.mark.parametrize("over", ["warn", "raise"])
def test_load_state_dict_refuses_float64_values_beyond_float32_and_loads_nothing(over):
    """A float64 1e300 became Inf with only a RuntimeWarning (Module.load of such an .npz too); under
    errstate(over="raise") the cast raised in the loading loop, after earlier parameters had loaded."""
    layer = nn.Linear(2, 3, rng=rng())
    before = {name: p.data.copy() for name, p in layer.named_parameters()}
    state = {name: array.astype(np.float64) for name, array in layer.state_dict().items()}
    state["weight"][:] = 7.0
    state["bias"][0] = 1e300
    with np.errstate(over=over), pytest.raises(ValueError, match="load_state_dict: 'bias' holds finite values "
                                                                 "beyond float32's range"):
        layer.load_state_dict(state)
    for name, p in layer.named_parameters():
        assert np.array_equal(p.data, before[name]), name
    state["bias"][0] = np.inf  # (an Inf is a value, loaded as it is)
    layer.load_state_dict(state)
    assert layer.bias.data[0] == np.inf and (layer.weight.data == 7.0).all()


def test_a_float64_module_loads_float64_values_as_they_are():
    """A module built under default_dtype(np.float64) (as gradcheck's) keeps float64 values bit-exactly,
    beyond float32's range and precision too. A mutation audit's find: converting them outside the
    parameter's dtype (to float32, then back) passed every test: 0.1 came back as float32's 0.1 and
    1e300 was refused."""
    with default_dtype(np.float64):
        layer = nn.Linear(3, 2, rng=rng())
    state = {"weight": np.full((2, 3), 0.1), "bias": np.array([1e300, -1.0 / 3.0])}
    layer.load_state_dict(state)
    for name, p in layer.named_parameters():
        assert p.data.dtype == np.float64, name
        assert p.data.tobytes() == state[name].tobytes(), name


def excess_kurtosis(values):
    """E[(x - mean)^4] / var^2 - 3: 0 for a normal distribution, -1.2 for a uniform one."""
    centred = values.astype(np.float64) - values.mean(dtype=np.float64)
    return float(np.mean(centred ** 4) / np.mean(centred ** 2) ** 2 - 3.0)


def test_linear_init_follows_torch_rule_or_normal_std():
    layer = nn.Linear(400, 300, rng=rng())
    bound = 1 / math.sqrt(400)
    for p in (layer.weight, layer.bias):
        assert p.dtype == np.float32 and np.abs(p.data).max() <= bound
    # U(-b, b) has variance b^2/3: 120,000 samples put the estimate within ~1%
    assert np.var(layer.weight.data) == pytest.approx(bound ** 2 / 3, rel=0.03)
    assert layer.weight.shape == (300, 400) and layer.bias.shape == (300,)
    gpt = nn.Linear(400, 300, rng=rng(), std=0.02)
    assert np.std(gpt.weight.data) == pytest.approx(0.02, rel=0.02) and not gpt.bias.data.any()
    embedding = nn.Embedding(1000, 64, rng=rng())
    assert np.std(embedding.weight.data) == pytest.approx(1.0, rel=0.02)


def test_embedding_init_uses_its_std():
    # N(0, 0.02^2) as nanoGPT: 64,000 samples put the std estimate within ~0.3%
    embedding = nn.Embedding(1000, 64, rng=rng(), std=0.02)
    assert np.std(embedding.weight.data) == pytest.approx(0.02, rel=0.02)


def test_std_initialisation_draws_normal_values():
    """``std`` means N(0, std^2), not any distribution of that std: a uniform draw of the same std
    (excess kurtosis -1.2) passed every test of a mutation audit. Over 120,000 and 64,000 samples the
    normal's excess kurtosis estimate has a standard error of sqrt(24 / n) < 0.02; the default Linear
    rule is the uniform U(-b, b)."""
    assert abs(excess_kurtosis(nn.Linear(400, 300, rng=rng(), std=0.02).weight.data)) < 0.1
    assert abs(excess_kurtosis(nn.Embedding(1000, 64, rng=rng(), std=0.02).weight.data)) < 0.1
    assert excess_kurtosis(nn.Linear(400, 300, rng=rng()).weight.data) == pytest.approx(-1.2, abs=0.1)


def test_constructors_need_an_explicit_generator_and_valid_sizes():
    with pytest.raises(TypeError, match="rng=np.random.Generator"):
        nn.Linear(2, 3, rng=0)
    with pytest.raises(TypeError):
        nn.Linear(2, 3)  # rng is a required keyword
    with pytest.raises(TypeError, match="rng=np.random.Generator"):
        nn.Embedding(2, 3, rng=np.random.RandomState(0))
    with pytest.raises(TypeError, match="rng=np.random.Generator"):
        nn.Dropout(0.1, rng=None)
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        nn.Linear(0, 3, rng=rng())
    with pytest.raises(TypeError, match="Linear: in_features must be a positive int, got float 2.0"):
        nn.Linear(2.0, 3, rng=rng())  # (a ValueError before, where the package's other int arguments give TypeError)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        nn.Dropout(-0.1, rng=rng())
    with pytest.raises(TypeError, match="Dropout: p must be a real number, got str"):
        nn.Dropout("0.1", rng=rng())
    with pytest.raises(TypeError, match="Linear: std must be a real number, got str"):
        nn.Linear(2, 3, rng=rng(), std="0.02")
    for eps in (-1.0, float("nan")):  # caught when the layer is made, not at its first forward pass
        with pytest.raises(ValueError, match="LayerNorm: eps must be >= 0"):
            nn.LayerNorm(3, eps=eps)
    with pytest.raises(TypeError, match="not a Module"):
        nn.Sequential(nn.GELU(), F.gelu)
    with pytest.raises(NotImplementedError):
        nn.Module()(1)


def test_dropout_takes_p_one_as_torch_does():
    """p is documented in [0, 1], as torch.nn.Dropout's, and functional.dropout handles p = 1 (drop
    everything); refusing it ([0, 1)) passed every test of a mutation audit."""
    dropout = nn.Dropout(1.0, rng=rng())
    x = inputs(3, 4)
    y = dropout(x)
    y.backward(np.ones(y.shape))
    assert not y.data.any() and not x.grad.any()
    dropout.eval()
    np.testing.assert_array_equal(dropout(x).data, x.data)


def test_same_seed_gives_bit_identical_training():
    def run(seed):
        generator = rng(seed)
        model = nn.Sequential(nn.Embedding(11, 8, rng=generator), nn.Dropout(0.2, rng=generator),
                              nn.Linear(8, 16, rng=generator), nn.GELU(), nn.LayerNorm(16),
                              nn.Linear(16, 11, rng=generator))
        opt = optim.AdamW(model.parameters(), lr=1e-2)
        data = rng(seed + 100).integers(0, 11, (4, 6))
        losses = []
        for step in range(3):
            opt.zero_grad()
            loss = F.cross_entropy(model(data[:, :-1]), data[:, 1:])
            loss.backward()
            optim.clip_grad_norm(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.data.tobytes())
        return losses, [p.data.tobytes() for p in model.parameters()]

    assert run(0) == run(0)
    assert run(0) != run(1)


# ---- optimizers --------------------------------------------------------------------------------------

def test_adamw_hand_checkable_example():
    """One scalar, two steps, with the update equations of Loshchilov & Hutter 2019 Alg. 2 (torch's form)."""
    lr, beta1, beta2, eps, wd = 0.1, 0.9, 0.999, 1e-8, 0.1
    p = Tensor([1.0], requires_grad=True)
    opt = optim.AdamW([p], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd)
    theta, m, v = 1.0, 0.0, 0.0
    for t, g in ((1, 0.5), (2, -0.25)):
        p.grad = np.array([g], dtype=np.float32)
        opt.step()
        theta -= lr * wd * theta
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        theta -= lr * m_hat / (math.sqrt(v_hat) + eps)
        assert p.data[0] == pytest.approx(theta, rel=2e-7, abs=0)
        if t == 1:
            # by hand: decay 1 -> 0.99; m_hat = g, v_hat = g^2, so the step is lr * sign(g) = 0.1
            assert p.data[0] == pytest.approx(0.89, rel=1e-7)
    # by hand, step 2: m = 0.02, v = 0.00031225, m_hat = 0.02/0.19, v_hat = 0.00031225/0.001999,
    # theta = 0.89 * 0.99 - 0.1 * m_hat / sqrt(v_hat)
    assert p.data[0] == pytest.approx(0.8811 - 0.1 * (0.02 / 0.19) / math.sqrt(0.00031225 / 0.001999), rel=1e-6)


def test_adamw_adds_eps_after_the_bias_correction():
    """A first step with |g| near eps, where the place of eps matters (the example above tells the
    placements apart by only about 2 float32 ulps).

    At t = 1 the bias corrections give m_hat = g and v_hat = g^2 exactly, so Alg. 2's step
    ``lr * m_hat / (sqrt(v_hat) + eps)`` is ``lr * g / (|g| + eps)``: by hand ``lr / 2`` for g = eps
    and ``-lr / 101`` for g = -eps / 100. Adding eps to ``sqrt(v)`` before dividing by
    ``sqrt(1 - beta2) = sqrt(0.001)`` would make it ``31.6 eps`` and the steps 16 and 31 times smaller.
    """
    lr, eps, wd = 0.1, 1e-8, 0.1
    p = Tensor([1.0, 1.0], requires_grad=True)
    opt = optim.AdamW([p], lr=lr, betas=(0.9, 0.999), eps=eps, weight_decay=wd)
    p.grad = np.array([eps, -eps / 100], dtype=np.float32)
    opt.step()
    decayed = 1.0 - lr * wd  # 0.99, before the Adam step
    np.testing.assert_allclose(p.data, [decayed - lr / 2, decayed + lr / 101], rtol=1e-6)


def test_adamw_matches_equations_over_many_steps_and_groups():
    generator = rng(3)
    w, b = Tensor(generator.standard_normal((3, 4)), requires_grad=True), Tensor(generator.standard_normal(4),
                                                                                 requires_grad=True)
    opt = optim.AdamW([{"params": [w]}, {"params": [b], "weight_decay": 0.0}], lr=0.01, betas=(0.8, 0.95),
                      eps=1e-6, weight_decay=0.3)
    reference = {id(p): dict(theta=p.data.astype(np.float64), m=0.0, v=0.0, step=0, wd=wd)
                 for p, wd in ((w, 0.3), (b, 0.0))}
    for t in range(1, 21):
        for p in (w, b):
            p.grad = generator.standard_normal(p.shape).astype(np.float32)
        if t == 7:
            b.grad = None  # no gradient this step: the parameter and its state are left alone
        opt.step()
        for p in (w, b):
            if p.grad is None:
                continue
            r = reference[id(p)]
            g = p.grad.astype(np.float64)
            r["step"] += 1
            r["theta"] = r["theta"] - 0.01 * r["wd"] * r["theta"]
            r["m"] = 0.8 * r["m"] + 0.2 * g
            r["v"] = 0.95 * r["v"] + 0.05 * g * g
            m_hat, v_hat = r["m"] / (1 - 0.8 ** r["step"]), r["v"] / (1 - 0.95 ** r["step"])
            r["theta"] = r["theta"] - 0.01 * m_hat / (np.sqrt(v_hat) + 1e-6)
            np.testing.assert_allclose(p.data, r["theta"], rtol=1e-5, atol=1e-6)
    assert opt.state[w]["step"] == 20 and opt.state[b]["step"] == 19


def test_sgd_momentum_and_nesterov_match_equations():
    for nesterov in (False, True):
        p = Tensor([1.0, -2.0], requires_grad=True)
        opt = optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=nesterov)
        theta, buffer = np.array([1.0, -2.0]), None
        for g in ([0.5, 1.0], [-1.0, 0.25], [2.0, 2.0]):
            p.grad = np.array(g, dtype=np.float32)
            opt.step()
            d = np.array(g) + 0.01 * theta
            buffer = d if buffer is None else 0.9 * buffer + d
            theta = theta - 0.1 * (d + 0.9 * buffer if nesterov else buffer)
            np.testing.assert_allclose(p.data, theta, rtol=1e-6)
    plain = Tensor([1.0], requires_grad=True)
    plain.grad = np.array([2.0], dtype=np.float32)
    optim.SGD([plain], lr=0.5).step()
    assert plain.data[0] == 0.0


def test_sgd_dampening_matches_torch_algorithm():
    """torch.optim.SGD's documented algorithm: b_1 = g_1 (no dampening at the first step), then
    b_t = momentum b_(t-1) + (1 - dampening) g_t, and p = p - lr b_t (g_t includes weight decay)."""
    p = Tensor([1.0, -2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)
    theta, buffer = np.array([1.0, -2.0]), None
    for g in ([0.5, 1.0], [-1.0, 0.25], [2.0, 2.0]):
        p.grad = np.array(g, dtype=np.float32)
        opt.step()
        d = np.array(g) + 0.01 * theta
        buffer = d if buffer is None else 0.9 * buffer + 0.7 * d
        theta = theta - 0.1 * buffer
        np.testing.assert_allclose(p.data, theta, rtol=1e-6)


def test_sgd_momentum_buffer_does_not_alias_the_gradient():
    # the same .grad array at two steps (as when backward accumulates without zero_grad): by hand,
    # b_1 = g, b_2 = 0.9 g + g = 1.9 g, so theta = theta_0 - 0.1 (1 + 1.9) g
    p = Tensor([1.0, -2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.array([0.5, 1.0], dtype=np.float32)
    opt.step()
    opt.step()
    np.testing.assert_array_equal(p.grad, [0.5, 1.0])  # the optimizer never writes into .grad
    np.testing.assert_allclose(p.data, [1.0 - 0.29 * 0.5, -2.0 - 0.29 * 1.0], rtol=1e-6)


def test_optimizer_state_dict_round_trips_bit_exactly():
    def make(seed):
        generator = rng(seed)
        model = nn.Sequential(nn.Linear(5, 7, rng=generator), nn.GELU(), nn.Linear(7, 3, rng=generator))
        return model, optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)

    data = rng(9).standard_normal((6, 5))

    def train(model, opt, steps, lr):
        for _ in range(steps):
            opt.zero_grad()
            (model(Tensor(data)) ** 2).mean().backward()
            opt.set_lr(lr)
            opt.step()

    model, opt = make(0)
    train(model, opt, 3, 3e-3)
    model_state, opt_state = model.state_dict(), opt.state_dict()
    train(model, opt, 2, 1e-3)

    resumed, resumed_opt = make(1)
    resumed.load_state_dict(model_state)
    resumed_opt.load_state_dict(opt_state)
    assert resumed_opt.state_dict()["param_groups"] == opt_state["param_groups"]
    train(resumed, resumed_opt, 2, 1e-3)
    for p, q in zip(model.parameters(), resumed.parameters()):
        assert p.data.tobytes() == q.data.tobytes()
    for p, q in zip(model.parameters(), resumed.parameters()):
        for key in ("exp_avg", "exp_avg_sq"):
            assert opt.state[p][key].tobytes() == resumed_opt.state[q][key].tobytes()
    # the saved dict holds copies: later steps did not change it
    assert opt_state["state"][0]["step"] == 3


def test_optimizer_bad_inputs_raise():
    p = Tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.AdamW([])
    with pytest.raises(TypeError, match="require grad"):
        optim.SGD([Tensor([1.0])], lr=0.1)
    with pytest.raises(ValueError, match="appears twice"):
        optim.SGD([p, p], lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        optim.AdamW([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr must be >= 0"):
        optim.AdamW([p], lr=-1.0)
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        optim.AdamW([{"params": [p], "momentum": 0.9}])
    other = optim.AdamW([p, Tensor([2.0], requires_grad=True)])
    with pytest.raises(ValueError, match="do not match"):
        optim.AdamW([p]).load_state_dict(other.state_dict())


def test_optimizer_rejects_params_it_could_never_update():
    p = Tensor(np.ones(3), requires_grad=True)
    # a Tensor is not a list of tensors: iterating it would give slices p[0], p[1], p[2], never updated
    with pytest.raises(TypeError, match="params must be an iterable of Tensors or of parameter groups, got a Tensor"):
        optim.AdamW(p)
    with pytest.raises(TypeError, match="'params' must be a list of Tensors, got a Tensor"):
        optim.SGD([{"params": p}], lr=0.1)
    # a non-leaf tensor never receives .grad from backward
    with pytest.raises(ValueError, match="non-leaf"):
        optim.AdamW([p * 2.0])


@pytest.mark.parametrize("make, error, message", [
    (lambda p: optim.AdamW([p], lr=float("inf")), ValueError, "lr must be >= 0 and finite, got inf"),
    (lambda p: optim.AdamW([p], lr="1e-3"), TypeError, "lr must be a real number, got str"),
    (lambda p: optim.SGD([p], lr=None), TypeError, "lr must be a real number, got NoneType"),
    (lambda p: optim.AdamW([p], weight_decay=float("inf")), ValueError, "weight_decay must be >= 0 and finite"),
    (lambda p: optim.AdamW([p], eps="1e-8"), TypeError, "eps must be a real number, got str"),
    (lambda p: optim.AdamW([p], eps=float("inf")), ValueError, "eps must be >= 0 and finite"),
    (lambda p: optim.AdamW([p], betas=0.9), TypeError, "betas must be a pair of real numbers, got 0.9"),
    (lambda p: optim.AdamW([p], betas=("0.9", "0.99")), TypeError, "a beta must be a real number, got str"),
    (lambda p: optim.SGD([p], lr=0.1, momentum="0.9"), TypeError, "momentum must be a real number, got str"),
    (lambda p: optim.SGD([p], lr=0.1, momentum=0.9, dampening=float("nan")), ValueError, r"dampening must be in \[0, 1\]"),
    (lambda p: optim.SGD([p], lr=0.1, momentum=0.9, dampening=5.0), ValueError, r"dampening must be in \[0, 1\]"),
])
def test_optimizer_hyperparameters_must_be_finite_numbers(make, error, message):
    with pytest.raises(error, match=message):
        make(Tensor(np.ones(3), requires_grad=True))


def test_set_lr_refuses_groups_with_different_learning_rates():
    """One rate for all would silently erase per-group rates (GPT.optimizer_groups' u-muP ones)."""
    from minifp8.model import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1, n_embd=8, family="unit"),
                rng=np.random.default_rng(0))
    opt = optim.AdamW(model.optimizer_groups(1.0))
    before = [group["lr"] for group in opt.param_groups]
    assert len(set(before)) > 1
    with pytest.raises(ValueError, match="different learning rates.*set each group's 'lr'"):
        opt.set_lr(0.5)
    assert [group["lr"] for group in opt.param_groups] == before
    same = optim.SGD([{"params": [Tensor(np.ones(2), requires_grad=True)]},
                      {"params": [Tensor(np.ones(3), requires_grad=True)]}], lr=0.1)
    same.set_lr(0.2)
    assert [group["lr"] for group in same.param_groups] == [0.2, 0.2]


@pytest.mark.parametrize("make", [lambda ps: optim.AdamW(ps, lr=0.1), lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)])
def test_a_read_only_parameter_raises_before_any_update(make):
    first = Tensor(np.ones(3, np.float32), requires_grad=True)
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    second = Tensor(frozen, requires_grad=True)  # (a float32 array is kept, not copied)
    assert not second.data.flags.writeable
    opt = make([first, second])
    first.grad, second.grad = np.ones(3, np.float32), np.ones(3, np.float32)
    with pytest.raises(ValueError, match="read-only array"):
        opt.step()
    np.testing.assert_array_equal(first.data, np.ones(3))
    assert opt.state_dict()["state"] == {}
    second.grad = None  # a parameter without a gradient is not updated, so it may stay read-only
    opt.step()
    assert (first.data < 1).all()


def test_set_lr_checks_the_value_and_changes_nothing_on_error():
    p = Tensor(np.ones(3), requires_grad=True)
    opt = optim.AdamW([{"params": [p]}, {"params": [Tensor(np.ones(2), requires_grad=True)]}], lr=0.1)
    for bad, error in ((float("nan"), ValueError), (-1.0, ValueError), ("0.1", TypeError)):
        with pytest.raises(error, match="lr"):
            opt.set_lr(bad)
    assert [group["lr"] for group in opt.param_groups] == [0.1, 0.1]


@pytest.mark.parametrize("make", [lambda p: optim.AdamW([p]), lambda p: optim.SGD([p], lr=0.1, momentum=0.9)])
@pytest.mark.parametrize("grad_shape", [(1,), (4,), (3, 1)])
def test_step_rejects_a_gradient_of_the_wrong_shape(make, grad_shape):
    p = Tensor(np.ones(3), requires_grad=True)
    opt = make(p)
    p.grad = np.ones(grad_shape, dtype=np.float32)  # (1,) would broadcast silently
    with pytest.raises(ValueError, match=rf"gradient of shape \({grad_shape[0]},.*for a parameter of shape \(3,\)"):
        opt.step()
    np.testing.assert_array_equal(p.data, np.ones(3))
    assert opt.state == {}


def _trained_adamw():
    a, b = Tensor(np.ones((2, 3)), requires_grad=True), Tensor(np.ones(3), requires_grad=True)
    opt = optim.AdamW([{"params": [a]}, {"params": [b], "weight_decay": 0.0}], lr=0.1)
    a.grad, b.grad = np.full((2, 3), 0.5, np.float32), np.full(3, 0.25, np.float32)
    opt.step()
    return opt


def _sgd_state():
    p, q = Tensor(np.ones((2, 3)), requires_grad=True), Tensor(np.ones(3), requires_grad=True)
    opt = optim.SGD([{"params": [p]}, {"params": [q]}], lr=0.1, momentum=0.9)
    p.grad, q.grad = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    opt.step()
    return opt.state_dict()


def _edit(change):
    state = copy.deepcopy(_trained_adamw().state_dict())
    change(state)
    return state


@pytest.mark.parametrize("state, error, message", [
    (_edit(lambda s: s["state"][1].pop("exp_avg")), KeyError, r"parameter 1 has state keys \['exp_avg_sq', 'step'\], "
                                                               r"expected \['exp_avg', 'exp_avg_sq', 'step'\]"),
    (_sgd_state(), KeyError, r"state keys \['momentum_buffer'\]"),
    (_edit(lambda s: s["state"][1].update(step="1")), TypeError, "'step' of parameter 1 must be an int >= 0, got '1'"),
    (_edit(lambda s: s["state"][1].update(step=1.5)), TypeError, "'step' of parameter 1 must be an int"),
    (_edit(lambda s: s["state"][1].update(exp_avg=[0.0, 0.0, 0.0])), TypeError,
     "'exp_avg' of parameter 1 must be a floating array, got list"),
    (_edit(lambda s: s["state"][1].update(exp_avg=np.zeros(3, np.int64))), TypeError,
     "'exp_avg' of parameter 1 must be a floating array, got int64"),
    (_edit(lambda s: s["state"][1].update(exp_avg=np.zeros(4, np.float32))), ValueError,
     r"'exp_avg' of parameter 1 has shape \(4,\), the parameter has \(3,\)"),
    (_edit(lambda s: s["param_groups"][1].update(lr=float("nan"))), ValueError, "lr must be >= 0 and finite"),
    (_edit(lambda s: s["param_groups"][0].update(lr="0.1")), TypeError, "lr must be a real number"),
    (_edit(lambda s: s["param_groups"][0].update(momentum=0.9)), ValueError, r"unknown hyperparameter\(s\) \['momentum'\]"),
    (_edit(lambda s: s.pop("state")), TypeError, "'state' and 'param_groups'"),
    (None, TypeError, "'state' and 'param_groups'"),
    # state keys: 0.5 was loaded as parameter 0 without a word, "a" raised int()'s bare ValueError
    (_edit(lambda s: s["state"].__setitem__(0.5, s["state"].pop(0))), TypeError,
     r"state keys must be parameter indices \(ints, as state_dict\(\) gives\), got float 0.5"),
    (_edit(lambda s: s["state"].__setitem__("a", s["state"].pop(0))), TypeError, "parameter indices.*got str 'a'"),
    (_edit(lambda s: s["state"].__setitem__("0", s["state"].pop(0))), TypeError, "parameter indices.*got str '0'"),
    (_edit(lambda s: s["state"].__setitem__(2, s["state"].pop(0))), KeyError,
     r"unknown parameter index 2 \(this optimizer has 2\)"),
    (_edit(lambda s: s["state"].__setitem__(-1, s["state"].pop(0))), KeyError, "unknown parameter index -1"),
])
def test_optimizer_load_state_dict_checks_everything_before_loading(state, error, message):
    opt = _trained_adamw()
    before = copy.deepcopy(opt.state_dict())
    with pytest.raises(error, match=message):
        opt.load_state_dict(state)
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]  # nothing half-loaded
    assert {i: sorted(s) for i, s in after["state"].items()} == {i: sorted(s) for i, s in before["state"].items()}
    opt.step()  # and still usable


def test_optimizer_load_state_dict_keeps_the_parameter_dtype():
    saved = _edit(lambda s: s["state"][0].update(exp_avg=s["state"][0]["exp_avg"].astype(np.float64)))
    opt = _trained_adamw()
    opt.load_state_dict(saved)
    loaded = opt.state_dict()["state"][0]["exp_avg"]
    assert loaded.dtype == np.float32 and loaded.tobytes() == saved["state"][0]["exp_avg"].astype(np.float32).tobytes()
    assert opt.state_dict()["state"][0]["step"] == 1 and type(opt.state_dict()["state"][0]["step"]) is int


def test_clip_grad_norm_scales_all_gradients_together():
    a, b, c = (Tensor(np.zeros(s), requires_grad=True) for s in (2, 1, 3))
    a.grad, b.grad = np.array([3.0, 4.0], dtype=np.float32), np.array([12.0], dtype=np.float32)
    total = optim.clip_grad_norm([a, b, c], 6.5)  # c has no grad and is skipped
    assert total == 13.0
    np.testing.assert_allclose(a.grad, [1.5, 2.0], rtol=1e-6)
    np.testing.assert_allclose(b.grad, [6.0], rtol=1e-6)
    assert optim.clip_grad_norm([a, b], 100.0) == pytest.approx(6.5, rel=1e-6)
    np.testing.assert_allclose(b.grad, [6.0], rtol=1e-6)  # under the limit: unchanged
    a.grad[0] = np.inf
    before = b.grad.copy()
    assert optim.clip_grad_norm([a, b], 1.0) == np.inf and b.grad[0] == before[0]  # left untouched
    with pytest.raises(RuntimeError, match="inf"):
        optim.clip_grad_norm([a, b], 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_grad_norm([a], 0.0)
    big = Tensor(np.zeros(2), requires_grad=True)
    big.grad = np.array([3e30, 4e30], dtype=np.float32)  # squares overflow float32; the norm does not
    assert optim.clip_grad_norm([big], 1.0) == pytest.approx(5e30, rel=1e-6)


def test_clip_grad_norm_refuses_a_parameter_or_a_grad_given_twice():
    """A review's find: [q, q] counted q's gradient twice (norm 7.07 for a gradient of norm 5) and scaled it
    twice (to norm 2.5), where the optimizers refuse a parameter given twice. Nothing is scaled then."""
    q, r = (Tensor(np.zeros(2, np.float32), requires_grad=True) for _ in range(2))
    q.grad = np.array([3.0, 4.0], np.float32)
    with pytest.raises(ValueError, match=r"^clip_grad_norm: a parameter appears twice"):
        optim.clip_grad_norm([q, q], 5.0)
    r.grad = q.grad  # (one array set by hand as two parameters' .grad)
    with pytest.raises(ValueError, match=r"^clip_grad_norm: a \.grad array appears twice"):
        optim.clip_grad_norm([q, r], 1.0)
    assert q.grad.tolist() == [3.0, 4.0]
    r.grad = q.grad.copy()
    assert optim.clip_grad_norm([q, r], 100.0) == pytest.approx(math.sqrt(50.0))


def test_schedule_and_clipping_numbers_are_checked():
    """Found by an audit: max_norm=True was taken as 1, max_norm="1" failed inside a comparison,
    and max_lr=inf gave an infinite learning rate."""
    a = Tensor(np.zeros(2), requires_grad=True)
    a.grad = np.ones(2, np.float32)
    for bad in (True, "1", None):
        with pytest.raises(TypeError, match="clip_grad_norm: max_norm must be a real number"):
            optim.clip_grad_norm([a], bad)
    for max_lr, min_lr in ((np.inf, 0.0), (np.nan, 0.0), (1.0, np.nan)):
        with pytest.raises(ValueError, match="both finite"):
            optim.warmup_cosine_lr(0, max_lr=max_lr, min_lr=min_lr, warmup_steps=1, total_steps=2)
    with pytest.raises(TypeError, match="max_lr must be a real number"):
        optim.warmup_cosine_lr(0, max_lr="1", warmup_steps=1, total_steps=2)


def test_clip_grad_norm_uses_torch_coefficient_with_its_epsilon():
    # torch: coefficient = max_norm / (total + 1e-6). With total 5e-6 and max_norm 1e-6 that is
    # 1e-6 / 6e-6 = 1/6 (1/5 without the 1e-6), so (3e-6, 4e-6) becomes (5e-7, 6.67e-7).
    a = Tensor(np.zeros(2), requires_grad=True)
    a.grad = np.array([3e-6, 4e-6], dtype=np.float32)
    assert optim.clip_grad_norm([a], 1e-6) == pytest.approx(5e-6, rel=1e-6)
    np.testing.assert_allclose(a.grad, [3e-6 / 6, 4e-6 / 6], rtol=1e-5)


def test_warmup_cosine_schedule():
    kw = dict(max_lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=110)
    lrs = [optim.warmup_cosine_lr(s, **kw) for s in range(130)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == 1.0 and lrs[10] == 1.0
    assert all(later > earlier for earlier, later in zip(lrs[:10], lrs[1:10]))
    assert lrs[60] == pytest.approx(0.55)  # half way through the decay: (max + min) / 2
    assert all(later < earlier for earlier, later in zip(lrs[10:110], lrs[11:110]))
    assert lrs[110] == lrs[129] == 0.1
    assert optim.warmup_cosine_lr(5, max_lr=2.0, warmup_steps=0, total_steps=10) == pytest.approx(
        2.0 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    with pytest.raises(ValueError, match="warmup_steps <= total_steps"):
        optim.warmup_cosine_lr(0, max_lr=1.0, warmup_steps=5, total_steps=4)
    with pytest.raises(ValueError, match="warmup_cosine_lr: step must be >= 0, got -1"):
        optim.warmup_cosine_lr(-1, **kw)


def test_module_level_zero_grad():
    p = Tensor([1.0], requires_grad=True)
    p.grad = np.ones(1, dtype=np.float32)
    optim.zero_grad([p])
    assert p.grad is None


@pytest.mark.parametrize("make", [lambda params: optim.SGD(params, lr=0.1, momentum=0.9),
                                  lambda params: optim.AdamW(params, lr=0.1)], ids=["SGD", "AdamW"])
def test_an_optimizer_step_between_forward_and_backward_is_refused(make):
    """The usual slip: stepping before the backward of the graph that saw the old weights. The
    step updates the weight in place, so that backward would be wrong; it raises instead."""
    rng = np.random.default_rng(0)
    layer = nn.Linear(3, 2, rng=rng)
    optimizer = make(layer.parameters())
    x = Tensor(rng.standard_normal((4, 3)))
    layer(x).sum().backward()
    loss = layer(x).sum()  # built from the weights before the step below
    optimizer.step()
    grads = [p.grad.copy() for p in layer.parameters()]
    with pytest.raises(RuntimeError, match="was changed in place after the forward pass"):
        loss.backward()
    for p, before in zip(layer.parameters(), grads):
        np.testing.assert_array_equal(p.grad, before)
    optimizer.zero_grad()
    layer(x).sum().backward()  # a new forward pass sees the new weights
    assert all(p.grad is not None for p in layer.parameters())


def test_clip_grad_norm_and_zero_grad_take_one_tensor():
    """As torch's clip_grad_norm_: a Tensor is one parameter, not the slices that iterating it gives."""
    w = nn.Parameter(np.zeros(4, np.float32))
    w.grad = np.full(4, 10.0, np.float32)
    assert optim.clip_grad_norm(w, 1.0) == pytest.approx(20.0)
    np.testing.assert_allclose(w.grad, 10.0 / (20.0 + 1e-6), rtol=1e-6)
    optim.zero_grad(w)
    assert w.grad is None


def test_save_and_load_take_the_same_path_without_npz(tmp_path):
    rng = np.random.default_rng(0)
    source, target = nn.Linear(3, 2, rng=rng), nn.Linear(3, 2, rng=rng)
    source.save(tmp_path / "checkpoint")  # np.savez alone would write checkpoint.npz
    target.load(tmp_path / "checkpoint")
    np.testing.assert_array_equal(target.weight.data, source.weight.data)


class NamedLikeSavezArguments(nn.Module):
    """Top-level parameters named as np.savez's own arguments (it took ``file`` twice, ``allow_pickle`` as its flag)."""

    def __init__(self, generator):
        self.file = nn.Parameter(generator.standard_normal(3).astype(np.float32))
        self.allow_pickle = nn.Parameter(generator.standard_normal((2, 2)).astype(np.float32))
        self.args = nn.Parameter(generator.standard_normal(1).astype(np.float32))


def test_save_and_load_any_parameter_name(tmp_path):
    source, target = NamedLikeSavezArguments(rng(0)), NamedLikeSavezArguments(rng(1))
    source.save(tmp_path / "odd.npz")
    target.load(tmp_path / "odd.npz")
    for (name, p), (_, q) in zip(source.named_parameters(), target.named_parameters()):
        assert p.data.dtype == q.data.dtype and p.data.tobytes() == q.data.tobytes(), name
    # a plain .npz that np.load reads as np.savez's, nothing pickled
    with np.load(tmp_path / "odd.npz", allow_pickle=False) as archive:
        assert archive.files == ["file", "allow_pickle", "args"]
        np.testing.assert_array_equal(archive["allow_pickle"], source.allow_pickle.data)


class HoldsModulesInAContainer(nn.Module):
    def __init__(self, generator, kind):
        self.fine = [nn.Linear(2, 2, rng=generator)]
        self.settings = {"width": 2, "names": ["a", "b"]}  # plain data in a dict or nested list is fine
        self.grid = [[1, 2], (3, 4)]
        if kind == "dict":
            self.layers = {"a": nn.Linear(2, 2, rng=generator)}
        elif kind == "dict of parameters":
            self.layers = {"scale": nn.Parameter(np.ones(2))}
        elif kind == "list of lists":
            self.layers = [[nn.Linear(2, 2, rng=generator)]]
        elif kind == "tuple of dicts":
            self.layers = ({"deep": [nn.Parameter(np.ones(2))]},)
        elif kind == "dict keyed by modules":
            self.layers = {nn.Linear(2, 2, rng=generator): "a"}


@pytest.mark.parametrize("kind, where, container", [
    ("dict", "layers", "dict"), ("dict of parameters", "layers", "dict"),
    ("list of lists", r"layers\[0\]", "list"), ("tuple of dicts", r"layers\[0\]", "dict"),
    ("dict keyed by modules", "layers", "dict")])
def test_modules_in_unsupported_containers_are_refused(kind, where, container):
    """A dict of modules or a list of lists was silently skipped (parameters() missed them): now a TypeError.
    So is a module used as a dict key (searching the values only passed every test of a mutation audit)."""
    module = HoldsModulesInAContainer(rng(), kind)
    message = (rf"HoldsModulesInAContainer: attribute {where} is a {container} holding Modules or Parameters, "
               r"which a Module does not search .* supported are a Module, a Parameter, or a list/tuple of them")
    for call in (module.parameters, module.state_dict, module.eval, lambda: list(module.named_modules())):
        with pytest.raises(TypeError, match=message):
            call()


def test_plain_data_in_containers_is_not_an_error():
    module = HoldsModulesInAContainer(rng(), "none")
    assert [name for name, _ in module.named_parameters()] == ["fine.0.weight", "fine.0.bias"]


@pytest.mark.parametrize("make", [lambda: nn.LayerNorm(4), lambda: nn.LayerNorm(4, bias=False),
                                  lambda: nn.LayerNorm(4, elementwise_affine=False)],
                         ids=["affine", "no-bias", "no-parameters"])
def test_layer_norm_names_x_when_its_width_is_wrong(make):
    """Checked before the weight: the message blamed the weight's shape (4,) for a width-5 input."""
    with pytest.raises(ValueError, match=r"LayerNorm\(4\): x must have 4 features on its last axis, got shape \(2, 5\)"):
        make()(Tensor(np.ones((2, 5), np.float32)))
    with pytest.raises(ValueError, match=r"LayerNorm\(4\): x must have 4 features on its last axis, got shape \(\)"):
        make()(Tensor(np.float32(1.0)))


def test_warmup_cosine_lr_takes_integer_step_counts():
    for name, value in (("warmup_steps", 2.5), ("total_steps", 10.0), ("warmup_steps", True)):
        arguments = {"max_lr": 1.0, "warmup_steps": 2, "total_steps": 10, name: value}
        with pytest.raises(TypeError, match=f"warmup_cosine_lr: {name} must be an int"):
            optim.warmup_cosine_lr(0, **arguments)
    # the step too: a wrong type is a TypeError, as for the step counts (it was a ValueError)
    for value, got in ((1.5, "float 1.5"), (True, "bool True"), ("3", "str '3'")):
        with pytest.raises(TypeError, match=f"warmup_cosine_lr: step must be an int, got {got}"):
            optim.warmup_cosine_lr(value, max_lr=1.0, warmup_steps=1, total_steps=3)
    assert optim.warmup_cosine_lr(np.int64(0), max_lr=1.0, warmup_steps=1, total_steps=3) == 1.0


def test_sequential_finds_what_is_set_on_it_besides_its_layers():
    """A review's find: Sequential listed its layers only, so a parameter or module set as another
    attribute was left out of parameters(), state_dict() and eval(), without a word, and a dict of
    modules (which Module refuses) was accepted."""
    rng = np.random.default_rng(0)
    sequential = nn.Sequential(nn.Linear(2, 2, rng=rng))
    sequential.extra = nn.Parameter(np.ones(3))
    sequential.drop = nn.Dropout(0.5, rng=rng)
    assert list(sequential.state_dict()) == ["0.weight", "0.bias", "extra"]
    assert [name for name, _ in sequential.named_modules()] == ["", "0", "drop"]
    sequential.eval()
    assert not sequential.drop.training and sequential.num_parameters() == 9
    sequential.bad = {"a": nn.Linear(2, 2, rng=rng)}
    with pytest.raises(TypeError, match="Sequential: attribute bad is a dict holding Modules or Parameters"):
        sequential.state_dict()


# ---- hyperparameters as NumPy numbers, gradients of another dtype ----------------------------------

def _three_steps(make, **settings):
    """The parameter and state_dict after three steps of ``make(params, **settings)`` on fixed gradients."""
    p = Tensor(rng(3).standard_normal(1000).astype(np.float32), requires_grad=True)
    optimizer = make([p], **settings)
    for step in range(3):
        p.grad = rng(10 + step).standard_normal(1000).astype(np.float32)
        optimizer.step()
    return p.data.copy(), optimizer.state_dict()


@pytest.mark.parametrize("make, settings", [
    (optim.AdamW, dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
], ids=["AdamW", "SGD"])
def test_numpy_hyperparameters_give_the_bits_of_python_ones(make, settings):
    """Stored as Python floats: an np.float64 lr or beta took parts of the float32 update to float64
    (NumPy 2's promotion rules; 381 of 1000 elements differed after three AdamW steps), and an
    np.float32 one made the state_dict unwritable as JSON."""
    import json
    expected, _ = _three_steps(make, **settings)
    as_numpy = {k: tuple(np.float64(b) for b in v) if k == "betas" else np.float64(v) for k, v in settings.items()}
    got, state = _three_steps(make, **as_numpy)
    np.testing.assert_array_equal(got, expected)
    for group in state["param_groups"]:
        assert all(type(v) is float for k, v in group.items() if k not in ("params", "betas", "nesterov"))
        assert all(type(b) is float for b in group.get("betas", ()))
    as_float32 = {k: tuple(np.float32(b) for b in v) if k == "betas" else np.float32(v) for k, v in settings.items()}
    json.dumps(_three_steps(make, **as_float32)[1]["param_groups"])


@pytest.mark.parametrize("make, settings", [
    (optim.AdamW, dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
], ids=["AdamW", "SGD"])
def test_hyperparameters_set_directly_as_numpy_numbers_give_the_same_bits(make, settings):
    """set_lr's own error says to set each group's 'lr': set so, an np.float64 skipped the conversion
    above, and 601 of 1000 elements differed after three AdamW steps."""
    def run(value):
        p = Tensor(rng(3).standard_normal(1000).astype(np.float32), requires_grad=True)
        optimizer = make([p], **settings)
        optimizer.param_groups[0]["lr"] = value(0.05)
        if "betas" in settings:
            optimizer.param_groups[0]["betas"] = (value(0.8), value(0.95))
        for step in range(3):
            p.grad = rng(10 + step).standard_normal(1000).astype(np.float32)
            optimizer.step()
        return p.data
    np.testing.assert_array_equal(run(np.float64), run(float))


def test_optimizer_load_state_dict_refuses_float64_state_beyond_float32():
    """A float64 1e300 in a saved moment or buffer loaded as Inf (a RuntimeWarning only), and the next
    step made the parameter -Inf."""
    p = Tensor(np.ones(2, np.float32), requires_grad=True)
    optimizer = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.ones(2, np.float32)
    optimizer.step()
    state = optimizer.state_dict()
    state["state"][0]["momentum_buffer"] = np.array([1e300, 1.0])
    before = optimizer.state[p]["momentum_buffer"].copy()
    with pytest.raises(ValueError, match="SGD.load_state_dict: 'momentum_buffer' of parameter 0 holds finite "
                                         "values beyond float32's range"):
        optimizer.load_state_dict(state)
    np.testing.assert_array_equal(optimizer.state[p]["momentum_buffer"], before)


def test_load_state_dict_stores_numpy_hyperparameters_as_python_floats():
    p = Tensor(np.zeros(3, np.float32), requires_grad=True)
    optimizer = optim.AdamW([p], lr=0.1)
    state = optimizer.state_dict()
    state["param_groups"][0].update(lr=np.float64(0.05), betas=[np.float64(0.8), 0.9])
    optimizer.load_state_dict(state)
    group = optimizer.param_groups[0]
    assert type(group["lr"]) is float and group["lr"] == 0.05 and group["betas"] == (0.8, 0.9)
    assert all(type(b) is float for b in group["betas"])


@pytest.mark.parametrize("make", [lambda ps: optim.AdamW(ps, lr=0.1), lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: optim.SGD(ps, lr=0.1, weight_decay=0.1),
                                  lambda ps: fp8lm.FP8AdamW(ps, lr=0.1)], ids=["AdamW", "SGD", "SGD-decay", "FP8AdamW"])
@pytest.mark.parametrize("grad_dtype", [np.float16, np.float64])
def test_a_gradient_of_another_dtype_updates_as_its_float32_value(make, grad_dtype):
    """The update runs in the parameter's dtype: a float16 gradient of a float32 parameter made AdamW's
    g * g overflow to Inf in float16, and the parameter never moved again, with no error; a float64 one
    took parts of the update to float64."""
    grads = [np.array([300.0, 1.0, -2.0**-20, 1.0 / 3.0]).astype(grad_dtype) * (step + 1) for step in range(3)]

    def run(as_float32):
        p = Tensor(np.ones(4, np.float32), requires_grad=True)
        optimizer = make([p])
        for g in grads:
            p.grad = g.astype(np.float32) if as_float32 else g
            optimizer.step()
        return p.data

    expected = run(as_float32=True)
    assert np.isfinite(expected).all() and expected.dtype == np.float32
    np.testing.assert_array_equal(run(as_float32=False), expected)


# ---- a review of the optimizers (stop 65) ------------------------------------------------------------
OPTIMIZERS = {"SGD": lambda params: optim.SGD(params, lr=0.1, momentum=0.9),
              "AdamW": lambda params: optim.AdamW(params, lr=0.1),
              "FP8AdamW": lambda params: fp8lm.FP8AdamW(params, lr=0.1)}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_set_of_parameters_is_refused_as_it_has_no_order_that_the_saved_state_can_name(name):
    """Found by a review: a set was accepted; its order follows memory addresses, and state_dict
    names parameters by position, so a resumed AdamW loaded one parameter's moments into another of
    the same shape (0.2, 0.4, 0.3, 0.1 for 0.1, 0.2, 0.3, 0.4)."""
    params = [Tensor(np.zeros(3, np.float32), requires_grad=True) for _ in range(4)]
    for given in (set(params), frozenset(params), [{"params": set(params)}]):
        with pytest.raises(TypeError, match="must be an ordered iterable .a list., got a (frozen)?set"):
            OPTIMIZERS[name](given)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_dict_of_parameters_gets_an_error_that_says_what_to_pass(name):
    """Found by a review: one group dict, or a name -> Tensor dict, was iterated for its keys and the
    error blamed a string ("parameters must be Tensors that require grad, got 'params'")."""
    p = Tensor(np.zeros(3, np.float32), requires_grad=True)
    for given in ({"params": [p], "lr": 0.01}, {"weight": p}):
        with pytest.raises(TypeError, match=r"got a dict: pass \[group\] for one group, or list\(d.values\(\)\)"):
            OPTIMIZERS[name](given)
    for params in ({"w": p}, {p: 1}):  # (a review of this change: a group's dict was its keys too)
        with pytest.raises(TypeError, match=r"a group's 'params' must be a list of Tensors, got a dict"):
            OPTIMIZERS[name]([{"params": params}])


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("key, value, error", [("lr", math.nan, ValueError), ("lr", -0.1, ValueError),
                                               ("lr", math.inf, ValueError), ("lr", None, TypeError),
                                               ("weight_decay", -1.0, ValueError)])
def test_a_hyperparameter_set_directly_is_checked_before_any_parameter_is_updated(name, key, value, error):
    """Found by a review: step() read ``group["lr"]`` (which the module docstring says to set) without
    a check, so a NaN rate made every weight NaN, a negative one stepped up the gradient, and a None
    in the second group failed only after the first group had stepped."""
    first, second = (Tensor(np.ones(2, np.float32), requires_grad=True) for _ in range(2))
    optimizer = OPTIMIZERS[name]([{"params": [first]}, {"params": [second]}])
    optimizer.param_groups[1][key] = value
    first.grad, second.grad = np.ones(2, np.float32), np.ones(2, np.float32)
    with pytest.raises(error, match=rf"{name}.step: param_groups\[1\], as set there: .*{key}"):
        optimizer.step()
    assert first.data.tolist() == [1.0, 1.0] and second.data.tolist() == [1.0, 1.0] and optimizer.state == {}


def test_adamw_betas_set_directly_are_checked_before_any_parameter_is_updated():
    """The same review: betas of (1.0, 0.999) divided by 1 - 1**t = 0 after the first group had stepped
    and the failing parameter had been decayed."""
    first, second = (Tensor(np.ones(2, np.float32), requires_grad=True) for _ in range(2))
    optimizer = optim.AdamW([{"params": [first]}, {"params": [second]}], lr=0.1)
    optimizer.param_groups[1]["betas"] = (1.0, 0.999)
    first.grad, second.grad = np.ones(2, np.float32), np.ones(2, np.float32)
    with pytest.raises(ValueError, match=r"AdamW.step: param_groups\[1\], as set there: AdamW: betas must be two "
                                         r"numbers in \[0, 1\)"):
        optimizer.step()
    assert first.data.tolist() == [1.0, 1.0] and second.data.tolist() == [1.0, 1.0] and optimizer.state == {}


def test_adamw_load_state_dict_refuses_a_negative_second_moment_and_loads_nothing():
    """Found by a review: a negative exp_avg_sq loaded, and the next step took its square root (NaN)."""
    p = Tensor(np.ones(2, np.float32), requires_grad=True)
    optimizer = optim.AdamW([p], lr=0.1)
    p.grad = np.ones(2, np.float32)
    optimizer.step()
    saved, before = optimizer.state_dict(), copy.deepcopy(optimizer.state_dict())
    saved["state"][0]["exp_avg_sq"][1] = -1.0
    with pytest.raises(ValueError, match=r"'exp_avg_sq' of parameter 0 holds 1 negative value\(s\), e\.g\. -1\.0"):
        optimizer.load_state_dict(saved)
    after = optimizer.state_dict()
    assert after["state"][0]["exp_avg_sq"].tolist() == before["state"][0]["exp_avg_sq"].tolist()


def test_adamw_docstring_cases_eps_zero_and_a_decay_below_float32_resolution():
    """What AdamW's docstring says, as torch does it: eps = 0 gives 0/0 = NaN where the second moment
    is still 0; a decay factor 1 - lr * wd with lr * wd <= 2**-25 rounds to 1 in float32 (half an
    ulp below 1), and 2**-24 does decay (to 1 - 2**-24, the float32 just below 1)."""
    p = Tensor(np.ones(2, np.float32), requires_grad=True)
    optimizer = optim.AdamW([p], lr=0.1, eps=0.0, weight_decay=0.0)
    p.grad = np.array([0.0, 1.0], np.float32)
    optimizer.step()
    assert math.isnan(p.data[0]) and math.isfinite(p.data[1])
    for rate, expected in ((2.0**-25, 1.0), (2.0**-24, 1.0 - 2.0**-24)):
        p = Tensor(np.ones(2, np.float32), requires_grad=True)
        optimizer = optim.AdamW([p], lr=rate, weight_decay=1.0)
        p.grad = np.zeros(2, np.float32)
        optimizer.step()
        assert p.data.tolist() == [expected, expected]


def test_a_slice_of_a_sequential_is_a_sequential_of_the_same_layers():
    """A review's find: a slice gave a plain list (torch's Sequential[0:2] is a Sequential)."""
    first, second, third = nn.GELU(), nn.ReLU(), nn.Linear(2, 2, rng=np.random.default_rng(0))
    model = nn.Sequential(first, second, third)
    head = model[0:2]
    assert isinstance(head, nn.Sequential) and head[0] is first and head[1] is second and len(head) == 2
    assert model[2] is third and list(model[1:][1].parameters()) == list(third.parameters())
