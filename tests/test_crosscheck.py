"""The oracle checks real backends with its own helpers (issue 7).

Each backend's disagreements with minifp8 are documented here as that backend's behaviour, with
an example, and asserted so that a change in the backend is noticed:

- ml_dtypes (0.5, 0.6) and PyTorch (2.13; 2.11 on CUDA too) convert float64 to float8 through
  float32, so inputs just off a rounding midpoint are rounded twice and land on the wrong side half
  of the time.
- ml_dtypes and PyTorch round float32 subnormals in (2**-127, 1.5 * 2**-127) up to E8M0 2**-126;
  2**-127 is nearer.
- PyTorch's E8M0 cast takes |x|, maps 0 to 2**-127 (0x00) and rounds values below 2**-127 to it;
  ml_dtypes and minifp8 map 0 and negative numbers to NaN (0xFF).
- PyTorch >= 2.13 saturates E4M3 casts (Inf and overflow -> +-448) and does not saturate E5M2
  and the FNUZ formats.
- PyTorch on CUDA (2.11, CUDA 13.0, an H200, 2026-12-04) gives the CPU's codes: all 2**32 float32
  inputs agree with minifp8 for the four FP8 formats (NaN codes by class; ``-m slow``), as do
  every float16 and bfloat16 input. From float16 it casts NaNs of either sign to 0x7F (the CPU,
  and CUDA from bfloat16, keep the sign: 0x7F, 0xFF); E5M2's NaN is 0x7F/0xFF where minifp8's is
  0x7E/0xFE.
- ONNX Runtime (1.32, CPU) matches with ``saturate=1``; with ``saturate=0`` it casts E4M3 inputs
  in [480, 496) to 448 (the table says NaN, as ORT gives for (464, 480) and from 496 on) and E5M2
  inputs in [61440, 65536) to NaN (the table says Inf, as ORT gives from 65536 on); and it rounds
  float64 through float32.
- tinygrad (0.14) casts float64 to FP8 in Python (``tinygrad.dtype.float_to_fp8``), saturating
  finite values: it agrees on every finite input, float64 near-midpoints included (it rounds
  once), but keeps Inf as Inf (E5M2) or NaN (E4M3, FNUZ) and spells E5M2 NaN 0x7F/0xFF.
- JAX (0.10) casts through XLA: on the CPU it agrees with minifp8 from float32 (but for the E8M0
  quirk above) and rounds float64 once to FP8 and E2M1; from float64 it casts E8M0 values below
  2**-127 to NaN; from float16 and bfloat16 it casts every NaN to E5M2 0x7F, dropping the sign it
  keeps from float32. It has no FP6 casts; JAX 0.11.2 has (on the CPU), and casts every input
  from the overflow threshold on, Inf and NaN included, to zero of its sign (minifp8: max, and a
  ValueError for NaN).
- XLA on a GPU (JAX 0.11.2, H200) agrees with minifp8 from float32, float16 and bfloat16 (but for
  the E8M0 quirk), casting E4M3 and E5M2 NaNs of either sign to 0x7F; under ``jax.jit`` it
  simplifies ``x.astype(fp8).astype(float32)`` to ``x``. Its FP6 casts were wrong on most inputs
  (measured once, 2026-12-04: 388851 of the 522646 finite structured inputs for E3M2; not tested).
"""
import sys

import numpy as np
import pytest

from minifp8 import codec, formats, testing

from test_formats import ML_DTYPES_NAMES, ml_dtypes_rounds_once


def _inputs(name):
    structured = next(testing.sweep(kind="structured"))
    return np.concatenate([structured, next(testing.sweep(name, kind="edge"))])


def _float64_near_midpoints(name):
    fmt = formats.get(name)
    grid = np.unique(np.abs(fmt.values()[np.isfinite(fmt.values())]))
    midpoints = (grid[:-1] + grid[1:]) / 2
    return np.concatenate([midpoints * (1 - 2.0**-40), midpoints * (1 + 2.0**-40)])


E8M0_SUBNORMAL_QUIRK = (2.0**-127, 1.5 * 2.0**-127)


def _outside_e8m0_quirk(x):
    return ~((x > E8M0_SUBNORMAL_QUIRK[0]) & (x < E8M0_SUBNORMAL_QUIRK[1]))


