"""ml_dtypes arrays as inputs: every public entry point that takes real values takes an ml_dtypes
float array (bfloat16, float8_*, float6_*, float4_*) as its float32 values, and ml_dtypes' narrow
integers (int1/2/4, uint1/2/4) as integers wherever NumPy integers are accepted.

The reference for an ml_dtypes float ``x`` is the same call on ``x.astype(np.float32)``: that is the
path the rest of the suite proves against ml_dtypes, the specs and exact arithmetic, so equality
here (bit for bit, errors included) pins the ml_dtypes path to it. The conversion itself is checked
to be exact through ml_dtypes (`_float32_of`): its float32 values cast back to x's bits, equal its
float64 values, and for bfloat16 equal the bits moved into float32's upper half (bfloat16 is the
upper half of float32 by definition). For the integer types the reference is the same call on the
integers built here with ``np.arange``.

Inputs: every code of each float type of 8 bits or fewer (all 2**n bit patterns viewed as it), and
every one of bfloat16's 2**16 codes (subnormals, +-0, +-Inf, NaNs, the neighbours of FLT_MAX), in
order and shuffled among the finite ones, plus random values near 1.
"""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from minifp8 import codec, formats, fp8, fp8lm, gemm, mx, scaling, testing

ml_dtypes = pytest.importorskip("ml_dtypes")

FLOAT_NAMES = ("bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
               "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
               "float6_e3m2fn", "float4_e2m1fn")
INTEGER_NAMES = ("int1", "int2", "int4", "uint1", "uint2", "uint4")
FLOAT_TYPES = [name for name in FLOAT_NAMES if hasattr(ml_dtypes, name)]
INTEGER_TYPES = [name for name in INTEGER_NAMES if hasattr(ml_dtypes, name)]
ROW = 64  # two MX blocks, four NVFP4 blocks, half a 1x128 tile (zero-padded)


