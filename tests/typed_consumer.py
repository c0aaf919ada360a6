"""A backend's test module as a type-checked suite writes it against the oracle.

Not collected by pytest (no ``test_`` prefix): ``tests/test_typing.py`` checks it with
``mypy --strict`` and runs `main`, so every call here is both well typed and real. The "kernels"
are stand-ins built from minifp8 itself; a real suite would call its CUDA or JAX casts instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

import minifp8
from minifp8 import formats, gemm, golden, mx, scaling, testing

if TYPE_CHECKING:
    from typing_extensions import assert_type  # (typing's own from Python 3.11; only read by the checker)
else:
    def assert_type(value: object, expected_type: object) -> object:
        return value


def backend_cast_e4m3(x: NDArray[np.float32]) -> NDArray[np.uint8]:
    """The kernel under test: a saturating E4M3 cast, as uint8 codes."""
    codes: NDArray[np.uint8] = minifp8.encode(x, formats.E4M3, saturate=True).astype(np.uint8)
    return codes


def check_codec(rng: np.random.Generator) -> None:
    x = rng.standard_normal(4096, dtype=np.float32) * np.float32(64)
    report = testing.compare(backend_cast_e4m3(x), x, "E4M3", saturate=True, max_rows=5)
    assert_type(report, testing.Report)
    assert report.ok, str(report)
    testing.assert_codes_equal(backend_cast_e4m3(x), x, "E4M3", saturate=True)
    values: NDArray[np.float32] = minifp8.decode(backend_cast_e4m3(x), "E4M3")
    assert np.array_equal(values, minifp8.quantize(x, formats.get("E4M3"), saturate=True))
    every_code = np.arange(256, dtype=np.uint8)
    assert np.array_equal(minifp8.decode(every_code, "E5M2"), formats.E5M2.values(), equal_nan=True)
    for batch in testing.sweep("E4M3", kind="edge"):
        assert testing.compare(backend_cast_e4m3(batch), batch, "E4M3", saturate=True).ok
    maximum: float = formats.E4M3.max
    assert maximum == 448.0


def check_mx(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 64), dtype=np.float32)
    expected = mx.quantize(x, "MXFP8_E4M3")
    assert_type(expected, mx.MXArray)
    report = testing.compare_mx(expected.scales, expected.codes, x, mx.MXFP8_E4M3)
    assert_type(report, testing.BlockReport)
    assert report.ok, str(report)
    nvfp4 = mx.quantize_nvfp4(x)
    assert_type(nvfp4, mx.NVFP4Array)


def check_scaled_gemm(rng: np.random.Generator) -> None:
    a = scaling.quantize_rowwise(rng.standard_normal((8, 256), dtype=np.float32), "E4M3")
    b = scaling.quantize_rowwise(rng.standard_normal((256, 16), dtype=np.float32), "E4M3", axis=0)
    assert_type(a, scaling.ScaledTensor)
    reference = gemm.reference_matmul(a.codes, a.scale_inv, b.codes, b.scale_inv, a_format="E4M3", b_format="E4M3")
    assert_type(reference, gemm.MatmulReference)
    kernel_output = reference.value.astype(np.float32)  # (a stand-in for the backend's float32 output)
    report = gemm.compare_matmul(kernel_output, a.codes, a.scale_inv, b.codes, b.scale_inv,
                                 a_format="E4M3", b_format="E4M3", accumulator="float32")
    assert_type(report, gemm.MatmulReport)
    tolerance: NDArray[np.float64] = report.tolerance
    assert report.ok and tolerance.shape == (8, 16), str(report)
    gemm.assert_matmul_close(kernel_output, a.codes, a.scale_inv, b.codes, b.scale_inv,
                             a_format="E4M3", b_format="E4M3")


def check_golden(folder: Path) -> None:
    manifest = golden.write(folder, ["E4M3"])
    loaded, arrays = golden.load(folder)
    schema: Any = loaded["schema"]
    assert schema == manifest["schema"] and arrays


def main(folder: Path) -> None:
    rng = np.random.default_rng(0)
    check_codec(rng)
    check_mx(rng)
    check_scaled_gemm(rng)
    check_golden(folder)