# ---- ml_dtypes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ML_DTYPES_NAMES))
def test_ml_dtypes_matches_the_oracle_on_float32(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = formats.get(name)
    x = _inputs(name)
    if not fmt.has_nan:
        x = x[np.isfinite(x)]  # ml_dtypes maps NaN to -0 and Inf to max in FP6/FP4; we reject NaN
    if name == "E8M0":
        x = x[_outside_e8m0_quirk(x)]
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(getattr(ml_dtypes, ML_DTYPES_NAMES[name]))
    testing.assert_codes_equal(theirs, x, name)  # exact NaN codes too


def test_ml_dtypes_e8m0_subnormal_quirk():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([np.nextafter(np.float32(2.0**-127), np.float32(1))], np.float32)  # 0x00400001
    report = testing.compare(x.astype(ml_dtypes.float8_e8m0fnu), x, "E8M0")
    if ml_dtypes_rounds_once(ml_dtypes):
        assert report.count == 0
        return
    assert report.count == 1 and report.mismatches[0].actual_code == 0x01 and report.mismatches[0].expected_code == 0x00


# Three formats of ml_dtypes that minifp8 does not catalogue, as FloatFormat data: the generic codec
# serves them unchanged. float8_e4m3 and float8_e3m4 are IEEE-style (Inf, and NaN in the
# all-ones exponent); float8_e4m3b11fnuz is the FNUZ layout with bias 11 of Google's hardware
# (openxla's E4M3B11FNUZ RFC).
UNCATALOGUED = {
    "float8_e4m3": formats.FloatFormat("E4M3_IEEE", exponent_bits=4, mantissa_bits=3, bias=7, has_infinity=True,
                                       nan_style="ieee"),
    "float8_e3m4": formats.FloatFormat("E3M4", exponent_bits=3, mantissa_bits=4, bias=3, has_infinity=True,
                                       nan_style="ieee"),
    "float8_e4m3b11fnuz": formats.FloatFormat("E4M3B11FNUZ", exponent_bits=4, mantissa_bits=3, bias=11,
                                              nan_style="negative_zero"),
}


def _same_values(a, b):
    return np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]) \
        and np.array_equal(np.signbit(a[~np.isnan(a)]), np.signbit(b[~np.isnan(b)]))


@pytest.mark.parametrize("dtype_name", list(UNCATALOGUED))
def test_ml_dtypes_formats_outside_the_catalogue(dtype_name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if not hasattr(ml_dtypes, dtype_name):
        pytest.skip(f"this ml_dtypes has no {dtype_name}")
    fmt, dtype = UNCATALOGUED[dtype_name], getattr(ml_dtypes, dtype_name)
    codes = np.arange(256, dtype=np.uint8)
    assert _same_values(codes.view(dtype).astype(np.float64), codec.decode(codes, fmt))  # signs of zero too
    x = np.concatenate([next(testing.sweep(kind="structured")), next(testing.sweep(fmt, kind="edge"))])
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(dtype).view(np.uint8)
    testing.assert_codes_equal(theirs, x, fmt)  # exact NaN codes too


@pytest.mark.parametrize("name", ["E4M3", "E5M2"])
def test_ml_dtypes_double_rounds_float64(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _float64_near_midpoints(name)
    report = testing.compare(x.astype(getattr(ml_dtypes, ML_DTYPES_NAMES[name])), x, name)
    if ml_dtypes_rounds_once(ml_dtypes):
        assert report.count == 0
        return
    assert report.count == len(x) // 2  # one of each pair m(1 - 2**-40), m(1 + 2**-40)
    # Every one is a near-tie, but for the midpoint between 0 and the smallest subnormal, which comes
    # back as zero and is reported as a (flushed) subnormal.
    assert report.by_class["near-tie"] == report.count - 1 and report.by_class["subnormal"] == 1
    float32_exact = x.astype(np.float32).astype(np.float64) == x
    assert not float32_exact.any()


# ---- PyTorch (on the CPU, and on a GPU where CUDA is present) -----------------------------------
def _torch():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")
    return torch


def _cuda_present():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_present(), reason="no CUDA device"))]

TORCH_NAMES = {"E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E4M3FNUZ": "float8_e4m3fnuz",
               "E5M2FNUZ": "float8_e5m2fnuz"}