# ---- the inputs and their exact float32 values -------------------------------------------------
def _float32_of(x: np.ndarray) -> np.ndarray:
    """``x.astype(np.float32)``, after checking through ml_dtypes that it is exact."""
    dtype = x.dtype
    with np.errstate(invalid="ignore"):  # (casting a signalling NaN flags "invalid")
        wide = x.astype(np.float32)
        back = wide.astype(dtype)
        double = x.astype(np.float64)
    nan = np.isnan(wide)
    unsigned = np.uint16 if dtype.itemsize == 2 else np.uint8
    assert np.array_equal(back.view(unsigned)[~nan], x.view(unsigned)[~nan]), f"{dtype}: float32 does not round-trip"
    assert np.isnan(back[nan].astype(np.float32)).all()
    assert np.array_equal(np.isnan(double), nan)
    assert np.array_equal(wide[~nan].astype(np.float64).view(np.uint64), double[~nan].view(np.uint64))
    if dtype.name == "bfloat16":  # bfloat16 is float32's upper half
        shifted = (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        assert np.array_equal(shifted.view(np.uint32)[~nan], wide.view(np.uint32)[~nan])
        assert np.isnan(shifted[nan]).all()
    return wide


def _every_code(name: str) -> np.ndarray:
    """All 2**n bit patterns of the n-bit type ``name``, viewed as it."""
    dtype = np.dtype(getattr(ml_dtypes, name))
    bits = ml_dtypes.finfo(dtype).bits
    return np.arange(1 << bits, dtype=np.uint16 if bits > 8 else np.uint8).view(dtype)


def _rows(values: np.ndarray) -> np.ndarray:
    """``values`` repeated to fill whole rows of `ROW` (at least two rows)."""
    rows = max(2, -(-values.size // ROW))
    return np.resize(values, (rows, ROW))


def _float_inputs(name: str) -> dict[str, np.ndarray]:
    """Every code in order; the finite codes shuffled; random values near 1 (as ``name``)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    codes = _every_code(name)
    finite = codes[np.isfinite(codes.astype(np.float32))]
    near_one = rng.normal(0.0, 1.0, (4, ROW)).astype(np.float32).astype(codes.dtype)
    return {"every code": _rows(codes), "finite, shuffled": _rows(rng.permutation(finite)), "near 1": near_one}


# ---- comparing results bit for bit -------------------------------------------------------------
def _canonical(value):
    """``value`` as nested tuples that compare equal exactly when the bits are equal (dtypes, shapes,
    NaN payloads and signs of zero included)."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        return "array", array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(_canonical(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (tuple, list)):
        return tuple(_canonical(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, _canonical(item)) for key, item in value.items())
    if isinstance(value, float):
        return "float", struct.pack("<d", value)
    return type(value).__name__, repr(value)


def _outcome(call, x):
    try:
        return "returns", _canonical(call(x))
    except (TypeError, ValueError) as error:
        return "raises", type(error).__name__, str(error)


def _described(outcome) -> str:
    return f"raises {outcome[1]}: {outcome[2]}" if outcome[0] == "raises" else "returns a result"


def _assert_same_as_reference(calls: dict, x: np.ndarray, reference: np.ndarray, what: str) -> None:
    for label, call in calls.items():
        ours, expected = _outcome(call, x), _outcome(call, reference)
        assert ours == expected, (f"{label} on {x.dtype.name} ({what}) {_described(ours)}; on {reference.dtype.name} "
                                  f"it {_described(expected)}" + (" (another)" if ours[0] == expected[0] else ""))


def _random_bits(shape) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, shape, dtype=np.uint8)


# ---- the entry points, as functions of x -------------------------------------------------------
def _codec_calls(shape) -> dict:
    calls = {f"encode {name}": (lambda x, name=name: codec.encode(x, name)) for name in formats.CATALOGUE}
    calls.update({f"encode {name} saturate": (lambda x, name=name: codec.encode(x, name, saturate=True))
                  for name in formats.CATALOGUE})
    for name in ("E4M3", "E5M2"):
        for rounding in ("nearest_away", "toward_zero"):
            calls[f"encode {name} {rounding}"] = lambda x, name=name, rounding=rounding: codec.encode(
                x, name, rounding=rounding)
        calls[f"encode {name} stochastic"] = lambda x, name=name: codec.encode(
            x, name, rounding="stochastic", random_bits=_random_bits(shape))
        calls[f"quantize {name}"] = lambda x, name=name: codec.quantize(x, name)
    return calls


def _nonnegative(x: np.ndarray, wide: np.ndarray) -> np.ndarray:
    """The elements of x that are >= 0 or NaN (amaxes), as a 1-d array (``wide``: x as float32)."""
    return x.reshape(-1)[((wide >= 0) | np.isnan(wide)).reshape(-1)]


def _positive(x: np.ndarray, wide: np.ndarray) -> np.ndarray:
    """The finite elements of x that are > 0 (scales), as a 1-d array (``wide``: x as float32)."""
    return x.reshape(-1)[(np.isfinite(wide) & (wide > 0)).reshape(-1)]


def _recorded(amax):
    scaler = scaling.DelayedScaling(history_len=2)
    scaler.record_amax(amax)
    return scaler.amax_history.copy()


def _delayed(x, fmt):
    scaler = scaling.DelayedScaling(fmt, history_len=4)
    first = scaler.quantize(x)
    return first, scaler.quantize(x), scaler.amax_history.copy(), scaler.scale, scaler.scale_inv


def _scaling_calls() -> dict:
    calls = {}
    for fmt in ("E4M3", "E5M2"):
        calls[f"quantize_current {fmt}"] = lambda x, fmt=fmt: scaling.quantize_current(x, fmt)
        calls[f"quantize_current {fmt} power_of_2"] = lambda x, fmt=fmt: scaling.quantize_current(
            x, fmt, power_of_2=True)
        calls[f"quantize_rowwise {fmt}"] = lambda x, fmt=fmt: scaling.quantize_rowwise(x, fmt)
        calls[f"quantize_rowwise {fmt} axis 0"] = lambda x, fmt=fmt: scaling.quantize_rowwise(x, fmt, axis=0)
        calls[f"quantize_blockwise {fmt}"] = lambda x, fmt=fmt: scaling.quantize_blockwise(x, fmt)
        calls[f"quantize_blockwise {fmt} 128x128"] = lambda x, fmt=fmt: scaling.quantize_blockwise(
            x, fmt, block_shape=(128, 128))
        calls[f"DelayedScaling {fmt}"] = lambda x, fmt=fmt: _delayed(x, fmt)
        calls[f"quantize_with_scale {fmt}"] = lambda x, fmt=fmt: scaling.quantize_with_scale(x, np.float32(0.375), fmt)
    return calls


def _mx_calls(shape) -> dict:
    calls = {f"mx.quantize {name}": (lambda x, name=name: mx.quantize(x, name))
             for name in ("MXFP8_E4M3", "MXFP8_E5M2", "MXFP6_E3M2", "MXFP6_E2M3", "MXFP4_E2M1")}
    for mode in ("ceil", "even", "rceil"):
        calls[f"mx.quantize MXFP8_E4M3 {mode}"] = lambda x, mode=mode: mx.quantize(x, "MXFP8_E4M3", scale_mode=mode)
    calls["mx.quantize MXFP4_E2M1 axis 0, block 2"] = lambda x: mx.quantize(x, "MXFP4_E2M1", axis=0, block_size=2)
    calls["mx.quantize MXFP8_E5M2 stochastic"] = lambda x: mx.quantize(
        x, "MXFP8_E5M2", rounding="stochastic", random_bits=_random_bits(shape))
    calls["quantize_nvfp4"] = lambda x: mx.quantize_nvfp4(x)
    calls["quantize_nvfp4 axis 0, global_amax"] = lambda x: mx.quantize_nvfp4(x, axis=0, global_amax=3.0)
    return calls


def _fake_quantize_calls() -> dict:
    calls = {}
    for recipe in fp8.RECIPES:
        for fmt in ("E4M3", "E5M2"):
            if recipe == "delayed":
                call = lambda x, fmt=fmt: fp8.fake_quantize(x, "delayed", fmt, scaler=scaling.DelayedScaling(fmt))
            else:
                call = lambda x, recipe=recipe, fmt=fmt: fp8.fake_quantize(x, recipe, fmt)
            calls[f"fake_quantize {recipe} {fmt}"] = call
    calls["fake_quantize blockwise weight"] = lambda x: fp8.fake_quantize(x, "blockwise", "E4M3", weight=True)
    calls["fake_quantize mxfp8 axis 0"] = lambda x: fp8.fake_quantize(x, "mxfp8", "E5M2", axis=0)
    return calls


def _testing_calls(wide: np.ndarray) -> dict:
    """testing.compare / compare_mx with the backend results computed from float32 ``wide`` (some
    codes changed, so that the reports hold mismatch rows showing the inputs and their bits)."""
    calls = {}
    for fmt in ("E4M3", "E5M2", "E2M1"):
        finite_for_fmt = formats.get(fmt).has_nan or not np.isnan(wide).any()
        actual = codec.encode(wide, fmt) if finite_for_fmt else np.zeros(wide.shape, np.uint8)
        actual.reshape(-1)[::7] ^= 1
        calls[f"compare {fmt}"] = lambda x, fmt=fmt, actual=actual: testing.compare(actual, x, fmt, max_rows=5)
        calls[f"compare {fmt} nan=class"] = lambda x, fmt=fmt, actual=actual: testing.compare(
            actual, x, fmt, nan="class", saturate=True)
    for elem in ("MXFP8_E4M3", "MXFP4_E2M1"):
        expected = mx.quantize(wide, elem)
        scales, codes = expected.scales.copy(), expected.codes.copy()
        scales.reshape(-1)[::3] ^= 1
        codes.reshape(-1)[::5] ^= 1
        calls[f"compare_mx {elem}"] = lambda x, s=scales, c=codes, elem=elem: testing.compare_mx(s, c, x, elem)
    if np.isfinite(wide).all():
        expected = mx.quantize_nvfp4(wide)
        codes = expected.codes.copy()
        codes.reshape(-1)[::5] ^= 1
        calls["compare_mx NVFP4"] = lambda x, s=expected.scales, c=codes: testing.compare_mx(s, c, x, "NVFP4")
    return calls


# ---- floats: the same results as for x.astype(np.float32) -------------------------------------
@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_codec_takes_ml_dtypes_floats_as_their_float32_values(name):
    for what, x in _float_inputs(name).items():
        _assert_same_as_reference(_codec_calls(x.shape), x, _float32_of(x), what)


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_encode_scalar_and_block_reference_take_ml_dtypes_scalars(name):
    x = _every_code(name)
    if x.size > 256:  # bfloat16: a spread of 512 of its codes, specials included
        x = x[np.r_[0:64, 0x7F00:0x7F90, 0x8000:0x8040, 0xFF70:0xFF90, 0x3F00:0x3F80, 0x0080:0x00A0]]
    wide = _float32_of(x)
    for fmt in ("E4M3", "E2M1"):
        for ours, reference in zip(x, wide):
            assert _outcome(lambda v: codec.encode_scalar(v, fmt), ours) == _outcome(
                lambda v: codec.encode_scalar(v, fmt), reference), (fmt, float(reference))
    for start in range(0, x.size, 32):
        block = slice(start, start + 32)
        assert _outcome(lambda b: mx.quantize_block_reference(b, "MXFP8_E4M3"), x[block]) == _outcome(
            lambda b: mx.quantize_block_reference(b, "MXFP8_E4M3"), wide[block])


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_scaling_takes_ml_dtypes_floats_as_their_float32_values(name):
    for what, x in _float_inputs(name).items():
        wide = _float32_of(x)
        _assert_same_as_reference(_scaling_calls(), x, wide, what)
        amax, amax_wide = _nonnegative(x, wide), _nonnegative(wide, wide)
        _assert_same_as_reference({"scale_from_amax": lambda a: scaling.scale_from_amax(a, "E4M3"),
                                   "record_amax": lambda a: [_recorded(a[i]) for i in (0, a.size // 2, -1)]},
                                  amax, amax_wide, what + ", as amax")
        scale, scale_wide = _positive(x, wide), _positive(wide, wide)
        _assert_same_as_reference({"quantize_with_scale": lambda s: scaling.quantize_with_scale(
                                       np.linspace(-500, 500, s.size, dtype=np.float32), s, "E5M2")},
                                  scale, scale_wide, what + ", as scale")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_mx_and_nvfp4_take_ml_dtypes_floats_as_their_float32_values(name):
    for what, x in _float_inputs(name).items():
        wide = _float32_of(x)
        _assert_same_as_reference(_mx_calls(x.shape), x, wide, what)
        amax, amax_wide = _nonnegative(x, wide), _nonnegative(wide, wide)
        calls = {f"shared_exponents {mode}": (lambda a, mode=mode: mx.shared_exponents(a, "E4M3", mode))
                 for mode in ("floor", "ceil", "even", "rceil")}
        _assert_same_as_reference(calls, amax, amax_wide, what + ", as amax")
        positive, positive_wide = _positive(x, wide), _positive(wide, wide)
        ramp = np.linspace(-6, 6, 32, dtype=np.float32)
        global_amax = {"quantize_nvfp4 global_amax (an ml_dtypes scalar)": lambda a: [
            mx.quantize_nvfp4(ramp, global_amax=a[i]) for i in (0, a.size // 2, -1)]}
        _assert_same_as_reference(global_amax, positive, positive_wide, what + ", as global_amax")


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_fake_quantize_takes_ml_dtypes_floats_as_their_float32_values(name):
    for what, x in _float_inputs(name).items():
        _assert_same_as_reference(_fake_quantize_calls(), x, _float32_of(x), what)


@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_compare_takes_ml_dtypes_float_inputs_as_their_float32_values(name):
    for what, x in _float_inputs(name).items():
        wide = _float32_of(x)
        _assert_same_as_reference(_testing_calls(wide), x, wide, what)


def test_float8_e5m2_keeps_the_results_it_had():
    """float8_e5m2 (dtype kind 'f', unlike every other ml_dtypes float) was accepted before, and
    encode and mx.quantize took it through float64: the float32 route gives the same codes."""
    if "float8_e5m2" not in FLOAT_TYPES:
        pytest.skip("ml_dtypes has no float8_e5m2")
    for what, x in _float_inputs("float8_e5m2").items():
        calls = {**_codec_calls(x.shape), **{k: v for k, v in _mx_calls(x.shape).items() if "nvfp4" not in k}}
        _assert_same_as_reference(calls, x, x.astype(np.float64), what + ", against float64")


# ---- integers: the same results as for the integers themselves ---------------------------------
def _integer_inputs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(every value of ``name`` as it, the same values as int64 built by np.arange), in rows."""
    bits = ml_dtypes.iinfo(getattr(ml_dtypes, name)).bits
    values = np.arange(1 << bits) - (0 if name.startswith("u") else 1 << (bits - 1))
    values = _rows(values)
    x = values.astype(getattr(ml_dtypes, name))
    assert np.array_equal(x.astype(np.int64), values)  # (ml_dtypes holds every value)
    return x, values


@pytest.mark.parametrize("name", INTEGER_TYPES)
def test_ml_dtypes_integers_are_integers_where_integers_are_accepted(name):
    x, values = _integer_inputs(name)
    calls = {**_codec_calls(x.shape), **_scaling_calls(), **_mx_calls(x.shape)}
    _assert_same_as_reference(calls, x, values, "every value")
    amax = {"scale_from_amax": lambda a: scaling.scale_from_amax(a, "E4M3"),
            "shared_exponents": lambda a: mx.shared_exponents(a, "E4M3"),
            "global_amax": lambda a: mx.quantize_nvfp4(np.ones(16, np.float32), global_amax=a[-1])}
    _assert_same_as_reference(amax, x.reshape(-1)[values.reshape(-1) >= 0], values.reshape(-1)[values.reshape(-1) >= 0],
                              "every value >= 0, as amax")
    for ours, reference in zip(x.reshape(-1)[:16], values.reshape(-1)[:16]):
        assert codec.encode_scalar(ours, "E4M3") == codec.encode_scalar(int(reference), "E4M3")
    assert mx.quantize_block_reference(x[0], "MXFP8_E4M3") == mx.quantize_block_reference(
        [int(v) for v in values[0]], "MXFP8_E4M3")


@pytest.mark.parametrize("name", INTEGER_TYPES)
def test_ml_dtypes_integers_are_refused_where_integers_are(name):
    x, _ = _integer_inputs(name)
    with pytest.raises(TypeError, match=f"x must be a float16, float32 or float64 array \\(any byte order\\) or an "
                                        f"ml_dtypes float array \\(bfloat16, float8_\\*, ...\\), got dtype {name}"):
        fp8.fake_quantize(x, "current")
    with pytest.raises(TypeError, match=f"or an ml_dtypes float array\\) of the inputs the backend was given, "
                                        f"got dtype {name}"):
        testing.compare(np.zeros(x.shape, np.uint8), x, "E4M3")
    with pytest.raises(TypeError, match=f"got dtype {name}"):
        testing.compare_mx(np.zeros((x.shape[0], 2), np.uint8), np.zeros(x.shape, np.uint8), x, "MXFP8_E4M3")


# ---- what stays refused, and what is unchanged --------------------------------------------------
@pytest.mark.parametrize("name", ["complex32", "bcomplex32"])
def test_ml_dtypes_complex_arrays_are_refused_as_complex(name):
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes has no {name}")
    x = np.zeros(32, getattr(ml_dtypes, name))
    for call in (lambda: codec.encode(x, "E4M3"), lambda: scaling.quantize_current(x),
                 lambda: mx.quantize(x, "MXFP8_E4M3"), lambda: mx.quantize_nvfp4(x)):
        with pytest.raises(TypeError, match=f"x must hold real numbers, got complex values \\({name}\\)"):
            call()
    with pytest.raises(TypeError, match=f"got dtype {name}"):
        fp8.fake_quantize(x, "fp8")


def test_conversions_raise_no_floating_point_error_under_a_strict_errstate():
    """Converting a signalling NaN (bfloat16's 0x7F81, ...) flags "invalid": neither the conversion
    nor compare's classification of a mismatch at such an input may leak a FloatingPointError into
    a caller's np.errstate(all="raise")."""
    for name in FLOAT_TYPES:
        x = _every_code(name)
        expected = codec.encode(_float32_of(x), "E5M2")
        wrong = expected ^ np.uint8(1)
        with np.errstate(all="raise"):
            assert np.array_equal(codec.encode(x, "E5M2"), expected), name
            assert testing.compare(expected, x, "E5M2").ok, name
            assert testing.compare(wrong, x, "E5M2").count == x.size, name
            assert testing.compare(wrong, _float32_of(x), "E5M2").count == x.size, name


def test_codes_arrays_keep_their_meaning():
    """``actual`` and ``decode``'s codes are codes: an ml_dtypes array of the format is read by its
    bits, another format's is refused, and bfloat16 values are not codes (unchanged by this file's rule)."""
    x = np.array([1.0, -448.0, 0.01171875], np.float32)
    assert testing.compare(x.astype(ml_dtypes.float8_e4m3fn), x, "E4M3").ok
    with pytest.raises(TypeError, match="actual has dtype float8_e5m2, which holds E5M2 codes"):
        testing.compare(x.astype(ml_dtypes.float8_e5m2), x, "E4M3")
    with pytest.raises(TypeError, match="actual.astype\\(np.float32\\) holds bfloat16 values exactly"):
        testing.compare(x.astype(ml_dtypes.bfloat16), x, "E4M3")
    with pytest.raises(TypeError, match="codes must be an integer array"):
        codec.decode(x.astype(ml_dtypes.bfloat16), "E4M3")


def test_fp8_all_reduce_takes_bfloat16_gradients_as_their_float32_values():
    rng = np.random.default_rng(3)
    grads = [(rng.standard_normal((4, 32)) * 1e-3).astype(ml_dtypes.bfloat16) for _ in range(3)]
    narrow = fp8lm.fp8_all_reduce(grads, "E5M2")
    wide = fp8lm.fp8_all_reduce([_float32_of(g) for g in grads], "E5M2")
    for field in dataclasses.fields(narrow):
        a, b = getattr(narrow, field.name), getattr(wide, field.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, field.name


def test_compare_matmul_takes_a_bfloat16_output_as_its_float32_values():
    rng = np.random.default_rng(4)
    a = codec.encode(rng.standard_normal((3, 32)), "E4M3")
    b = codec.encode(rng.standard_normal((32, 5)), "E4M3")
    exact = codec.decode(a, "E4M3").astype(np.float64) @ codec.decode(b, "E4M3").astype(np.float64)
    output = exact.astype(ml_dtypes.bfloat16)
    output[1, 2] = -output[1, 2]  # one wrong output, reported the same either way
    narrow = gemm.compare_matmul(output, a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3", output="bfloat16")
    wide = gemm.compare_matmul(_float32_of(output), a, 1.0, b, 1.0, a_format="E4M3", b_format="E4M3",
                               output="bfloat16")
    assert str(narrow) == str(wide) and narrow.count == 1 and np.array_equal(narrow.tolerance, wide.tolerance)
