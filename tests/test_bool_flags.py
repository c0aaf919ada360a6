"""Every public on/off argument takes a bool (Python or NumPy) and nothing else.

Python's truthiness would read ``causal="no"``, ``bias=0.5`` or ``requires_grad=[]`` as a flag
without a word, and several of them change what is computed (a str ``causal`` once turned the
mask on). Each case below passes a value of the wrong type and must get a TypeError that names
the argument and the value; a bool, or a NumPy bool, must still be taken. One helper does the
check for the whole package (``formats._check_bool``).
"""
import numpy as np
import pytest

from minifp8 import codec, formats, golden, scaling, testing, train_tiny
from minifp8 import functional as F
from minifp8 import nn, optim, uu
from minifp8 import unit as U
from minifp8.autograd import Tensor
from minifp8.model import GPTConfig


def _qkv():
    rng = np.random.default_rng(0)
    return [Tensor(rng.standard_normal((2, 3, 4)).astype(np.float32)) for _ in range(3)]


def _rng():
    return np.random.default_rng(0)


# (what is called, the argument's name in the message, a call taking the flag)
CASES = [
    ("Tensor", "requires_grad", lambda flag: Tensor(np.ones(2), requires_grad=flag)),
    ("Tensor.requires_grad =", "requires_grad", lambda flag: setattr(Tensor(np.ones(2)), "requires_grad", flag)),
    ("Tensor.sum", "sum: keepdims", lambda flag: Tensor(np.ones((2, 3))).sum(axis=1, keepdims=flag)),
    ("Tensor.mean", "mean: keepdims", lambda flag: Tensor(np.ones((2, 3))).mean(axis=1, keepdims=flag)),
    ("F.dropout", "dropout: training", lambda flag: F.dropout(Tensor(np.ones(4)), 0.5, _rng(), training=flag)),
    ("F.scaled_dot_product_attention", "scaled_dot_product_attention: causal",
     lambda flag: F.scaled_dot_product_attention(*_qkv(), causal=flag)),
    ("U.dropout", "dropout: training", lambda flag: U.dropout(Tensor(np.ones(4)), 0.5, _rng(), training=flag)),
    ("U.scaled_dot_product_attention", "scaled_dot_product_attention: causal",
     lambda flag: U.scaled_dot_product_attention(*_qkv(), causal=flag)),
    ("nn.Module.train", "train: mode", lambda flag: nn.Linear(2, 2, rng=_rng()).train(flag)),
    ("nn.Linear", "Linear: bias", lambda flag: nn.Linear(2, 2, bias=flag, rng=_rng())),
    ("nn.LayerNorm", "LayerNorm: bias", lambda flag: nn.LayerNorm(4, bias=flag)),
    ("nn.LayerNorm", "LayerNorm: elementwise_affine", lambda flag: nn.LayerNorm(4, elementwise_affine=flag)),
    ("uu.Linear", "Linear: bias", lambda flag: uu.Linear(2, 2, bias=flag, rng=_rng())),
    ("uu.LinearReadout", "LinearReadout: bias", lambda flag: uu.LinearReadout(2, 2, bias=flag, rng=_rng())),
    ("uu.LayerNorm", "LayerNorm: bias", lambda flag: uu.LayerNorm(4, elementwise_affine=True, bias=flag)),
    ("uu.LayerNorm", "LayerNorm: elementwise_affine", lambda flag: uu.LayerNorm(4, elementwise_affine=flag)),
    ("uu.MHSA", "MHSA: causal", lambda flag: uu.MHSA(8, 2, rng=_rng(), causal=flag)),
    ("uu.TransformerLayer", "MHSA: causal", lambda flag: uu.TransformerLayer(8, 2, rng=_rng(), tau_attn=0.5,
                                                                             tau_mlp=0.5, causal=flag)),
    ("optim.SGD", "SGD: nesterov", lambda flag: optim.SGD([nn.Parameter(np.ones(2))], lr=0.1, momentum=0.9,
                                                         nesterov=flag)),
    ("optim.clip_grad_norm", "clip_grad_norm: error_if_nonfinite",
     lambda flag: optim.clip_grad_norm([nn.Parameter(np.ones(2))], 1.0, error_if_nonfinite=flag)),
    ("testing.gradcheck", "gradcheck: raise_on_failure",
     lambda flag: testing.gradcheck(lambda t: t * 2, Tensor(np.ones(2), requires_grad=True), raise_on_failure=flag)),
    ("GPTConfig", "GPTConfig: bias", lambda flag: GPTConfig(vocab_size=8, block_size=4, bias=flag)),
    ("FloatFormat", "signed", lambda flag: formats.FloatFormat("X", 4, 3, 7, signed=flag)),
    ("FloatFormat.nan_code", "negative", lambda flag: formats.E4M3.nan_code(negative=flag)),
    ("FloatFormat.inf_code", "negative", lambda flag: formats.E5M2.inf_code(negative=flag)),
    ("codec.encode", "saturate", lambda flag: codec.encode(np.ones(2), "E4M3", saturate=flag)),
    ("codec.quantize", "saturate", lambda flag: codec.quantize(np.ones(2), "E4M3", saturate=flag)),
    ("scaling.scale_from_amax", "power_of_2", lambda flag: scaling.scale_from_amax(np.float32(3), "E4M3",
                                                                                   power_of_2=flag)),
    ("scaling.quantize_current", "power_of_2", lambda flag: scaling.quantize_current(np.ones(4), power_of_2=flag)),
    ("scaling.quantize_rowwise", "power_of_2", lambda flag: scaling.quantize_rowwise(np.ones((2, 4)),
                                                                                     power_of_2=flag)),
    ("scaling.quantize_blockwise", "power_of_2", lambda flag: scaling.quantize_blockwise(np.ones((2, 4)),
                                                                                         power_of_2=flag)),
]
NOT_BOOLS = ["no", 0.5, 1, None, np.array([True])]