def _torch_codes(torch, x, name, device="cpu"):
    """Codes of ``x`` cast by PyTorch on ``device`` (float16, bfloat16, float32 or float64 inputs;
    bfloat16 as the uint16 bits of an ml_dtypes array)."""
    dtype = getattr(torch, TORCH_NAMES.get(name, "float8_e8m0fnu"))
    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        source = torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    else:
        source = torch.from_numpy(x)
    return source.to(device).to(dtype).view(torch.uint8).cpu().numpy()


def _torch_saturates(torch, name):
    major_minor = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return name == "E4M3" and major_minor >= (2, 13)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(TORCH_NAMES))
def test_torch_float8_casts_match_the_oracle(name, device):
    torch = _torch()
    x = _inputs(name)
    testing.assert_codes_equal(_torch_codes(torch, x, name, device), x, name, saturate=_torch_saturates(torch, name),
                               nan="class")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(TORCH_NAMES))
def test_torch_casts_every_16_bit_float(name, source, device):
    """Every float16 and bfloat16 value, cast by PyTorch straight from the 16-bit type: every code
    the oracle's (which reads both exactly), NaN's payload and sign aside (on CUDA, torch 2.11,
    float16 NaNs of either sign become 0x7F)."""
    torch = _torch()
    ml_dtypes = pytest.importorskip("ml_dtypes") if source == "bfloat16" else None
    dtype = np.dtype(np.float16) if source == "float16" else np.dtype(ml_dtypes.bfloat16)
    x = np.arange(2**16, dtype=np.uint16).view(dtype)
    testing.assert_codes_equal(_torch_codes(torch, x, name, device), x, name, saturate=_torch_saturates(torch, name),
                               nan="class")


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(TORCH_NAMES))
def test_torch_casts_every_float32(name, device):
    """All 2**32 float32 inputs, NaN codes by class as above (76 s for one format on CUDA with a
    16-core host; the oracle's encode takes most of it)."""
    torch = _torch()
    saturate = _torch_saturates(torch, name)
    nan_codes = np.isnan(codec.decode(np.arange(256, dtype=np.uint8), name))
    for batch in testing.sweep(kind="exhaustive", batch_size=2**26):
        theirs, ours = _torch_codes(torch, batch, name, device), codec.encode(batch, name, saturate=saturate)
        differ = (theirs != ours) & ~(nan_codes[theirs] & nan_codes[ours])
        if differ.any():
            testing.assert_codes_equal(theirs[differ], batch[differ], name, saturate=saturate, nan="class")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["E4M3", "E5M2"])
def test_torch_double_rounds_float64(name, device):
    torch = _torch()
    x = _float64_near_midpoints(name)
    saturate = name == "E4M3"
    report = testing.compare(_torch_codes(torch, x, name, device), x, name, saturate=saturate, nan="class")
    assert report.count == len(x) // 2


def test_torch_flush_denormal_is_refused_until_turned_off():
    """``torch.set_flush_denormal(True)`` sets FTZ/DAZ for the thread: the oracle refuses to answer
    (tests/test_fp_environment.py sets the bits itself, where torch is absent)."""
    torch = pytest.importorskip("torch")
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-denormal mode that torch can set")
    try:
        with pytest.raises(FloatingPointError, match="torch.set_flush_denormal"):
            codec.encode(np.ones(3, np.float32), "E4M3")
    finally:
        torch.set_flush_denormal(False)
    assert codec.encode(np.ones(3, np.float32), "E4M3").tolist() == [0x38] * 3


@pytest.mark.parametrize("device", DEVICES)
def test_torch_e8m0_takes_magnitudes_and_maps_zero_to_the_smallest_scale(device):
    torch = _torch()
    if not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip("this torch has no float8_e8m0fnu")
    x = np.array([1.5, 0.75, -1.0, 0.0, 2.0**-140, np.inf], np.float32)
    theirs = _torch_codes(torch, x, "E8M0", device)
    ours = codec.encode(x, "E8M0")
    assert ours.tolist() == [0x80, 0x7F, 0xFF, 0xFF, 0x00, 0xFF]
    assert theirs.tolist() == [0x80, 0x7F, 0x7F, 0x00, 0x00, 0xFF]
    positive = _inputs("E8M0")
    positive = positive[(positive > 0) & _outside_e8m0_quirk(positive)]
    testing.assert_codes_equal(_torch_codes(torch, positive, "E8M0", device), positive, "E8M0", nan="class")


