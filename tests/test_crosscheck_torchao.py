"""Bit-for-bit cross-checks of minifp8.mx against torchao's MX and NVFP4 emulation (CPU).

torchao (``torchao.prototype.mx_formats``, checked with torchao 0.18.0 and torch 2.13 on CPU) is a
second, independent implementation: ``mx_tensor.to_mx`` for MX (E8M0 scales, element data) and
``nvfp4_tensor.nvfp4_quantize`` for NVFP4. Skipped where torch, torchao or ml_dtypes is absent.

Where the two agree we assert equality of scale codes and element codes. Where they differ, each
difference is an asserted, explained exception, never a tolerance:

1. Blocks whose E8M0 scale is 0x00 (2**-127). minifp8 scales the elements by 2**127 (OCP MX v1.0
   section 5.4.1: 0x00 is 2**-127). torchao's ``to_mx`` clamps the float32 scale to the smallest
   normal number and divides by 2**-126 (``scale_fp32 = torch.clamp(scale_fp32,
   min=F32_MIN_NORMAL)``, pytorch/pytorch#125557); its ``_to_mx_rceil`` multiplies by 1
   (``torch.where(exponent == 0, 1.0, ...)``). The scales agree; the codes follow each rule,
   which we check against ml_dtypes.
2. ``rceil``: torchao computes ``ceil(torch.log2(max_abs / max_pos))`` in float32. For an amax a
   few float32 ulps above ``max_elem * 2**k`` the float32 log2 rounds down to the integer ``k``,
   so torchao gives 2**k where the exact rule ceil(log2(amax / max_elem)) (cuBLAS 1D block
   quantization; minifp8) gives 2**(k+1). We check that minifp8 equals the exact rule and that
   the float32 log2 of torchao's rounded quotient lies within half a float32 ulp of ``k``.
3. Inf in a block (floor, ceil, even): minifp8 gives the NaN scale 0xFF; torchao only tests
   ``torch.isnan(max_abs)``, so Inf's all-ones exponent field gives the finite scale
   2**(128 - emax_elem) and Inf saturates to the element maximum. (rceil: both give 0xFE.)
4. NaN blocks: both give scale 0xFF; the element codes carry no information (the block decodes to
   NaN). minifp8 writes 0; torchao writes the casts of x / Inf or x * NaN.
5. NVFP4: minifp8 follows TransformerEngine's float32 order (``block_amax * (S_enc * (1/6))``,
   ``S_enc = 2688 / global_amax``); torchao computes ``(block_amax / 6) / (global_amax / 2688)``
   and clamps it below at ``torch.finfo(float8_e4m3fn).tiny`` (2**-6, E4M3's smallest normal).
   Where these float32 values straddle an E4M3 rounding boundary the block scales differ; each
   library's scale equals the E4M3 rounding (ml_dtypes) of its own float32 expression.
"""
import logging
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from minifp8 import mx

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _level = logging.root.manager.disable
    logging.disable(logging.WARNING)  # torchao logs that its CUDA extensions are absent
    try:
        mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
        from torchao.prototype.mx_formats.kernels import unpack_uint4
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    finally:
        logging.disable(_level)

f32 = np.float32
ELEMENTS = ("E4M3", "E5M2", "E2M3", "E3M2", "E2M1")
MODES = ("floor", "ceil", "even", "rceil")
TORCH_ELEMENT = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2, "E2M3": DTYPE_FP6_E2M3,
                 "E3M2": DTYPE_FP6_E3M2, "E2M1": torch.float4_e2m1fn_x2}
TORCH_MODE = {"floor": ScaleCalculationMode.FLOOR, "ceil": ScaleCalculationMode.CEIL,
              "even": ScaleCalculationMode.EVEN, "rceil": ScaleCalculationMode.RCEIL}
ML_DTYPE = {"E4M3": ml_dtypes.float8_e4m3fn, "E5M2": ml_dtypes.float8_e5m2, "E2M3": ml_dtypes.float6_e2m3fn,
            "E3M2": ml_dtypes.float6_e3m2fn, "E2M1": ml_dtypes.float4_e2m1fn}
