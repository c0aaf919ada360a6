"""Real scaled GEMMs checked by the oracle: PyTorch's ``torch._scaled_mm`` on the CPU and on a GPU.

``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=...)`` multiplies float8_e4m3fn operands (b
column-major) with float32 scales, per tensor (0-d scales), rowwise (``(M, 1)`` and ``(1, N)``)
or, on Hopper, blockwise (A ``(M, K/128)``, B ``(K/128, N)`` or ``(K/128, N/128)``). Skipped where
torch is not importable (or has no ``_scaled_mm``); the GPU tests where CUDA is absent.

- CPU (oneDNN; torch 2.13 and 2.11): passes `minifp8.gemm.compare_matmul` with a float32
  accumulator. torch 2.11 takes per-tensor scales alone there.
- Hopper (cuBLAS, torch 2.11 with CUDA 13.0 on an H200; measured with M = N = 128): the FP8
  tensor cores do not sum a K-slice of products exactly. With operands of one sign the error is
  about 4.4e-4 of ``S = sum |a b|`` (median; at most 6.3e-4) at K = 1024, 4096 and 16384 alike,
  so beyond a float32 accumulator's bound at small K: every output fails that check at K = 1024.
  Without fast accumulation the output passes the model of DeepSeek-V3 (arXiv:2412.19437, section
  3.3.2): sums of about 14 bits added into float32 every 128 products (``accumulator=14,
  promote_every=128``). With ``use_fast_accum=True`` the error grows with K (median 1.5% of S
  at K = 1024, 7.7% at K = 4096): it fails that model too and fits a 14-bit accumulator with no
  promotion. Operands of mixed signs hide most of this (their errors are a few 1e-5 of S).
"""
import numpy as np
import pytest

import minifp8
from minifp8 import gemm

torch = pytest.importorskip("torch")
if not hasattr(torch, "_scaled_mm"):
    pytest.skip("this torch has no _scaled_mm", allow_module_level=True)

M, K, N = 16, 256, 24
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
on_hopper = pytest.mark.skipif(not HOPPER, reason="these tests state what Hopper's FP8 tensor cores do")
DEEPSEEK_MODEL = {"accumulator": 14, "promote_every": 128}
LAYOUTS = {"per-tensor": lambda m, k, n: ((), ()), "rowwise": lambda m, k, n: ((m, 1), (1, n)),
           "1x128 x 1x128": lambda m, k, n: ((m, k // 128), (k // 128, n)),
           "1x128 x 128x128": lambda m, k, n: ((m, k // 128), (k // 128, n // 128))}


def operands(layout, seed=0, shape=(M, K, N), positive=False):
    rng = np.random.default_rng(seed)
    m, k, n = shape
    if positive:  # products of one sign: no cancellation hides an accumulator's error
        a, b = rng.uniform(16, 448, size=(m, k)), rng.uniform(16, 448, size=(k, n))
    else:
        a, b = rng.normal(0, 100, size=(m, k)), rng.normal(0, 100, size=(k, n))
    a_codes, b_codes = minifp8.encode(a, "E4M3", saturate=True), minifp8.encode(b, "E4M3", saturate=True)
    a_scales, b_scales = (np.exp(rng.uniform(-4, 0, size=shape)).astype(np.float32)
                          for shape in LAYOUTS[layout](m, k, n))
    return a_codes, a_scales, b_codes, b_scales


def torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, out_dtype, device="cpu", fast_accum=False):
    """``torch._scaled_mm`` on ``device``, or a skip where this build has no such kernel there."""
    a = torch.from_numpy(a_codes).view(torch.float8_e4m3fn).to(device)
    b = torch.from_numpy(np.ascontiguousarray(b_codes.T)).view(torch.float8_e4m3fn).to(device).t()  # column-major
    scale_a = torch.from_numpy(np.asarray(a_scales)).to(device)
    scale_b = torch.from_numpy(np.asarray(b_scales)).to(device)
    if scale_a.dim() == 2 and scale_a.shape[1] not in (1, a.shape[1]):  # 1x128 blocks: (M, K/128), M-major
        scale_a = scale_a.t().contiguous().t()
    if scale_b.dim() == 2 and scale_b.shape[1] not in (1, b.shape[1]):  # 128x128 blocks: (K/128, N/128), K-major
        scale_b = scale_b.t().contiguous().t()
    try:
        out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                               use_fast_accum=fast_accum)
    except (RuntimeError, NotImplementedError) as error:  # a build or device without this kernel
        pytest.skip(f"torch._scaled_mm on {device}: {str(error).splitlines()[0]}")
    return out.float().cpu().numpy()


def check(out, a_codes, a_scales, b_codes, b_scales, **options):
    return gemm.compare_matmul(out, a_codes, a_scales, b_codes, b_scales, a_format="E4M3", b_format="E4M3",
                               **options)


@pytest.mark.parametrize("layout", ["per-tensor", "rowwise"])
@pytest.mark.parametrize("output", ["float32", "bfloat16"])
def test_torch_scaled_mm_passes_on_the_cpu(layout, output):
    a_codes, a_scales, b_codes, b_scales = operands(layout)
    out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, getattr(torch, output))
    report = check(out, a_codes, a_scales, b_codes, b_scales, output=output)
    assert report.ok, str(report)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=on_hopper)])