# ---- JAX (XLA on the CPU) -----------------------------------------------------------------------
def _jax(*dtype_names, backend="cpu"):
    """JAX, where it is installed, its default backend is ``backend`` ("cpu" or "gpu") and it has
    every one of ``dtype_names``; otherwise a skip."""
    jax = pytest.importorskip("jax")
    pytest.importorskip("ml_dtypes")  # JAX's narrow dtypes are ml_dtypes', and so are its arrays' bytes
    if jax.default_backend() != backend:
        where = "the CPU" if backend == "cpu" else "a GPU"
        pytest.skip(f"these tests state what XLA's {backend.upper()} casts do; JAX's default backend here is not "
                    f"{where}")
    missing = [name for name in dtype_names if not hasattr(jax.numpy, name)]
    if missing:
        pytest.skip(f"this JAX has no {', '.join(missing)}")
    return jax


JAX_NAMES = {name: ML_DTYPES_NAMES[name] for name in ("E4M3", "E5M2", "E4M3FNUZ", "E5M2FNUZ", "E2M1", "E8M0")}


def _jax_cast(jax, x, dtype_name, jit=False):
    """Codes of ``x.astype(jax.numpy.<dtype_name>)`` as XLA computes it (eagerly or compiled), as uint8."""
    dtype = getattr(jax.numpy, dtype_name)
    cast = (lambda array: array.astype(dtype))
    return np.asarray((jax.jit(cast) if jit else cast)(jax.numpy.asarray(x))).view(np.uint8)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", list(JAX_NAMES))
def test_jax_casts_match_the_oracle_on_float32(name, jit):
    jax = _jax(JAX_NAMES[name])
    x = _inputs(name)
    if not formats.get(name).has_nan:
        x = x[np.isfinite(x)]
    if name == "E8M0":  # XLA rounds float32 subnormals to E8M0 as ml_dtypes does
        quirk = ~_outside_e8m0_quirk(x)
        assert quirk.sum() > 100  # the sweep reaches into the interval
        theirs = _jax_cast(jax, x[quirk], JAX_NAMES[name], jit)
        assert (theirs == 0x01).all() and (codec.encode(x[quirk], name) == 0x00).all()
        x = x[~quirk]
    testing.assert_codes_equal(_jax_cast(jax, x, JAX_NAMES[name], jit), x, name)  # exact NaN codes too


@pytest.mark.parametrize("name", ["E4M3", "E5M2", "E4M3FNUZ", "E5M2FNUZ", "E2M1"])
def test_jax_rounds_float64_once(name):
    """Under ``jax.enable_x64``, XLA casts float64 to FP8 in one rounding, where ml_dtypes and
    PyTorch round through float32: the inputs just off each midpoint that they get wrong half the
    time (``test_ml_dtypes_double_rounds_float64``), XLA gets right."""
    jax = _jax(JAX_NAMES[name])
    if not hasattr(jax, "enable_x64"):
        pytest.skip("this JAX has no jax.enable_x64 context manager")
    x = _float64_near_midpoints(name)
    assert not (x.astype(np.float32).astype(np.float64) == x).any()  # none survives a float32 step
    with jax.enable_x64(True):
        assert jax.numpy.asarray(x).dtype == np.float64
        testing.assert_codes_equal(_jax_cast(jax, x, JAX_NAMES[name]), x, name)


def test_jax_casts_float64_below_the_smallest_e8m0_to_nan():
    """From float64, XLA casts positive values below 2**-127 to E8M0's NaN (0xFF); minifp8 gives the
    nearest value, 2**-127 (0x00), as XLA does from float32 and ml_dtypes from both. Between 2**-127
    and 1.5 * 2**-127 it rounds up, as from float32; elsewhere the codes agree."""
    jax = _jax("float8_e8m0fnu")
    if not hasattr(jax, "enable_x64"):
        pytest.skip("this JAX has no jax.enable_x64 context manager")
    inputs = _inputs("E8M0")
    inputs = inputs[np.isfinite(inputs)]
    x = np.concatenate([inputs.astype(np.float64), _float64_near_midpoints("E8M0"),
                        [2.0**-1074, 2.0**-149, 2.0**-128, 0.75 * 2.0**-127]])
    with jax.enable_x64(True):
        theirs = _jax_cast(jax, x, "float8_e8m0fnu")
    below, quirk = (x > 0) & (x < 2.0**-127), ~_outside_e8m0_quirk(x)
    assert below.sum() > 100 and (theirs[below] == 0xFF).all() and (codec.encode(x[below], "E8M0") == 0x00).all()
    assert quirk.sum() > 100 and (theirs[quirk] == 0x01).all()
    testing.assert_codes_equal(theirs[~below & ~quirk], x[~below & ~quirk], "E8M0")


