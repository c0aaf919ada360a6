"""A CPU that flushes subnormals to zero (x86's FTZ and DAZ bits in MXCSR), as loading a library built
with -ffast-math leaves it for the whole process, or that rounds in another direction than to
nearest (MXCSR's RC field, as fesetround sets it): the casts, references, reports and golden files
refuse with a FloatingPointError instead of answering wrongly (the training casts round about half
their elements wrongly in another direction). Set through a tiny C library (x86-64 and a C
compiler, else skipped), in a subprocess, so this process keeps its own mode."""
from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from test_golden_c import COMPILER
FTZ, DAZ = 0x8000, 0x0040  # MXCSR bits 15 and 6 (Intel SDM vol. 1, 10.2.3)
ROUND_DOWN, ROUND_UP, ROUND_TOWARD_ZERO = 0x2000, 0x4000, 0x6000  # MXCSR's RC field, bits 13-14
FLUSHES = "flushes subnormal floats to zero (FTZ/DAZ)"

MXCSR_SOURCE = """#include <xmmintrin.h>
unsigned int get_mxcsr(void) { return _mm_getcsr(); }
void set_mxcsr(unsigned int value) { _mm_setcsr(value); }
"""

# Each call must raise FloatingPointError under the flags, and work once they are cleared again.
SCRIPT = """
import ctypes, sys
import numpy as np
import minifp8
from minifp8 import fp8, fp8lm, gemm, golden, mx, scaling, testing
from minifp8.explain import explain

library = ctypes.CDLL(sys.argv[1])
library.get_mxcsr.restype = ctypes.c_uint
library.set_mxcsr.argtypes = [ctypes.c_uint]
flags, clean = int(sys.argv[2]), library.get_mxcsr()
x = np.linspace(-2.0, 2.0, 64, dtype=np.float32).reshape(2, 32)
x[0, 0] = 1e-40  # a float32 subnormal
calls = {
    "encode": lambda: minifp8.encode(x, "E4M3"),
    # (a review's find: decode did not check, and its first use built a float32 table with E8M0's 2**-127
    # flushed to 0, which it kept after the flags were cleared)
    "decode": lambda: minifp8.decode(np.array([0, 1], np.uint8), "E8M0"),
    "quantize": lambda: minifp8.quantize(x, "E5M2"),
    "explain": lambda: explain(np.float32(1e-40), "E4M3"),  # (a Python float is explained exactly, in Fractions)
    "mx.quantize": lambda: mx.quantize(x, "MXFP8_E4M3"),
    "mx.quantize_nvfp4": lambda: mx.quantize_nvfp4(x),
    "scaling.quantize_current": lambda: scaling.quantize_current(x),
    "fp8.fake_quantize": lambda: fp8.fake_quantize(x, "unit"),
    "testing.compare": lambda: testing.compare(minifp8.encode(x, "E4M3"), x, "E4M3"),
    "gemm.dequantize": lambda: gemm.dequantize(minifp8.encode(x, "E4M3"), 1.0, "E4M3"),
    # each of these read or made subnormals wrongly when only the calls above checked
    "mx.quantize_block_reference": lambda: mx.quantize_block_reference(list(x[0]), "E4M3"),
    "ScaledTensor.dequantize": lambda: SCALED.dequantize(),
    "MXArray.dequantize": lambda: MX.dequantize(),
    "NVFP4Array.dequantize": lambda: NVFP4.dequantize(),
    "fp8lm.load_scaled": lambda: fp8lm.load_scaled(np.array([8, 1], np.uint8), 2.0**127, "E4M3"),
    "scaling.scale_from_amax": lambda: scaling.scale_from_amax(np.float32(1e-39), "E4M3"),
    "DelayedScaling.record_amax": lambda: scaling.DelayedScaling("E4M3").record_amax(np.float32(1e-39)),
    "DelayedScaling.update": lambda: scaling.DelayedScaling("E4M3", margin=8).update(),
    "testing.edge_cases": lambda: testing.edge_cases("E4M3"),
    "golden.write": lambda: golden.write(sys.argv[3], ["E2M1"], blocks=False),
}
SCALED, MX, NVFP4 = scaling.quantize_current(x), mx.quantize(x, "MXFP8_E4M3"), mx.quantize_nvfp4(x)
expected = {name: call() for name, call in calls.items()}  # in the clean mode
library.set_mxcsr(clean | flags)
with np.errstate(all="ignore"):  # (NumPy's arithmetic, not the library's probe)
    flushes = np.float32(2.0**-149) * np.float32(1.0) == 0
    one, tie = np.float64(1.0), np.float64(2.0**-53)
    rounds_otherwise = one + tie != one or -one - tie != -one or one + np.float64(3 * 2.0**-54) == one
assert flushes or rounds_otherwise, "the flags did not take: the test would prove nothing"
message = sys.argv[4]
for name, call in calls.items():
    for errstate in ("ignore", "raise"):  # (FTZ's underflow must not turn into NumPy's underflow error)
        try:
            with np.errstate(all=errstate):
                call()
        except FloatingPointError as error:
            assert message in str(error), (name, errstate, str(error))
        else:
            raise AssertionError(f"{name} answered under flags {sys.argv[2]}")
import contextlib, io
from minifp8 import train_tiny
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = train_tiny.main(["--steps", "1"])  # refused in one line, before the data loads
assert status == 2 and err.getvalue().count("\\n") == 1 and message in err.getvalue(), (status, err.getvalue())
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = golden.main(["--out", sys.argv[3], "--formats", "E2M1", "--no-blocks"])
assert status == 1 and err.getvalue().count("\\n") == 1 and message in err.getvalue(), (status, err.getvalue())
library.set_mxcsr(clean)
for name, call in calls.items():
    call()  # works again
assert minifp8.decode(np.array([0], np.uint8), "E8M0")[0] == np.float32(2.0**-127)
print("ok", len(calls))
"""


@pytest.fixture(scope="module")
def mxcsr_library(tmp_path_factory) -> Path:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"sets x86's MXCSR; this machine is {platform.machine()}")
    if COMPILER is None:
        pytest.skip("no C compiler on PATH (looked for cc, gcc, clang)")
    folder = tmp_path_factory.mktemp("mxcsr")
    (folder / "mxcsr.c").write_text(MXCSR_SOURCE, encoding="utf-8")
    library = folder / "libmxcsr.so"
    build = subprocess.run([COMPILER, "-O2", "-shared", "-fPIC", str(folder / "mxcsr.c"), "-o", str(library)],
                           capture_output=True, text=True, timeout=120)
    if build.returncode != 0:
        pytest.skip(f"{COMPILER} cannot build a shared library here: {build.stderr.strip()[:200]}")
    return library


@pytest.mark.parametrize("flags, message", [
    (FTZ | DAZ, FLUSHES), (FTZ, FLUSHES), (DAZ, FLUSHES), (FTZ | ROUND_UP, FLUSHES),
    (ROUND_DOWN, "rounds floats down instead of to nearest even"),
    (ROUND_UP, "rounds floats up instead of to nearest even"),
    (ROUND_TOWARD_ZERO, "rounds floats toward zero instead of to nearest even"),
], ids=["FTZ and DAZ", "FTZ", "DAZ", "FTZ, rounding up", "rounding down", "rounding up", "rounding toward zero"])
def test_every_computing_path_refuses_a_cpu_that_flushes_subnormals_or_rounds_otherwise(mxcsr_library, flags,
                                                                                        message, tmp_path):
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(mxcsr_library), str(flags), str(tmp_path / "golden"),
                             message], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok 20", result.stdout + result.stderr