@pytest.mark.parametrize("bad", NOT_BOOLS, ids=repr)
@pytest.mark.parametrize("what, name, call", CASES, ids=[case[0] + " " + case[1] for case in CASES])
def test_a_flag_that_is_not_a_bool_is_a_type_error(what, name, call, bad):
    with pytest.raises(TypeError, match=rf"{name} must be a bool, got {type(bad).__name__} "):
        call(bad)


@pytest.mark.parametrize("what, name, call", CASES, ids=[case[0] + " " + case[1] for case in CASES])
def test_python_and_numpy_bools_are_taken(what, name, call):
    for flag in (False, True, np.False_, np.True_):
        try:
            call(flag)
        except (TypeError, ValueError) as error:  # (e.g. an unsigned FloatFormat X: not E8M0-like)
            assert "must be a bool" not in str(error), (what, flag)


def test_flags_take_effect_as_bools():
    """A NumPy bool means what the Python bool means (the helper hands back a Python bool)."""
    q, k, v = _qkv()
    assert np.array_equal(F.scaled_dot_product_attention(q, k, v, causal=np.True_).data,
                          F.scaled_dot_product_attention(q, k, v, causal=True).data)
    assert not np.array_equal(F.scaled_dot_product_attention(q, k, v, causal=np.False_).data,
                              F.scaled_dot_product_attention(q, k, v, causal=True).data)
    assert nn.Linear(2, 2, bias=np.False_, rng=_rng()).bias is None
    assert uu.MHSA(8, 2, rng=_rng(), causal=np.False_).causal is False
    assert Tensor(np.ones(2), requires_grad=np.True_).requires_grad is True


def test_a_bad_update_flag_leaves_the_delayed_scaler_untouched():
    scaler = scaling.DelayedScaling("E4M3", history_len=4)
    before = (scaler.amax_history.copy(), scaler.scale)
    with pytest.raises(TypeError, match="DelayedScaling.quantize: update must be a bool, got str 'no'"):
        scaler.quantize(np.full(4, 3.0), update="no")
    assert np.array_equal(scaler.amax_history, before[0]) and scaler.scale == before[1]


def test_golden_write_and_train_check_their_flags_before_doing_anything(tmp_path):
    out = tmp_path / "golden"
    with pytest.raises(TypeError, match="golden.write: blocks must be a bool, got str 'no'"):
        golden.write(out, "E4M3", blocks="no")
    assert not out.exists()
    with pytest.raises(TypeError, match="train: resume must be a bool, got int 1"):
        train_tiny.train(None, None, None, resume=1)
