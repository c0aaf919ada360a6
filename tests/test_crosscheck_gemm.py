"""A real scaled GEMM checked by the oracle: PyTorch's ``torch._scaled_mm`` (2.13, CPU).

``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=...)`` multiplies float8_e4m3fn operands (b
column-major) with float32 scales, per tensor (0-d scales) or rowwise (``(M, 1)`` and ``(1, N)``),
and must pass `minifp8.gemm.compare_matmul` with a float32 accumulator. Skipped where torch is not
importable (or has no ``_scaled_mm``).
"""
import numpy as np
import pytest

import minifp8
from minifp8 import gemm

torch = pytest.importorskip("torch")
if not hasattr(torch, "_scaled_mm"):
    pytest.skip("this torch has no _scaled_mm", allow_module_level=True)

M, K, N = 16, 256, 24


def operands(layout, seed=0):
    rng = np.random.default_rng(seed)
    a_codes = minifp8.encode(rng.normal(0, 100, size=(M, K)), "E4M3", saturate=True)
    b_codes = minifp8.encode(rng.normal(0, 100, size=(K, N)), "E4M3", saturate=True)
    shapes = {"per-tensor": ((), ()), "rowwise": ((M, 1), (1, N))}[layout]
    a_scales, b_scales = (np.exp(rng.uniform(-4, 0, size=shape)).astype(np.float32) for shape in shapes)
    return a_codes, a_scales, b_codes, b_scales


def torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, out_dtype):
    a = torch.from_numpy(a_codes).view(torch.float8_e4m3fn)
    b = torch.from_numpy(np.ascontiguousarray(b_codes.T)).view(torch.float8_e4m3fn).t()  # column-major
    out = torch._scaled_mm(a, b, scale_a=torch.from_numpy(np.asarray(a_scales)),
                           scale_b=torch.from_numpy(np.asarray(b_scales)), out_dtype=out_dtype)
    return out.float().numpy()


@pytest.mark.parametrize("layout", ["per-tensor", "rowwise"])
@pytest.mark.parametrize("output", ["float32", "bfloat16"])
def test_torch_scaled_mm_passes(layout, output):
    a_codes, a_scales, b_codes, b_scales = operands(layout)
    try:
        out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, getattr(torch, output))
    except (RuntimeError, NotImplementedError) as error:  # a build without this kernel on this device
        pytest.skip(f"torch._scaled_mm: {error}")
    report = gemm.compare_matmul(out, a_codes, a_scales, b_codes, b_scales, a_format="E4M3", b_format="E4M3",
                                 output=output)
    assert report.ok, str(report)


def test_a_wrong_scale_is_caught():
    """The same output checked against a scale it was not given: the oracle notices."""
    a_codes, a_scales, b_codes, b_scales = operands("rowwise")
    out = torch_scaled_mm(a_codes, a_scales, b_codes, b_scales, torch.float32)
    wrong = a_scales.copy()
    wrong[3, 0] *= np.float32(1.5)
    report = gemm.compare_matmul(out, a_codes, wrong, b_codes, b_scales, a_format="E4M3", b_format="E4M3")
    assert report.count == N and {m.row for m in report.mismatches} == {3}