@pytest.mark.parametrize("name", ["E3M2", "E2M3"])
def test_jax_fp6_casts_raise_or_flush_overflow_to_zero(name):
    """JAX 0.10.2 has the FP6 dtypes, but XLA cannot cast to them ("Invalid XLA PrimitiveType").
    JAX 0.11.2 can, on the CPU: every code the oracle's below the overflow threshold (max plus half
    a spacing: 30 for E3M2, 7.75 for E2M3), and zero of the input's sign from there on, for Inf
    and NaN too (minifp8 and ml_dtypes give max, clamped as in OCP MX v1.0 section 6.3; minifp8
    refuses NaN, which FP6 cannot hold)."""
    jax = _jax(ML_DTYPES_NAMES[name])
    fmt = formats.get(name)
    x = np.concatenate([_inputs(name), np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32)])
    try:
        theirs = _jax_cast(jax, x, ML_DTYPES_NAMES[name])
    except Exception as error:  # (XLA's runtime error type has moved between JAX versions)
        assert "PrimitiveType" in str(error), error
        return
    grid = np.unique(np.abs(fmt.values()))
    with np.errstate(invalid="ignore"):  # (NaN compares false: it counts as beyond)
        below = np.abs(x) < fmt.max + (fmt.max - grid[-2]) / 2  # max plus half a spacing
    testing.assert_codes_equal(theirs[below], x[below], name)
    assert (~below).sum() > 1000 and np.isnan(x[~below]).any() and np.isinf(x[~below]).any()
    np.testing.assert_array_equal(theirs[~below], np.where(np.signbit(x[~below]), fmt.sign_mask, 0))


@pytest.mark.parametrize("source", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(JAX_NAMES))
def test_jax_casts_every_16_bit_float(name, source):
    """Every float16 and bfloat16 value, cast by XLA, against the oracle (which reads both exactly).

    All codes agree but for two things: the E8M0 quirk of float32 subnormals (bfloat16 has them
    too), and E5M2 NaNs, which XLA casts from 16-bit floats to 0x7F whatever their sign (from
    float32 it keeps the sign, 0x7E and 0xFE, as minifp8 and ml_dtypes do)."""
    jax = _jax(JAX_NAMES[name])
    import ml_dtypes

    dtype = np.dtype(np.float16) if source == "float16" else np.dtype(ml_dtypes.bfloat16)
    x = np.arange(2**16, dtype=np.uint16).view(dtype)
    if not formats.get(name).has_nan:
        x = x[np.isfinite(x.astype(np.float32))]
    theirs = _jax_cast(jax, x, JAX_NAMES[name])
    wide = x.astype(np.float32)
    if name == "E5M2":
        nan = np.isnan(wide)
        assert set(theirs[nan].tolist()) == {0x7F} and set(codec.encode(wide[nan], name).tolist()) == {0x7E, 0xFE}
        testing.assert_codes_equal(theirs, x, name, nan="class")
        return
    if name == "E8M0":
        quirk = ~_outside_e8m0_quirk(wide)
        assert (quirk.sum() > 0) == (source == "bfloat16")  # float16 has no value so small
        assert (theirs[quirk] == 0x01).all() and (codec.encode(wide[quirk], name) == 0x00).all()
        x, theirs = x[~quirk], theirs[~quirk]
    testing.assert_codes_equal(theirs, x, name)


@pytest.mark.parametrize("name", list(JAX_NAMES))
def test_jax_compiled_round_trip_keeps_the_narrowing(name):
    """A compiled fake quantisation, ``x.astype(fp8).astype(float32)``, is not simplified away on
    the CPU: it gives the oracle's decoded values, bit for bit (on a GPU it is:
    ``test_jax_gpu_compiles_a_round_trip_away``)."""
    jax = _jax(JAX_NAMES[name])
    x = next(testing.sweep(kind="structured"))
    if not formats.get(name).has_nan:
        x = x[np.isfinite(x)]
    dtype = getattr(jax.numpy, JAX_NAMES[name])
    theirs = np.asarray(jax.jit(lambda array: array.astype(dtype).astype(np.float32))(jax.numpy.asarray(x)))
    ours = codec.decode(codec.encode(x, name), name).astype(np.float32)
    if name == "E8M0":
        keep = _outside_e8m0_quirk(x)
        theirs, ours = theirs[keep], ours[keep]
    same = (theirs.view(np.uint32) == ours.view(np.uint32)) | (np.isnan(theirs) & np.isnan(ours))
    assert same.all(), f"{(~same).sum()} values differ, first input {x[~same][0]!r}"


