"""minifp8 inside a strict caller: warnings as errors and ``np.errstate(all="raise")``.

Backends import minifp8 in test suites that run with ``-W error``, some of them under
``np.seterr(all="raise")``. On valid input the library must then give what it gives under NumPy's
default error state (where underflow is silent and the rest warns), raise nothing of its own
arithmetic, and leave the caller's error state as it found it. The reference for each call is the
same call under the default state, which the rest of the suite proves against ml_dtypes, the
scalar definition and the specs; the strict call must equal it bit for bit. Most products here
underflow on purpose: values scaled into or below float32's subnormals are rounded, as they must be.
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from minifp8 import codec, formats, fp8, fp8lm, golden, mx, optim, scaling, testing, train_tiny
from minifp8 import functional as F
from minifp8.autograd import Tensor
from minifp8.nn import Parameter

NUMPY_DEFAULT_STATE = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}
# Zeros, NaNs, infinities, float32's extremes, values that round into (or below) its subnormals
# from float64, and the formats' overflow boundaries.
SPECIALS = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 3.0e38, -3.0e38, 1e-45, -1e-40, 1e-30, 2.0**-149,
            2.0**-127, 2.0**-17, 1.0, -2.5, 448.0, 464.0, 465.0, 57344.0, 61440.0, 1e5]


def _as(dtype, values) -> np.ndarray:
    with np.errstate(all="ignore"):  # (the test's own conversions: 1e-45 rounds, 3e38 overflows float16)
        return np.asarray(values, np.float64).astype(dtype)


def _same(a, b) -> bool:
    """Equal bit for bit: arrays by dtype, shape and bytes; dataclasses, tuples, lists, dicts by parts."""
    if isinstance(a, (np.ndarray, np.generic)):
        return (isinstance(b, (np.ndarray, np.generic)) and a.dtype == b.dtype and np.shape(a) == np.shape(b)
                and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return isinstance(b, float) and (a == b or (a != a and b != b))
    return a == b


def _default_then_strict(call):
    """``call()`` under NumPy's default state, then under ``np.errstate(all="raise")``, both with
    warnings as errors; checks that the two agree and that the caller's state is left as it was."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(**NUMPY_DEFAULT_STATE):
            default = call()
        with np.errstate(all="raise"):
            before = np.geterr()
            strict = call()
            assert np.geterr() == before
    assert _same(default, strict)
    return strict


def _mx_result(array):
    return array.scales, array.codes, array.dequantize()


def _scaled_result(scaled):
    return scaled.codes, scaled.scale, scaled.scale_inv, scaled.amax, scaled.dequantize()


@pytest.mark.parametrize("fmt", list(formats.CATALOGUE.values()), ids=lambda f: f.name)
def test_codec_and_its_edge_cases(fmt):
    values = [v for v in SPECIALS if fmt.has_nan or v == v]

    def call():
        results = [testing.edge_cases(fmt), codec.decode(np.arange(1 << fmt.bits, dtype=np.uint8), fmt)]
        for dtype in (np.float16, np.float32, np.float64):
            x = _as(dtype, values)
            for rounding in ("nearest_even", "nearest_away", "toward_zero"):
                for saturate in (False, True):
                    results.append(codec.quantize(x, fmt, rounding=rounding, saturate=saturate))
            bits = np.arange(x.size, dtype=np.uint8)
            results.append(codec.encode(x, fmt, rounding="stochastic", random_bits=bits))
        results.append([codec.encode_scalar(v, fmt) for v in values])
        return results

    _default_then_strict(call)


@pytest.mark.parametrize("fmt", ["E4M3", "E5M2"])
def test_scaling_recipes(fmt):
    finite = _as(np.float32, [v for v in SPECIALS if np.isfinite(v)])
    x = np.stack([finite, finite * np.float32(1e-30), finite * np.float32(2.0**-100)])

    def call():
        results = [scaling.scale_from_amax(amax, fmt) for amax in (1e-40, 1e-45, 3e38, 0.0, np.inf)]
        results.append(scaling.scale_from_amax(np.abs(x), fmt, power_of_2=True))
        results.append(scaling.quantize_with_scale(x, np.float32(1e-30), fmt))
        for power_of_2 in (False, True):
            results.append(_scaled_result(scaling.quantize_current(x, fmt, power_of_2=power_of_2)))
            results.append(_scaled_result(scaling.quantize_rowwise(x, fmt, power_of_2=power_of_2)))
            results.append(_scaled_result(scaling.quantize_blockwise(x, fmt, power_of_2=power_of_2)))
            results.append(_scaled_result(scaling.quantize_blockwise(x, fmt, block_shape=(128, 128),
                                                                     power_of_2=power_of_2)))
        # margin 8: 448 / 2**8 / 3e38 is a float32 subnormal, the scale of a tensor near FLT_MAX
        scaler = scaling.DelayedScaling(fmt, history_len=3, margin=scaling._margin_range(formats.get(fmt))[1])
        for tensor in (x, _as(np.float32, [3.0e38, 1.0]), x, _as(np.float32, [np.nan, np.inf])):
            results.append((_scaled_result(scaler.quantize(tensor)), scaler.scale, scaler.scale_inv))
        return results

    _default_then_strict(call)