ELEMENT_MAX = {"E4M3": 448.0, "E5M2": 57344.0, "E2M3": 7.5, "E3M2": 28.0, "E2M1": 6.0}
ELEMENT_EMAX = {"E4M3": 8, "E5M2": 15, "E2M3": 2, "E3M2": 4, "E2M1": 2}
ELEMENT_MANTISSA = {"E4M3": 3, "E5M2": 2, "E2M3": 3, "E3M2": 2, "E2M1": 1}


def torchao_mx(x, elem, mode):
    """torchao's (scale codes, element codes) for float32 or bfloat16 ``x`` of shape (n, 32)."""
    tensor = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x, f32))
    scales, data = mx_tensor.to_mx(tensor, TORCH_ELEMENT[elem], 32, TORCH_MODE[mode])
    if elem == "E2M1":
        data = unpack_uint4(data.contiguous())  # two codes a byte, the first in the low nibble
    return scales.view(torch.uint8).numpy().ravel().copy(), data.view(torch.uint8).numpy().copy()


def minifp8_mx(x, elem, mode):
    q = mx.quantize(np.asarray(x, f32), elem, scale_mode=mode)
    return q.scales.ravel(), q.codes


def ml_dtypes_codes(values, elem):
    """Saturating round-to-nearest-even element codes of exact float64 ``values`` (ml_dtypes)."""
    limit = ELEMENT_MAX[elem]
    return np.clip(values, -limit, limit).astype(ML_DTYPE[elem]).view(np.uint8)


def check_scale_zero_blocks(x, elem, mode, torchao_codes, minifp8_codes, rows):
    """Difference 1: in 0x00-scale blocks each library scales by its own factor (checked by ml_dtypes)."""
    exact = x[rows].astype(np.float64)
    np.testing.assert_array_equal(minifp8_codes[rows], ml_dtypes_codes(exact * 2.0**127, elem))
    torchao_factor = 1.0 if mode == "rceil" else 2.0**126
    np.testing.assert_array_equal(torchao_codes[rows], ml_dtypes_codes(exact * torchao_factor, elem))


def compare(x, elem, mode):
    """Assert agreement, or the explained difference 1; return (rceil scale differences, scale-0 code differences)."""
    t_scales, t_codes = torchao_mx(x, elem, mode)
    m_scales, m_codes = minifp8_mx(x, elem, mode)
    scale_diff = t_scales != m_scales
    if mode != "rceil":
        np.testing.assert_array_equal(t_scales, m_scales)
    same = ~scale_diff
    code_diff = (t_codes != m_codes).any(axis=1) & same
    np.testing.assert_array_equal(code_diff & (m_scales != 0), False)  # differences only in 0x00 blocks
    check_scale_zero_blocks(x, elem, mode, t_codes, m_codes, same & (m_scales == 0))
    return np.flatnonzero(scale_diff), int(code_diff.sum()), t_scales, m_scales


@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("mode", MODES)
def test_random_blocks_over_many_binades(elem, mode):
    rng = np.random.default_rng(ELEMENTS.index(elem) * 4 + MODES.index(mode))
    n = 512
    x = (rng.standard_normal((n, 32)) * np.exp2(rng.integers(-150, 126, (n, 1)))).astype(f32)
    scale_diff, scale_zero_code_diffs, _, m_scales = compare(x, elem, mode)
    assert len(scale_diff) == 0  # random amaxes never sit a few ulps above max_elem * 2**k
    assert scale_zero_code_diffs > 0 and (m_scales != 0).sum() > 300  # difference 1 is exercised