@pytest.mark.parametrize("dtype_name", list(UNCATALOGUED))
def test_jax_casts_formats_outside_the_catalogue(dtype_name):
    jax = _jax(dtype_name)
    fmt = UNCATALOGUED[dtype_name]
    x = np.concatenate([next(testing.sweep(kind="structured")), next(testing.sweep(fmt, kind="edge"))])
    theirs = _jax_cast(jax, x, dtype_name)
    testing.assert_codes_equal(theirs, x, fmt)


def test_jax_arrays_go_into_the_oracle_as_they_are():
    """A JAX test hands its arrays over unconverted: float8 results, bfloat16 inputs, 0-d scalars."""
    jax = _jax("float8_e4m3fn", "float8_e5m2", "bfloat16")
    jnp = jax.numpy
    x = jnp.asarray(np.linspace(-500.0, 500.0, 64, dtype=np.float32))
    testing.assert_codes_equal(x.astype(jnp.float8_e4m3fn), x, "E4M3")
    narrow = x.astype(jnp.bfloat16)
    testing.assert_codes_equal(narrow.astype(jnp.float8_e5m2), narrow, "E5M2")
    assert codec.encode(jnp.float32(3.0), "E4M3") == 0x44
    report = testing.compare(x.astype(jnp.float8_e4m3fn), x * 1.01, "E4M3")  # a wrong input is caught
    assert not report.ok


# ---- JAX (XLA on a GPU) -------------------------------------------------------------------------
def _assert_gpu_codes(theirs, x, name):
    """XLA's GPU casts (JAX 0.11.2, H200) against the oracle: every code equal, but that E4M3 and
    E5M2 NaNs of either sign come out as 0x7F (the CPU keeps the sign, and E5M2's 0x7E), and the
    E8M0 quirk of float32 subnormals that XLA's CPU casts share."""
    wide = np.asarray(x).astype(np.float32)
    if name in ("E4M3", "E5M2"):
        nan = np.isnan(wide)
        assert nan.any() and (theirs[nan] == 0x7F).all(), sorted(set(theirs[nan].tolist()))
        theirs, x = theirs[~nan], x[~nan]
    if name == "E8M0":
        quirk = ~_outside_e8m0_quirk(np.asarray(x).astype(np.float32))
        assert (theirs[quirk] == 0x01).all()
        theirs, x = theirs[~quirk], x[~quirk]
    testing.assert_codes_equal(theirs, x, name)  # exact NaN codes otherwise


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", list(JAX_NAMES))
def test_jax_gpu_casts_match_the_oracle_on_float32(name, jit):
    jax = _jax(JAX_NAMES[name], backend="gpu")
    x = _inputs(name)
    if not formats.get(name).has_nan:
        x = x[np.isfinite(x)]
    _assert_gpu_codes(_jax_cast(jax, x, JAX_NAMES[name], jit), x, name)


@pytest.mark.parametrize("source", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(JAX_NAMES))
def test_jax_gpu_casts_every_16_bit_float(name, source):
    jax = _jax(JAX_NAMES[name], backend="gpu")
    import ml_dtypes

    dtype = np.dtype(np.float16) if source == "float16" else np.dtype(ml_dtypes.bfloat16)
    x = np.arange(2**16, dtype=np.uint16).view(dtype)
    if not formats.get(name).has_nan:
        x = x[np.isfinite(x.astype(np.float32))]
    _assert_gpu_codes(_jax_cast(jax, x, JAX_NAMES[name]), x, name)