def test_scales_of_a_tiny_amax():
    """An amax below about 1e-36 makes 448 / amax overflow: the scale is FLT_MAX, and 1 / FLT_MAX a
    subnormal, whose division raised under all="raise" in ScaledTensor, DelayedScaling and
    FP8State.load_state_dict (the fast casts ignored it)."""
    tiny = _as(np.float32, [1e-45, 0.0])

    def call():
        results = [_scaled_result(scaling.quantize_current(tiny)), _scaled_result(scaling.quantize_rowwise(tiny)),
                   _scaled_result(scaling.quantize_blockwise(tiny, power_of_2=False))]
        scaler = scaling.DelayedScaling(history_len=2)
        scaler.quantize(tiny)
        results.append((_scaled_result(scaler.quantize(_as(np.float32, [1.0]))), scaler.scale, scaler.scale_inv))
        return results

    _default_then_strict(call)
    from minifp8 import nn
    linear = nn.Linear(2, 2, rng=np.random.default_rng(0))
    state = fp8.apply_recipe(linear, "delayed", history_len=2)
    linear(tiny.reshape(1, 2))
    state.step()
    saved = state.state_dict()
    assert any(np.float32(value) == np.finfo(np.float32).max for key, value in saved.items() if key.endswith(".scale"))
    with np.errstate(all="raise"):
        state.load_state_dict(saved)


def test_mx_and_nvfp4():
    rows = _as(np.float32, (SPECIALS * 3)[:64]).reshape(2, 32)
    tiny = _as(np.float32, np.resize([1.0, 2.0**-20, 1e-38, -3.0, 2.0**-140, 0.0, -1e-30, 5.0], 64).reshape(2, 32))
    finite = np.where(np.isfinite(rows), rows, np.float32(1))
    tinier = _as(np.float32, tiny.astype(np.float64) * 1e-8)
    tiny64 = tiny.astype(np.float64) * 1e-290  # (float64 subnormals)

    def call():
        results = []
        for name in ("MXFP8_E4M3", "MXFP8_E5M2", "MXFP6_E3M2", "MXFP6_E2M3", "MXFP4_E2M1"):
            for mode in mx.SCALE_MODES:
                for x in (rows if name.startswith("MXFP8") else finite, tiny, tiny64):
                    results.append(_mx_result(mx.quantize(x, name, scale_mode=mode)))
        for x in (finite, tiny, tinier):
            for global_amax in (None, 1e-30, 3e38):
                results.append(_mx_result(mx.quantize_nvfp4(x, global_amax=global_amax)))
        return results

    _default_then_strict(call)