def boundary_amaxes(elem):
    """Powers of two, max_elem * 2**k and even's significand threshold 2 - 2**-(m+1), with float32 neighbours."""
    def with_neighbours(v):
        v = np.asarray(v, f32)
        return np.concatenate([np.nextafter(v, f32(0)), v, np.nextafter(v, f32(np.inf))])
    powers = np.ldexp(1.0, np.arange(-149, 128))
    max_multiples = np.ldexp(ELEMENT_MAX[elem], np.arange(-160, 128))
    thresholds = np.ldexp(2 - 2.0**-(ELEMENT_MANTISSA[elem] + 1), np.arange(-149, 128))
    candidates = np.concatenate([powers, max_multiples, thresholds])
    candidates = candidates[(candidates >= 2.0**-149) & (candidates < 2.0**128)]
    values = np.concatenate([with_neighbours(candidates), [np.finfo(f32).max]])
    return np.unique(values[(values > 0) & np.isfinite(values)])


@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("mode", MODES)
def test_scale_mode_boundaries(elem, mode):
    amax = boundary_amaxes(elem)
    rng = np.random.default_rng(7)
    x = (rng.uniform(-1, 1, (len(amax), 32)) * amax[:, None]).astype(f32)
    x[np.arange(len(amax)), rng.integers(0, 32, len(amax))] = amax * rng.choice([f32(-1), f32(1)], len(amax))
    scale_diff, _, t_scales, m_scales = compare(x, elem, mode)
    if mode != "rceil":
        return
    # Difference 2: torchao's float32 log2 rounds down to k for amax just above max_elem * 2**k.
    assert len(scale_diff) > 200  # one per binade where |k| >= 4
    for i in scale_diff:
        ratio = Fraction(float(amax[i])) / Fraction(ELEMENT_MAX[elem])
        exact = int(m_scales[i]) - 127  # minifp8's exponent is the exact ceil(log2(ratio)), clamped
        assert Fraction(2) ** (exact - 1) < ratio <= Fraction(2) ** exact or (exact == -127 and ratio <= Fraction(2) ** -127)
        assert t_scales[i] == m_scales[i] - 1
        quotient = f32(amax[i]) / f32(ELEMENT_MAX[elem])  # torchao's descale, float32
        k = float(exact - 1)
        assert abs(math.log2(float(quotient)) - k) <= abs(float(np.spacing(f32(k)))) / 2  # float32 log2 gives k


@pytest.mark.parametrize("elem", ELEMENTS)
def test_even_mode_at_float32_max_agrees(elem):
    # torchao's bit trick carries FLT_MAX's significand into the all-ones exponent field; the field
    # (not a NaN test) then gives 128 - emax, as minifp8's definition does.
    x = np.zeros((2, 32), f32)
    x[0, 0], x[1, 0] = np.finfo(f32).max, np.nextafter(np.finfo(f32).max, f32(0))
    t_scales, t_codes = torchao_mx(x, elem, "even")
    m_scales, m_codes = minifp8_mx(x, elem, "even")
    np.testing.assert_array_equal(t_scales, [255 - ELEMENT_EMAX[elem]] * 2)
    np.testing.assert_array_equal(m_scales, t_scales)
    np.testing.assert_array_equal(m_codes, t_codes)


@pytest.mark.parametrize("elem", ELEMENTS)
def test_element_rounding_ties(elem):
    width = {"E4M3": 8, "E5M2": 8, "E2M3": 6, "E3M2": 6, "E2M1": 4}[elem]
    values = np.arange(2 ** (width - 1), dtype=np.uint8).view(ML_DTYPE[elem]).astype(np.float64)
    values = np.unique(values[np.isfinite(values)])
    top_step = values[-1] - values[-2]
    halfway = np.concatenate([(values[:-1] + values[1:]) / 2, values[-1] + np.array([top_step / 4, top_step / 2])])
    halfway = np.concatenate([halfway, -halfway])
    halfway = np.concatenate([halfway, np.zeros(-len(halfway) % 31)]).reshape(-1, 31)
    for shared_exp in (-120, -30, 0, 100):
        x64 = np.concatenate([np.full((len(halfway), 1), 2.0 ** ELEMENT_EMAX[elem]), halfway], axis=1) * 2.0**shared_exp
        x = x64.astype(f32)
        assert (x == x64).all()
        for mode in MODES:
            t_scales, t_codes = torchao_mx(x, elem, mode)
            m_scales, m_codes = minifp8_mx(x, elem, mode)
            np.testing.assert_array_equal(t_scales, m_scales)
            np.testing.assert_array_equal(t_codes, m_codes)
            scale = np.exp2(m_scales.astype(np.float64) - 127)[:, None]
            np.testing.assert_array_equal(m_codes, ml_dtypes_codes(x64 / scale, elem))
            if mode == "floor":  # the block amax is a halfway point below 2**(emax+1): ties stay ties
                np.testing.assert_array_equal(m_scales, shared_exp + 127)