@pytest.mark.parametrize("name", list(JAX_NAMES))
def test_jax_gpu_compiles_a_round_trip_away(name):
    """On the GPU, XLA simplifies a compiled ``x.astype(fp8).astype(float32)`` to ``x``: a fake
    quantisation written that way under ``jax.jit`` quantises nothing (JAX 0.11.2, H200;
    openxla/xla issue 41605 reports it for 16-bit types). Eagerly, each cast runs on its own and
    the round trip is the oracle's; ``jax.lax.optimization_barrier`` between the casts keeps them
    under ``jit`` too."""
    jax = _jax(JAX_NAMES[name], backend="gpu")
    x = next(testing.sweep(kind="structured"))
    if not formats.get(name).has_nan:
        x = x[np.isfinite(x)]
    dtype, jnp = getattr(jax.numpy, JAX_NAMES[name]), jax.numpy
    compiled = np.asarray(jax.jit(lambda array: array.astype(dtype).astype(np.float32))(jnp.asarray(x)))
    assert np.array_equal(compiled.view(np.uint32), x.view(np.uint32))  # nothing quantised
    ours = codec.decode(codec.encode(x, name), name).astype(np.float32)
    keep = _outside_e8m0_quirk(x) if name == "E8M0" else np.ones(x.size, bool)
    eager = np.asarray(jnp.asarray(x).astype(dtype).astype(np.float32))
    barrier = np.asarray(jax.jit(lambda array: jax.lax.optimization_barrier(array.astype(dtype)).astype(np.float32))(
        jnp.asarray(x)))
    for theirs in (eager, barrier):
        same = (theirs.view(np.uint32) == ours.view(np.uint32)) | (np.isnan(theirs) & np.isnan(ours))
        assert same[keep].all(), f"{(~same[keep]).sum()} values differ, first input {x[keep][~same[keep]][0]!r}"


# ---- ONNX Runtime (its CPU Cast kernel) ---------------------------------------------------------
ONNX_NAMES = {"E4M3": "FLOAT8E4M3FN", "E5M2": "FLOAT8E5M2", "E4M3FNUZ": "FLOAT8E4M3FNUZ",
              "E5M2FNUZ": "FLOAT8E5M2FNUZ"}