def test_oracle_reports():
    x = _as(np.float32, SPECIALS)
    blocks = _as(np.float32, np.resize([1e6, 2.0**-20, 1e-38, -3.0, 2.0**-140, 5.0], 64).reshape(2, 32))
    blocks[1, 3] = np.nan  # (a NaN block; the first stays finite, and its small elements underflow)

    def call():
        results = []
        for fmt in ("E4M3", "E5M2", "E4M3FNUZ"):
            right = codec.encode(x, fmt)
            wrong = right ^ np.uint8(1)
            for nan in ("exact", "class"):
                results.append(str(testing.compare(wrong, x, fmt, nan=nan)))
                testing.assert_codes_equal(right, x, fmt, nan=nan)
                with pytest.raises(AssertionError) as raised:
                    testing.assert_codes_equal(wrong, x, fmt, nan=nan)
                results.append(str(raised.value))
        for name in ("MXFP8_E4M3", "MXFP4_E2M1"):
            quantized = mx.quantize(blocks, name)
            results.append(str(testing.compare_mx(quantized.scales, quantized.codes, blocks, name)))
            results.append(str(testing.compare_mx(quantized.scales ^ np.uint8(1), quantized.codes ^ np.uint8(1),
                                                  blocks, name, nan="class")))
            testing.assert_mx_equal(quantized.scales, quantized.codes, blocks, name)
        return results

    _default_then_strict(call)


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_fake_quantize(recipe):
    special = _as(np.float32, np.resize(SPECIALS, 256)).reshape(2, 128)
    finite = np.where(np.isfinite(special), special, np.float32(2.0**-130))
    tiny = _as(np.float32, finite.astype(np.float64) * 1e-30)
    big = _as(np.float32, np.resize(finite, (512, 512)).astype(np.float64) * 1e-3)  # enough for the cast's threads

    def call():
        results = []
        for fmt in ("E4M3", "E5M2"):
            for x in (special, finite, tiny, big):
                scaler = None
                if recipe == "delayed":  # a scale that pushes most of x below E4M3's and float32's range
                    scaler = scaling.DelayedScaling(fmt)
                    scaler.scale, scaler.scale_inv = np.float32(1e-30), np.float32(1e30)
                results.append(fp8.fake_quantize(x, recipe, fmt, scaler=scaler))
                if recipe in ("mxfp8", "blockwise") and x is not special:
                    results.append(fp8.fake_quantize(np.ascontiguousarray(x.T), recipe, fmt, axis=0))
        return results

    _default_then_strict(call)


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_fake_quantize_of_a_signalling_nan_as_the_largest_element(recipe):
    """Found by a review of fastcast: a signalling NaN that x.max() returns (here the last element)
    flagged "invalid" in the amax's scalar arithmetic, and a float64 one in the float32 conversions,
    under a raising error state or warnings as errors, where the references stay silent."""
    snan32 = np.array([0x7F800001, 0xFFA00000], np.uint32).view(np.float32)
    snan64 = np.array([0x7FF0000000000001], np.uint64).view(np.float64)[0]
    inputs = [np.array([1.0, -2.5, snan32[0]], np.float32), np.array([[3.0, snan32[1]], [0.5, -1.0]], np.float32),
              np.array([1.0, -2.5, snan64]), np.full(3, snan32[0])]

    def call():
        results = []
        for x in inputs:
            scaler = scaling.DelayedScaling() if recipe == "delayed" else None
            results.append(fp8.fake_quantize(x, recipe, scaler=scaler))
        return results

    for (values, _), x in zip(_default_then_strict(call), inputs):
        assert np.isnan(values.reshape(-1)[np.isnan(x.reshape(-1))]).all()


@pytest.mark.parametrize("recipe", ["current", "delayed", "blockwise"])
def test_fake_quantize_whose_scaled_back_values_overflow(recipe):
    """An amax near float32's largest value, under power-of-two scales, rounds up to a scaled value
    whose product with the inverse scale overflows to Inf, as in the references; the fast cast's
    sparse path (one such element) and dense one (most elements inside the range) must not raise."""
    sparse = _as(np.float32, [3.2074507e38, 1.0])
    dense = np.full((4, 128), 1e-3, np.float32)
    dense[0, 0] = sparse[0]

    def call():
        results = []
        for x in (sparse, dense):
            options = {} if recipe == "blockwise" else {"power_of_2": True}
            scaler = None
            if recipe == "delayed":  # (a delayed scale is a current one once its history holds this amax)
                scaler = scaling.DelayedScaling("E5M2")
                scaler.scale = scaling.scale_from_amax(np.float32(3.2074507e38), "E5M2", power_of_2=True)
                scaler.scale_inv = np.float32(1) / scaler.scale
                options = {}
            results.append(fp8.fake_quantize(x, recipe, "E5M2", scaler=scaler, **options))
        return results

    _default_then_strict(call)


TINY = ["--steps", "3", "--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2",
        "--n-embd", "16", "--eval-interval", "3", "--eval-batches", "1", "--log-interval", "3", "--warmup-steps", "1"]


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_training_steps(recipe):
    """A loss scale of 1e-30 makes the gradients tiny: their products underflow everywhere."""
    config, runs = train_tiny.parse_args(TINY + ["--recipe", recipe, "--loss-scale", "1e-30"])
    dataset = train_tiny.data_module.load_dataset()

    def call():
        metrics = train_tiny.train(runs[0], config, dataset, print_fn=lambda *args: None)
        return {key: value for key, value in metrics.items() if key not in ("time_s", "memory")}

    _default_then_strict(call)