@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("mode", MODES)
def test_zero_and_subnormal_blocks(elem, mode):
    x = np.zeros((4, 32), f32)
    x[1] = -0.0
    x[2] = np.arange(32) * f32(2.0**-149)  # float32 subnormals
    x[3] = -np.arange(32) * f32(2.0**-140)
    t_scales, t_codes = torchao_mx(x, elem, mode)
    m_scales, m_codes = minifp8_mx(x, elem, mode)
    np.testing.assert_array_equal(t_scales, 0)
    np.testing.assert_array_equal(m_scales, 0)
    np.testing.assert_array_equal(t_codes[:2], m_codes[:2])  # zeros, signs kept by both
    np.testing.assert_array_equal(m_codes[1], ml_dtypes_codes(np.full(32, -0.0), elem))
    check_scale_zero_blocks(x, elem, mode, t_codes, m_codes, np.array([False, False, True, True]))


@pytest.mark.parametrize("elem", ELEMENTS)
@pytest.mark.parametrize("mode", MODES)
def test_nan_and_inf_blocks(elem, mode):
    x = np.tile(np.linspace(-3, 3, 32, dtype=f32), (4, 1))
    x[0, 3] = np.nan
    x[1, 3] = np.inf
    x[2, 3] = -np.inf
    x[3, 3], x[3, 4] = np.nan, np.inf
    t_scales, t_codes = torchao_mx(x, elem, mode)
    m_scales, m_codes = minifp8_mx(x, elem, mode)
    nan_rows = [0, 3]
    np.testing.assert_array_equal(t_scales[nan_rows], 0xFF)  # difference 4: scales agree,
    np.testing.assert_array_equal(m_scales[nan_rows], 0xFF)
    np.testing.assert_array_equal(m_codes[nan_rows], 0)  # codes are don't-cares
    inf_rows = [1, 2]
    if mode == "rceil":  # Inf / max_elem rounds up to 0xFE (2**127) in both; Inf saturates
        np.testing.assert_array_equal(m_scales[inf_rows], 0xFE)
        np.testing.assert_array_equal(t_scales[inf_rows], m_scales[inf_rows])
        np.testing.assert_array_equal(t_codes[inf_rows], m_codes[inf_rows])
    else:  # difference 3
        np.testing.assert_array_equal(m_scales[inf_rows], 0xFF)
        np.testing.assert_array_equal(m_codes[inf_rows], 0)
        np.testing.assert_array_equal(t_scales[inf_rows], 127 + 128 - ELEMENT_EMAX[elem])
        np.testing.assert_array_equal(t_codes[inf_rows],
                                      ml_dtypes_codes(x[inf_rows].astype(np.float64) * 2.0 ** (ELEMENT_EMAX[elem] - 128), elem))


@pytest.mark.parametrize("elem", ELEMENTS)
def test_bfloat16_inputs(elem):
    rng = np.random.default_rng(11)
    x = torch.from_numpy((rng.standard_normal((256, 32)) * np.exp2(rng.integers(-100, 100, (256, 1)))).astype(f32))
    x = x.to(torch.bfloat16)
    for mode in MODES:
        t_scales, t_codes = torchao_mx(x, elem, mode)
        m_scales, m_codes = minifp8_mx(x.float().numpy(), elem, mode)
        np.testing.assert_array_equal(t_scales, m_scales)
        np.testing.assert_array_equal(t_codes, m_codes)