def _onnxruntime_cast(x, name, saturate):
    """``Cast(x, to=<name>, saturate)`` run by ONNX Runtime on the CPU, then cast back to float32 (its
    Python API returns no float8 arrays): the decoded values, which `testing.compare` reads."""
    onnxruntime = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    helper, tensor_types = onnx.helper, onnx.TensorProto
    if not hasattr(tensor_types, ONNX_NAMES[name]):
        pytest.skip(f"this onnx has no {ONNX_NAMES[name]}")
    source = {np.dtype(np.float32): tensor_types.FLOAT, np.dtype(np.float16): tensor_types.FLOAT16,
              np.dtype(np.float64): tensor_types.DOUBLE}[x.dtype]
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["narrow"], to=getattr(tensor_types, ONNX_NAMES[name]), saturate=int(saturate)),
         helper.make_node("Cast", ["narrow"], ["y"], to=tensor_types.FLOAT)],
        "cast", [helper.make_tensor_value_info("x", source, [None])],
        [helper.make_tensor_value_info("y", tensor_types.FLOAT, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10  # opset 21's
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:  # an ONNX Runtime older than IR version 10 / opset 21 (1.17)
        pytest.skip(f"this ONNX Runtime cannot run Cast of opset 21: {error}")
    return session.run(None, {"x": x})[0]


def _onnx_inputs(name, dtype):
    if dtype == np.float16:
        return np.arange(2**16, dtype=np.uint16).view(np.float16)  # every float16
    return _inputs(name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("name", list(ONNX_NAMES))
def test_onnxruntime_saturating_casts_match_the_oracle(name, dtype):
    """FNUZ's +-Inf included: +-max, as Cast-24's table says (onnx/onnx PR 7130) and ONNX Runtime
    does at opset 21 too, although Cast-19 to Cast-23's table said NaN."""
    x = _onnx_inputs(name, dtype)
    assert np.isinf(x).any()
    testing.assert_codes_equal(_onnxruntime_cast(x, name, saturate=True), x, name, saturate=True)


# Where ONNX Runtime's non-saturating casts leave the ONNX Cast table: |x| in [low, high) gives
# `value` (E4M3: 448, not NaN; E5M2: NaN, not Inf). Inputs just below `low` and from `high` on agree.
ONNXRUNTIME_OVERFLOW = {"E4M3": (480.0, 496.0, 448.0), "E5M2": (61440.0, 65536.0, np.nan)}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("name", list(ONNX_NAMES))
def test_onnxruntime_non_saturating_casts_leave_the_onnx_table_on_one_interval(name, dtype):
    x = _onnx_inputs(name, dtype)
    theirs = _onnxruntime_cast(x, name, saturate=False)
    report = testing.compare(theirs, x, name, saturate=False, max_rows=x.size)
    if name not in ONNXRUNTIME_OVERFLOW:
        assert report.ok, report
        return
    low, high, value = ONNXRUNTIME_OVERFLOW[name]
    with np.errstate(invalid="ignore"):  # the sweep's signalling NaNs
        magnitude = np.abs(x.astype(np.float32))  # (float16 cannot hold 65536)
        inside = (magnitude >= low) & (magnitude < high)
    assert inside.sum() >= 64
    assert report.count == inside.sum(), (f"ONNX Runtime now differs from the oracle on {report.count} inputs, "
                                          f"not on the {inside.sum()} of [{low}, {high}):\n{report}")
    assert report.by_class["overflow"] == report.count
    expected = np.where(np.isnan(value), np.nan, np.sign(x[inside]) * value)
    np.testing.assert_array_equal(theirs[inside], expected)
    ours = codec.decode(codec.encode(x[inside], name), name)
    assert (np.isnan(ours) if name == "E4M3" else np.isinf(ours)).all()  # the table's NaN, and Inf


@pytest.mark.parametrize("name", list(ONNX_NAMES))
def test_onnxruntime_double_rounds_float64(name):
    x = _float64_near_midpoints(name)
    report = testing.compare(_onnxruntime_cast(x, name, saturate=True), x, name, saturate=True)
    assert report.count == len(x) // 2  # one of each pair m(1 - 2**-40), m(1 + 2**-40)


# ---- tinygrad (a Python implementation) ---------------------------------------------------------
TINYGRAD_NAMES = {"E4M3": "fp8e4m3", "E5M2": "fp8e5m2", "E4M3FNUZ": "fp8e4m3fnuz", "E5M2FNUZ": "fp8e5m2fnuz"}


@pytest.mark.parametrize("name", list(TINYGRAD_NAMES))
def test_tinygrad_agrees_on_every_finite_input_and_rounds_float64_once(name):
    limit = sys.getrecursionlimit()
    try:
        tinygrad_dtype = pytest.importorskip("tinygrad.dtype")
    finally:  # (tinygrad 0.14 raises the interpreter's recursion limit to 10000 on import; conftest checks it)
        sys.setrecursionlimit(limit)
    if not all(hasattr(tinygrad_dtype, function) for function in ("float_to_fp8", "fp8_to_float")):
        pytest.skip("this tinygrad has no float_to_fp8 / fp8_to_float")
    dtype = getattr(tinygrad_dtype.dtypes, TINYGRAD_NAMES[name], None)
    if dtype is None:
        pytest.skip(f"this tinygrad has no dtypes.{TINYGRAD_NAMES[name]}")
    float_to_fp8, fp8_to_float = tinygrad_dtype.float_to_fp8, tinygrad_dtype.fp8_to_float
    codes = np.arange(256, dtype=np.uint8)
    assert _same_values(np.array([fp8_to_float(int(code), dtype) for code in codes]), codec.decode(codes, name))

    with np.errstate(invalid="ignore"):  # (the sweep's signalling NaNs; tinygrad reads float64)
        x = np.concatenate([_inputs(name).astype(np.float64), _float64_near_midpoints(name)])
    theirs = np.array([float_to_fp8(value, dtype) for value in x.tolist()], np.uint8)
    finite = np.isfinite(x)
    testing.assert_codes_equal(theirs[finite], x[finite], name, saturate=True)
    # Inf and NaN as `saturate=False` has them (Inf: E5M2 Inf, E4M3 NaN with its sign, FNUZ 0x80), but
    # E5M2's NaN, which tinygrad spells 0x7F / 0xFF, the all-ones mantissa, and minifp8 0x7E / 0xFE.
    special, nan = x[~finite], np.isnan(x[~finite])
    if name == "E5M2":
        np.testing.assert_array_equal(theirs[~finite][nan], np.where(np.signbit(special[nan]), 0xFF, 0x7F))
        special, theirs = special[~nan], theirs[~finite][~nan]
    else:
        theirs = theirs[~finite]
    assert np.isinf(special).any()
    testing.assert_codes_equal(theirs, special, name, saturate=False)