def test_functional_ops_whose_exponentials_and_products_underflow():
    logits = _as(np.float32, [[0.0, -90.0, -104.0, -200.0, 3.0], [1.0, -95.0, 2.0, -120.0, -1e30]])

    def call():
        results = [F.softmax(Tensor(logits)).data, F.log_softmax(Tensor(logits)).data]
        z = Tensor(logits, requires_grad=True)
        loss = F.cross_entropy(z, np.array([0, 2]))
        loss.backward()
        results += [loss.data, z.grad]
        x = Tensor(_as(np.float32, [1e-30, -1e-25, 2.0**-140, 0.0, 1.0, -3.0, 1e30]), requires_grad=True)
        y = F.gelu(x)
        y.backward(np.full(y.shape, 1e-10, np.float32))
        results += [y.data, x.grad]
        x = Tensor(_as(np.float32, [100.0, -90.0, 0.0, -200.0]), requires_grad=True)  # (a review's find: exp(-|x|)
        y = F.sigmoid(x)                                                                 # underflowed, s exact)
        y.backward(np.ones(y.shape, np.float32))
        results += [y.data, x.grad]
        z = Tensor(_as(np.float32, [[0.0, 1.0, 2.0], [-np.inf] * 3, [np.inf, 0.0, 1.0]]), requires_grad=True)
        loss = F.cross_entropy(z, np.array([2, -100, -100]), ignore_index=-100)  # (a review's find: ignored
        loss.backward()                                                             # rows warned, all -inf or +inf)
        results += [loss.data, z.grad]
        q = Tensor(_as(np.float32, [[[10.0, 0.0], [0.0, 10.0], [-10.0, 0.0]]]), requires_grad=True)
        k = Tensor(_as(np.float32, [[[10.0, 0.0], [0.0, -10.0], [-10.0, 5.0]]]), requires_grad=True)
        v = Tensor(_as(np.float32, [[[1e-20, 1.0], [2.0, -1e-30], [3.0, 1e-38]]]), requires_grad=True)
        out = F.scaled_dot_product_attention(q, k, v, scale=4.0)
        out.backward(np.full(out.shape, 1e-20, np.float32))
        return results + [out.data, q.grad, k.grad, v.grad]

    _default_then_strict(call)