def test_fp4_packing_layout():
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((8, 64)) * 3).astype(f32)
    _, packed = mx_tensor.to_mx(torch.from_numpy(x), torch.float4_e2m1fn_x2, 32, ScaleCalculationMode.FLOOR)
    np.testing.assert_array_equal(packed.view(torch.uint8).numpy(), mx.quantize(x, "E2M1").packed())


# ---- NVFP4 --------------------------------------------------------------------------------------
def torchao_nvfp4(x, global_amax):
    per_tensor_scale = per_tensor_amax_to_scale(torch.tensor(global_amax, dtype=torch.float32))
    scales, data = nvfp4_quantize(torch.from_numpy(x), 16, per_tensor_scale)
    return scales.view(torch.uint8).numpy().ravel().copy(), unpack_uint4(data.contiguous()).numpy().copy()


def e4m3_codes(values):
    return np.minimum(values, f32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def test_nvfp4_random_tensors_agree():
    rng = np.random.default_rng(13)
    for decade in (-20, -3, 0, 5, 20):
        x = (rng.standard_normal((128, 64)) * np.exp2(rng.uniform(-6, 6, (128, 1))) * 10.0**decade).astype(f32)
        t_scales, t_codes = torchao_nvfp4(x, np.abs(x).max())
        q = mx.quantize_nvfp4(x)
        np.testing.assert_array_equal(t_scales, q.scales.ravel())
        np.testing.assert_array_equal(t_codes, q.codes)


def test_nvfp4_block_scale_boundaries():
    """Difference 5: block amaxes at E4M3 rounding boundaries of the block scale."""
    rng = np.random.default_rng(14)
    e4m3 = np.arange(127, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    midpoints = (e4m3[:-1] + e4m3[1:]) / 2
    differences = clamped = 0
    for global_amax in (f32(1.0), f32(2688.0), f32(3.7e-20), f32(1.3e25)):
        n = 1024
        ideal = rng.choice(midpoints, n) * 6 * float(global_amax) / 2688
        block_amax = np.minimum((ideal * (1 + rng.integers(-3, 4, n) * 2.0**-24)).astype(f32), global_amax)
        x = (rng.uniform(-1, 1, (n, 16)) * block_amax[:, None]).astype(f32)
        x[:, 0] = block_amax
        t_scales, t_codes = torchao_nvfp4(x, global_amax)
        q = mx.quantize_nvfp4(x, global_amax=global_amax)
        te_order = block_amax * ((f32(2688) / global_amax) * (f32(1) / f32(6)))
        torchao_order = (block_amax / f32(6)) / (global_amax / f32(2688))
        np.testing.assert_array_equal(q.scales.ravel(), e4m3_codes(te_order))
        np.testing.assert_array_equal(t_scales, e4m3_codes(np.maximum(torchao_order, f32(2.0**-6))))
        same = t_scales == q.scales.ravel()
        np.testing.assert_array_equal(t_codes[same], q.codes[same])
        differences += int((~same).sum())
        clamped += int((~same & (torchao_order < 2.0**-6)).sum())
    assert differences > 100 and clamped > 10


def test_nvfp4_zero_block():
    x = np.zeros((2, 16), f32)
    x[1, :] = np.linspace(-6, 6, 16)
    t_scales, t_codes = torchao_nvfp4(x, f32(6))
    q = mx.quantize_nvfp4(x)
    np.testing.assert_array_equal(q.scales.ravel()[0], 0)  # e4m3(0)
    np.testing.assert_array_equal(t_scales[0], e4m3_codes(f32(2.0**-6)))  # torchao's clamp, 0x08
    np.testing.assert_array_equal(t_codes, q.codes)
    np.testing.assert_array_equal(t_scales[1], q.scales.ravel()[1])