def test_a_wrong_scale_is_caught(device):
    """The same output checked against a scale it was not given: the oracle notices."""
    layout = "per-tensor" if device == "cpu" else "rowwise"
    a_codes, a_scales, b_codes, b_scales = operands(layout, shape=(M, K, 32))  # (cuBLAS: N a multiple of 16)
    out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, torch.float32, device)
    wrong = a_scales.copy()
    if layout == "per-tensor":
        wrong *= np.float32(1.5)
        report = check(out, a_codes, wrong, b_codes, b_scales)
        assert report.count == out.size
        return
    wrong[3, 0] *= np.float32(1.5)
    report = check(out, a_codes, wrong, b_codes, b_scales, **DEEPSEEK_MODEL)
    # (the promoted model's looser bound lets a few of row 3's outputs, those whose terms cancel, pass)
    assert {m.row for m in report.mismatches} == {3} and report.count >= out.shape[1] // 2


@on_hopper
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("output", ["float32", "bfloat16"])
def test_hopper_scaled_mm_passes_the_promoted_model(layout, output):
    a_codes, a_scales, b_codes, b_scales = operands(layout, shape=(256, 1024, 256))
    out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, getattr(torch, output), "cuda")
    report = check(out, a_codes, a_scales, b_codes, b_scales, output=output, **DEEPSEEK_MODEL)
    assert report.ok, str(report)


@on_hopper
def test_hopper_sums_are_not_float32_sums():
    """Operands of one sign, K = 1024: every output is beyond a float32 accumulator's bound, by
    about as much at K = 4096 (the error is the tensor cores', not the running sum's), and the
    report's hint names a narrower accumulator; the promoted model holds."""
    for k in (1024, 4096):
        a_codes, a_scales, b_codes, b_scales = operands("per-tensor", seed=1, shape=(128, k, 128), positive=True)
        out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, torch.float32, "cuda")
        reference = gemm.reference_matmul(a_codes, a_scales, b_codes, b_scales, a_format="E4M3", b_format="E4M3")
        relative = np.abs(out - reference.value) / reference.magnitude
        assert 2.0**-13 < np.median(relative) < 2.0**-10, np.median(relative)
        float32 = check(out, a_codes, a_scales, b_codes, b_scales)
        assert not float32.ok and (k > 1024 or float32.count == out.size)
        assert k > 1024 or "narrower than declared" in str(float32)
        assert check(out, a_codes, a_scales, b_codes, b_scales, **DEEPSEEK_MODEL).ok


@on_hopper
def test_hopper_fast_accumulation_fails_the_promoted_model():
    """``use_fast_accum=True`` keeps the sum in the tensor cores: the DeepSeek-V3 model (14 bits,
    float32 every 128 products) catches it, and a 14-bit accumulator without promotion fits."""
    a_codes, a_scales, b_codes, b_scales = operands("per-tensor", seed=1, shape=(128, 4096, 128), positive=True)
    out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, torch.float32, "cuda", fast_accum=True)
    promoted = check(out, a_codes, a_scales, b_codes, b_scales, **DEEPSEEK_MODEL)
    assert promoted.count == out.size
    assert check(out, a_codes, a_scales, b_codes, b_scales, accumulator=14).ok
    slow = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, torch.float32, "cuda")
    assert check(slow, a_codes, a_scales, b_codes, b_scales, **DEEPSEEK_MODEL).ok