def test_softmax_loss_and_attention_whose_logits_span_more_than_float32_max():
    """A review's find: the max shift of logits 3e38 and -3e38 overflowed (a FloatingPointError here),
    where the answer, exp(-inf) = 0, is exact: softmax [1, 0, 0], the loss 0, attention the first row."""
    logits = _as(np.float32, [[3e38, -3e38, 0.0]])

    def call():
        z = Tensor(logits, requires_grad=True)
        loss = F.cross_entropy(z, np.array([0]))
        loss.backward()
        q = Tensor(_as(np.float32, [[1.0, 0.0]]), requires_grad=True)
        k = Tensor(_as(np.float32, [[3e38, 0.0], [-3e38, 0.0]]), requires_grad=True)
        v = Tensor(_as(np.float32, [[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0)
        out.backward(np.ones(out.shape, np.float32))
        log_z = Tensor(logits, requires_grad=True)  # (a later review's find: log_softmax was missed)
        log_probabilities = F.log_softmax(log_z)
        log_probabilities.backward(_as(np.float32, [[1.0, 0.0, 0.0]]))
        return [F.softmax(Tensor(logits)).data, loss.data, z.grad, out.data, q.grad, k.grad, v.grad,
                log_probabilities.data, log_z.grad]

    results = _default_then_strict(call)
    np.testing.assert_array_equal(results[7], _as(np.float32, [[0.0, -np.inf, -3e38]]))
    np.testing.assert_array_equal(results[8], [[0.0, 0.0, 0.0]])  # (g - softmax * sum g: 1 - 1, 0 - 0, 0 - 0)
    np.testing.assert_array_equal(results[0], [[1.0, 0.0, 0.0]])
    assert results[1] == 0.0
    np.testing.assert_array_equal(results[3], [[1.0, 2.0]])


def test_golden_files(tmp_path):
    def call():
        folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        return golden.write(folder, ["E4M3", "E8M0"])["entries"]  # (each with its file's sha256)

    _default_then_strict(call)


def test_an_error_inside_leaves_the_callers_state_alone():
    for state in ({"all": "raise"}, {"all": "ignore"}, {"over": "raise", "under": "warn"}):
        with np.errstate(**state):
            before = np.geterr()
            with pytest.raises(ValueError, match="has no NaN"):
                codec.encode(np.float32(np.nan), "E2M1")
            with pytest.raises(ValueError, match="finite inputs"):
                mx.quantize_nvfp4(np.array([np.inf, 1.0], np.float32))
            assert np.geterr() == before


@pytest.mark.parametrize("optimizer", ["SGD", "AdamW", "FP8AdamW", "FP8AdamW-O3"])
def test_a_hand_written_loops_backward_and_step(optimizer):
    """Outside train(): the user's forward pass (no underflow in it), then backward() and step(), whose
    gradients of 1e-30 underflow in the backward GEMMs, in momenta and in squared gradients."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    weights = rng.standard_normal((8, 3)).astype(np.float32)
    make = {"SGD": lambda p: optim.SGD(p, lr=0.1, momentum=0.9), "AdamW": lambda p: optim.AdamW(p),
            "FP8AdamW": lambda p: fp8lm.FP8AdamW(p),
            "FP8AdamW-O3": lambda p: fp8lm.FP8AdamW(p, master_weights="float16")}[optimizer]

    def call():
        w = Parameter(weights)
        opt = make([w])
        results = []
        for scale in (1e-30, 1e-38):
            with np.errstate(**NUMPY_DEFAULT_STATE):  # (the forward pass and the seed are the user's: not
                y = Tensor(x) @ w  # under test; NumPy 2.0 flags 1e-38 -> float32 as an underflow)
                seed = np.full(y.shape, scale, np.float32)
            opt.zero_grad()
            y.backward(seed)
            results.append(w.grad.copy())
            opt.step()
            results.append(w.data.copy())
        return results

    _default_then_strict(call)


def test_fp8lm_storage_and_float64_fake_quantize():
    tiny = _as(np.float32, [1e-38, -3e-46, 2.0**-148, 0.0, 1e-8, 448e-8])

    def call():
        results = []
        for kind in ("E4M3", "E5M2", "float16"):
            stored, scale = fp8lm.store_scaled(tiny, kind)
            results += [stored, scale, fp8lm.load_scaled(stored, np.float32(3e38), kind)]
        grads = [_as(np.float32, [1e-40, -2e-39, 3e-41, 0.0]), _as(np.float32, [2e-40, 1e-39, -5e-42, 1e-45])]
        for fmt in ("E4M3", "E5M2"):
            results.append(fp8lm.fp8_all_reduce(grads, fmt))
        x64 = np.array([1e-50, -1e-46, 2.0**-150, 1.0, 3.0e38])
        for recipe in ("current", "blockwise", "mxfp8"):
            results.append(fp8.fake_quantize(x64, recipe, "E4M3"))
        return results

    _default_then_strict(call)


def test_compare_mx_nvfp4_under_a_strict_caller():
    x = np.resize(np.array([1.0, 2.0**-20, 1e-38, -3.0, 2.0**-140, 0.0, -1e-30, 5.0], np.float32), 64).reshape(2, 32)
    q = mx.quantize_nvfp4(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default = str(testing.compare_mx(q.scales, q.codes ^ np.uint8(1), x, "NVFP4"))
        with np.errstate(all="raise"):
            strict = str(testing.compare_mx(q.scales, q.codes ^ np.uint8(1), x, "NVFP4"))
    assert strict == default


def test_fp8_state_loads_a_float64_amax_history_that_rounds_into_the_subnormals():
    """A checkpoint's float64 amax history (1e-40) becomes float32 (a subnormal) on load, quietly under
    either error state; one float32 cannot hold (1e-50, once loaded as 0) is refused (test_fp8)."""
    from minifp8.model import GPT, GPTConfig
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)

    def call():
        state = fp8.apply_recipe(GPT(config, rng=np.random.default_rng(0)), "delayed")
        saved = state.state_dict()
        key = next(key for key in saved if key.endswith(".amax_history"))
        history = np.zeros(np.shape(saved[key]), np.float64)
        history[:2] = [1e-40, 2.0]
        state.load_state_dict({**saved, key: history})
        return state.state_dict()[key]

    _default_then_strict(call)
