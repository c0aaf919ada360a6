"""Golden-vector files for backends in other languages: ``python -m minifp8.golden --out DIR``.

A C++, CUDA or Rust test cannot import minifp8, but it can read ``.npy`` arrays. This module writes
the oracle's answers to files, deterministically (the same minifp8 version gives byte-identical
files), together with a ``manifest.json`` that says what every array is.

File layout (schema version 2)
------------------------------
``manifest.json``:

    {"schema": "minifp8-golden", "schema_version": 2, "minifp8_version": "...",
     "notes": {"arrays": "...", "codec": "...", ...}, "entries": [ {entry}, ... ]}

``notes`` states, briefly, the rules a reader needs to interpret the entries (the module
docstrings of `minifp8.codec` and `minifp8.mx` give them in full): the array layout and the sign
bit's place, what ``format_fields`` mean (the value of every code), the formats (FNUZ's too), the
rounding modes, the sign of zero results, the codec's codes for overflow, Inf and NaN, stochastic
rounding, E8M0's rules, MX's scale modes, short last blocks and blocks with a NaN scale, NVFP4's
order of float32 operations, its caps at FLT_MAX and its dequantisation, and the scaled GEMMs.
Each entry describes one expected result:

- ``kind``: ``"codec"``, ``"decode"``, ``"mx"``, ``"nvfp4"`` or ``"gemm"``;
- ``file`` and ``sha256``: the ``.npz``'s bare name in the folder, and the sha256 of its whole bytes
  (each entry naming a file repeats it; ``manifest.json`` itself has none). The ``.npz`` is a zip
  whose members are stored uncompressed (method 0, so no inflate is needed), one per array, named
  ``<array>.npy`` (array ``x`` is member ``x.npy``), each in NPY format version 1.0, little-endian
  and C order; ``numpy.load`` reads it, and so does any zip + npy reader;
- ``format``, ``format_fields`` (``exponent_bits``, ``mantissa_bits``, ``bias``, ``signed``,
  ``has_subnormals``, ``has_infinity`` and ``nan_style``, as `minifp8.formats.FloatFormat` has
  them), ``rounding``, ``saturate``, ``input_dtype``, ``random_bit_count`` (the k of stochastic
  rounding's random bits; null for the other roundings) (``codec``); ``format`` and
  ``format_fields`` (``decode``);
  ``format`` (e.g. ``MXFP8_E4M3``), ``element_format``, ``block_size``, ``axis`` (``-1``: the
  last axis, as in NumPy), ``scale_mode``, ``rounding``, ``saturate``, ``input_dtype``,
  ``ignore_codes_where_scale`` (``mx``: 255, see below); ``format`` (``NVFP4``),
  ``element_format``, ``scale_format``, ``block_size``, ``axis``, ``input_dtype``,
  ``global_amax_given`` (``nvfp4``); ``name``, ``layout``,
  ``description``, ``format`` (e.g. ``E4M3xE5M2``), ``a_format``, ``b_format``, ``m``, ``k``, ``n``, ``a_scale_block``, ``b_scale_block``,
  ``scale_format`` (``"E8M0"``, ``"E4M3"`` or null), ``accumulator``, ``promote_every`` and ``output``
  (what the tolerance is for) (``gemm``);
- ``arrays``: which array in the file plays which role, e.g. ``{"input": "x", "expected_codes":
  "codes_nearest_even_nosat", "random_bits": null}`` (codec), ``codes`` and ``expected_values``
  (decode), ``expected_scales`` and
  ``expected_codes`` (mx: E8M0 scale codes; nvfp4: E4M3 scale codes, plus ``global_amax``,
  ``encode_scale`` and, from 0.3.3, ``expected_dequantized``); gemm: ``a_codes``, ``b_codes``,
  ``a_scales``, ``b_scales``, ``a_scale_codes``, ``b_scale_codes``, ``a_tensor_scale``,
  ``b_tensor_scale`` (null where the layout has none), ``reference``, ``magnitude``,
  ``reference_error_bound``, ``tolerance`` and, from 0.3.3, ``underflow_term``;
- ``shapes`` and ``dtypes``: the shape and the dtype (numpy's ``dtype.str``: ``"<f4"``, ``"<f8"``,
  ``"|u1"``) of every array the entry names in ``arrays``, random bits included.

Every array is little-endian. Codes are uint8, one per element in the low bits. An MX block whose
expected scale is 0xFF (NaN: the block holds a NaN, or an Inf outside ``rceil``) decodes to NaN
whatever its element codes, so its expected codes are "don't care" (minifp8 writes 0): compare
codes only where the expected scale is not ``ignore_codes_where_scale``. An NVFP4 entry's tensor
amax is its ``global_amax`` array: ``max |x|`` where ``global_amax_given`` is false, a given value
(as from a reduction across devices) where it is true.

Inputs of ``codec`` entries are every value of the format, every midpoint between neighbours and
one float32 ulp either side, the overflow threshold, zeros, +-Inf and +-NaN (where the format has
NaN), and 4,096 random values spread over every binade (E8M0's top binade lies beyond float32:
in its float32 file those become +Inf); ``float64`` files add the midpoints times
(1 +- 2^-40), which a float32-first cast rounds wrongly; last come the stochastic ties: values
``(n + f) * quantum`` (the "stochastic" note) with ``n * quantum`` the smallest positive value, 1
or max, and ``f * 2^8 = k + 1/2`` exactly (k = 0, 1, 254, 255), with random bits ``255 - k``,
where rounding ``k + 1/2`` to even decides whether to round away. ``float64`` files also hold
magnitudes float32 cannot: 1e300, 2 * FLT_MAX, 2^128, 1e-300, 2^-151 and 5e-324 (with their
negatives where the format is signed). The NaN inputs are the quiet NaNs of both signs (float32
0x7FC00000 and 0xFFC00000; float64 0x7FF8000000000000 and 0xFFF8000000000000) and, from 0.3.3,
NaNs with payloads, both signs (`NAN_PAYLOAD_BITS`): signalling ones (float32 0x7F800001 and
0x7FBFFFFF; float64 0x7FF0000000000001, 0x7FF7FFFFFFFFFFFF and 0x7FF0000020000000, whose payload
survives a truncation to float32) and quiet ones with a payload (0x7FC00001, 0x7FF8000000000001):
each gives the NaN code of its sign (IEEE 754-2019 section 6.2: every NaN input gives NaN), where a
backend that truncates the mantissa writes Inf. A reader in a language that hides a NaN's sign,
or quiets a signalling NaN as it loads it, must read the input from its bits.

``decode`` entries (``decode_<format>.npz``) give the value of every code of a format, 0 to
2^bits - 1, as float64: a decoder's golden vectors (the "decode" note).

Block files hold float32 rows blocked along the last axis, 80 elements long but for NVFP4's two cap
tensors (4 x 32 and 1 x 32). MX (3 scales a row: blocks of 32, the last one 16 elements long and
scaled as if zero-padded; no padding is stored), one input per element format: 24 rows of random values
(each row centred at a random binade from 2^-20 to 2^19, its values within 3 binades of it: 2^-23 to
2^22), among them an all-zero row, an outlier, float32 subnormals,
a NaN, an Inf and signed zeros; then rows built for the element format: every midpoint between
element values, placed so that block scaling lands it exactly on the tie (at shared exponents 5
and -127), and beside it; and blocks whose amax is 2^j, max_elem * 2^j or the "even" carry point,
with their float32 neighbours (the scale modes' boundaries; a float32 log2 rounds the neighbours
of 2^j to j). NVFP4 (5 scales a row: blocks of 16): one entry whose 24 rows are centred at random
binades from 2^-6 to 2^5 (values from 2^-9 to 2^8), with an all-zero row, signed zeros and a 16x
outlier; and one entry per given tensor amax (6 and 54.23361) whose block amaxes and elements lie
within 2 float32 steps of E4M3 and E2M1 rounding boundaries, where the order of float32
operations decides codes; and two small tensors for the note's caps: one below 2688 / FLT_MAX
(S_enc is FLT_MAX) and one with a non-zero block whose scale code is 0 (its encode scale is 1 / 0,
so FLT_MAX). Every input is built from random integers with exact or correctly rounded IEEE
operations (no libm), so the files are the same bytes on every machine.

The GEMM file (``gemm.npz``, the "gemm" note; `GEMM_PROBLEMS`) holds one scaled GEMM per layout,
16 x 256 times 256 x 32 (256 columns for DeepSeek-V3's 128 x 128 blocks of B, two by two): per
tensor (E5M2 x E4M3), rowwise (with a row of zero codes), DeepSeek-V3's 1 x 128 and 128 x 128
blocks, MX (E8M0 scales per 32) and NVFP4 (E2M1, E4M3 scales per 16, a float32 tensor scale); and
two small ones, 16 x 64 times 64 x 16: MX with NaN codes and a NaN scale, and float32 subnormal
scales whose dequantised values a float32 kernel rounds (the tolerance's underflow term). Each
entry gives the operands' codes and scales (MX's E8M0 and NVFP4's E4M3 scale codes too), and from
`minifp8.gemm` the float64 reference, S = sum |a b|, the reference's error bound, the tolerance
of a float32 kernel and its underflow term. The scales have few significant bits (at most 14), so
every float64 sum of the reference is exact (`_check_exact_sums` proves it as it writes): the
reference is the exact product, and no BLAS, summing in its own order, changes a bit of the file.

Schema 2 added ``notes``, ``dtypes``, ``ignore_codes_where_scale``, ``global_amax_given`` and the
NVFP4 entries with a given tensor amax, and made ``shapes`` list random bits too. Later files and
entries came within schema 2, as they change nothing that a reader of the earlier ones reads: the
stochastic ties and NVFP4's caps, the ``gemm`` entries, in 0.3.1 the ``decode`` entries and the
"fields" note (a reader must skip the kinds it does not know, as the "arrays" note says), and in
0.3.3 the NaN inputs with payloads and NVFP4's ``expected_dequantized`` arrays.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import lzma
import os
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import DTypeLike

from . import __version__, codec, formats, mx
from ._cli import ListFlag, Parser, exit_status_of, one_line
from .formats import FloatFormat, _check_int, _described
from .mx import MXFormat
from .testing import _magnitudes, _midpoints, edge_cases

SCHEMA_VERSION = 2
ROUNDINGS = ("nearest_even", "nearest_away", "toward_zero", "stochastic")
RANDOM_BIT_COUNT = 8
SEED = 20231022  # any fixed number: the files must not change between runs

# The manifest's "notes": what a reader needs to interpret the entries (minifp8.codec's and minifp8.mx's docstrings).
NOTES = {
    "arrays": "Every array is little-endian; 'dtypes' gives numpy's dtype.str of each. Codes are uint8, "
              "one per element in the low bits; the sign bit is the format's top bit (0x80 for 8 bits, 0x20 for "
              "FP6, 0x08 for FP4; E8M0 has none). Skip the entries whose kind you do not know: later files may "
              "add kinds within a schema version.",
    "fields": "format_fields define a format (minifp8.formats.FloatFormat). A code has signed + exponent_bits + "
              "mantissa_bits bits, in the low bits of a uint8: the sign s (the top bit, where signed), the exponent "
              "field E, the mantissa field M. Where E > 0, or has_subnormals is false, its value is (-1)**s * 2**(E "
              "- bias) * (1 + M / 2**mantissa_bits); where E = 0 and has_subnormals is true, (-1)**s * 2**(1 - bias) "
              "* M / 2**mantissa_bits (M = 0: zero). emin, the exponent of the smallest normal value, is 1 - bias, "
              "or -bias without subnormals (E8M0: -127). Special codes, by nan_style: 'ieee': E all ones with M != "
              "0 is NaN (minifp8 writes M's top bit alone), and E all ones with M = 0 is Inf where has_infinity "
              "(E5M2); 'all_ones': only E and M all ones is NaN, both signs (E4M3 0x7F and 0xFF, E8M0 0xFF); "
              "'negative_zero': only the code with just the sign bit set is NaN, so there is no -0 (FNUZ 0x80); "
              "'none': no NaN (FP6, FP4). max is the largest finite value of the other codes. The decode files "
              "hold every code's value.",
    "codec": "rounding: nearest_even (ties to even), nearest_away (ties away from zero), toward_zero "
             "(truncation), stochastic (its note). Formats: E4M3 and E5M2 as OCP OFP8 rev 1.0; E3M2, E2M3 (FP6) "
             "and E2M1 (FP4) as OCP MX v1.0; "
             "E8M0: see its note; E4M3FNUZ and E5M2FNUZ (bias 8 and 16, subnormals, no Inf, no -0) spell NaN "
             "0x80 only, and every other code is a number (max 240 and 57344). Round first, to the format's "
             "precision with an exponent unbounded above (below 2**emin the spacing stays the subnormals', "
             "2**(emin - mantissa bits)), then check for overflow (a rounded magnitude above max). In a signed "
             "format, a zero or a value that rounds to zero keeps the input's sign (-0 is 0x80, FP6 0x20, FP4 "
             "0x08), except in FNUZ, where it is 0x00. NaN gives NaN with the input's sign: 0x7F, 0xFF (E4M3); "
             "0x7E, 0xFE (E5M2); 0x80 (FNUZ). saturate=false: overflow and +-Inf give +-Inf (E5M2: 0x7C, 0xFC) or "
             "NaN (E4M3: 0x7F, 0xFF; FNUZ: 0x80). saturate=true: overflow and +-Inf give +-max (FNUZ too, as ONNX "
             "Cast-24 says; Cast-19 to Cast-23 gave FNUZ NaN for Inf). rounding=toward_zero: finite overflow gives "
             "+-max whatever saturate (IEEE 754-2019 section 7.4). FP6/FP4 (no Inf or NaN; no NaN input in their "
             "files): overflow and +-Inf give +-max. E8M0: see its note. float64 inputs round once, exactly (not "
             "through float32). minifp8.codec's module docstring.",
    "stochastic": "Write |x| = (n + f) * quantum with n an integer and 0 <= f < 1, quantum the spacing of the "
                  "format's values at |x| (2**(max(floor(log2|x|), emin) - mantissa bits)); round f * "
                  "2**random_bit_count to the nearest integer r (ties to even); round away from zero when r + "
                  "random_bits >= 2**random_bit_count (IEEE P3109 'Stochastic'; minifp8.codec.encode); then the "
                  "codec note's overflow rules.",
    "E8M0": "Unsigned, no zero; every value is a power of two. nearest_even rounds ties (1.5 * 2**k) up, to "
            "2**(k + 1), as ml_dtypes does (IEEE's ties-to-even cannot decide a one-digit significand's tie; "
            "gfloat's TiesToEven takes the even code instead). Zero, "
            "negative numbers (-Inf included) and NaN give 0xFF (NaN); values below 2**-127 give 0x00 (2**-127); "
            "overflow and +Inf give 0xFF, or 0xFE (2**127) with saturate=true; with rounding=toward_zero, finite "
            "overflow gives 0xFE whatever saturate. minifp8.codec's module docstring.",
    "mx": "Blocks of block_size along axis; a row whose length is not a multiple of block_size ends in a "
          "shorter block (as if zero-padded), so it has ceil(length / block_size) scales. shared_exp comes from "
          "the exponent bits of the block amax = max |x| (never a float log2), by scale_mode, with emax_elem the "
          "exponent of the element format's largest value (E4M3 8, E5M2 15, E3M2 4, E2M3 2, E2M1 2): floor: "
          "floor(log2(amax)) - emax_elem (OCP); ceil: ceil(log2(amax)) - emax_elem; even: "
          "floor(log2(amax with its significand rounded to the element's mantissa bits, ties away)) - "
          "emax_elem; rceil: ceil(log2(amax / max_elem)), exact. It is clamped to [-127, 127]; the scale code "
          "is shared_exp + 127, and an all-zero block gets 0x00. Elements are x * 2**-shared_exp, exact, "
          "encoded with the entry's rounding and saturate=true (the codec note). A NaN (or, except for rceil, "
          "an Inf) in a block gives scale 0xFF and the block decodes to NaN: its codes are don't-care (minifp8 "
          "writes 0), so skip them where the expected scale is ignore_codes_where_scale; rceil gives a block "
          "with an Inf (and no NaN) 0xFE, and its Inf saturates. OCP MX v1.0 section 6.3; minifp8.mx's module "
          "docstring.",
    "nvfp4": "float32 operations, each rounded to nearest even, in TransformerEngine's order: S_enc = min(2688 / "
             "global_amax, FLT_MAX) (1 if global_amax is 0); S_dec = 1 / S_enc; scale code = e4m3_saturate(min("
             "block_amax * (S_enc * float32(1/6)), FLT_MAX)), with block_amax = max |x| over the block's 16 "
             "elements; S_dec_b = the E4M3 value of that code; encode = min(1 / (S_dec_b * S_dec), FLT_MAX) "
             "(1 / 0 is Inf, so FLT_MAX); code = e2m1_rne(clamp(x * encode, -6, 6)). e4m3_saturate and e2m1_rne "
             "are the codec's E4M3 (saturate=true) and E2M1 codes, rounding to nearest even; a zero keeps its "
             "sign (-0.0 gives 0x08). Use the global_amax array as the tensor amax; the encode_scale array holds "
             "S_enc. Dequantised element = value of its E2M1 code * ((S_dec_b * global_amax) * float32(1/2688)), "
             "float32, left to right: TransformerEngine's dequantize kernel, which reads the amax, not S_dec (the "
             "two differ by a float32 step in many blocks); the expected_dequantized array holds them (float32, "
             "the input's shape). A block whose scale code is 0 dequantises to zeros (of its codes' signs) "
             "whatever its codes. minifp8.mx.quantize_nvfp4 and NVFP4Array.dequantize.",
    "decode": "codes: every code of the format, 0 to 2**bits - 1 (uint8); expected_values: the value of each "
              "(float64, exact), by the fields note: -0 is -0.0 where the format has it, Inf is Inf, and a NaN "
              "code gives NaN (compare NaN as NaN; its sign is not part of the value). minifp8.codec.decode.",
    "gemm": "A scaled GEMM D = A @ B, M x N, of dequantised operands. a_codes is M x K and b_codes K x N, both "
            "row-major (C order), uint8 codes of a_format and b_format (E2M1: one code a byte, in the low bits), "
            "whose values are the codec note's (E4M3 0x7F and 0xFF are NaN). a_scales is 2-d, R x C, and covers "
            "A in blocks of a_scale_block = [M / R, K / C] elements: A's element (i, k) is multiplied by "
            "a_scales[i // (M / R), k // (K / C)]; likewise B's element (k, j) by b_scales[k // b_scale_block[0], "
            "j // b_scale_block[1]]. Layouts (A's block, B's block): per_tensor [M, K], [K, N] (1 x 1 scales); "
            "rowwise [1, K], [K, 1] (M x 1 and 1 x N); 1x128_128x128 [1, 128], [128, 128] (DeepSeek-V3); mx "
            "[1, 32], [32, 1]; nvfp4 [1, 16], [16, 1]. The scales are float32 values; mx entries also hold their "
            "E8M0 codes (a_scale_codes, b_scale_codes: 2**(code - 127), 0xFF NaN; see the E8M0 note), nvfp4 "
            "entries the E4M3 codes of their block scales and a 0-d float32 tensor scale per operand "
            "(a_tensor_scale, b_tensor_scale; null elsewhere), which multiplies every element of its operand too. "
            "Dequantised element = value of its code * its scale (* the tensor scale), computed exactly (float64 "
            "holds it; float32 may not). reference: D in float64; these inputs make every product and every "
            "partial sum exact in float64, so reference is the exact D, and a float64 GEMM summing in any order "
            "gives it bit for bit. reference_error_bound: minifp8.gemm's bound on the reference's error for any "
            "inputs, gamma_K * magnitude / (1 - gamma_K) with gamma_n = n u / (1 - n u) and u = 2**-53 (0 where "
            "reference is NaN). magnitude: S = sum over k of |a_ik b_kj|, leaving out NaN and Inf operands "
            "(exact too). tolerance: how far from reference the float32 output of a correct kernel that "
            "accumulates in float32 (rounding to nearest, with subnormals) may lie, per output; "
            "minifp8.gemm.compare_matmul's report.tolerance, with accumulator='float32' and output='float32': "
            "acc * S / (1 - gamma_K) + (4K + 4) * 2**-149 + (1 + acc) * C, where acc = gamma_(K+3) with u = "
            "2**-24 (K + 3 roundings of each product: the K - 1 additions, dequantising each operand or scaling "
            "a block's sum, the product, one epilogue scale) and C bounds underflow that later multiplications "
            "carry (0 unless a scale or a dequantised value is below about 2**-126; the underflow_term array, "
            "M x N, holds it from 0.3.3); plus 2**-24 * (|reference| + reference_error_bound + the accumulation "
            "term) + 2**-150 for rounding to float32 output, plus reference_error_bound; 0 where reference is "
            "NaN. In float64, in this order, each operation rounded to float64 on its own (no fused "
            "multiply-add, no wider intermediate), it gives the stored tolerance bit for bit: S / (1 - gamma_K) = E; "
            "T = (acc * E if E > 0 else 0) + (4K + 4) * 2**-149, plus (1 + acc) * C where C > 0; "
            "(2**-24 * ((|reference| + reference_error_bound) + T) + 2**-150) + T + reference_error_bound. "
            "An output agrees "
            "when |output - reference| <= tolerance where reference is finite, and is NaN where reference is "
            "NaN: a NaN code in row i of A (or column j of B), or a NaN scale (0xFF) covering part of it, makes "
            "D[i, :] (or D[:, j]) NaN. No reference here is Inf. minifp8.gemm's module docstring.",
}


def write_npz(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> str:
    """Write arrays, little-endian, as an uncompressed ``.npz`` with fixed zip timestamps; return its sha256."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"golden.write_npz: path must be a file path (str or os.PathLike), got {type(path).__name__}")
    if not isinstance(arrays, Mapping):
        raise TypeError(f"golden.write_npz: arrays must be a mapping of names to arrays, got {type(arrays).__name__}")
    for name in arrays:  # (a name is a zip member's: no folders, nothing a file system reads differently)
        if not (isinstance(name, str) and name and all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)
                and name not in (".", "..")):
            error = ValueError if isinstance(name, str) else TypeError
            raise error(f"golden.write_npz: an array's name names its zip member: a non-empty str of letters, "
                        f"digits, '_', '.' and '-', got {name!r}")
    path = Path(path)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            # (np.require, not ascontiguousarray, which makes a 0-d array 1-d: the manifest's shapes hold)
            array = np.asarray(arrays[name])
            little_endian = array.astype(array.dtype.newbyteorder("<"), copy=False)  # the same bytes on any machine
            np.lib.format.write_array(member, np.require(little_endian, requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.create_system = 3  # (Unix; ZipInfo takes it from sys.platform: the bytes would vary by OS)
            archive.writestr(info, member.getvalue())
    data = buffer.getvalue()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _random_magnitudes(rng: np.random.Generator, low: int, high: int, size) -> np.ndarray:
    """float64 ``(1 + m / 2**52) * 2**e`` with integers ``m`` in [0, 2**52) and ``e`` in [low, high):
    every step exact, so the values are the same bits on every machine (``np.exp2`` or a normal
    draw goes through libm, whose last bit may differ from one platform to another)."""
    significands = 1.0 + rng.integers(0, 1 << 52, size=size) / 2.0**52
    return np.ldexp(significands, rng.integers(low, high, size=size))


def codec_inputs(fmt: str | FloatFormat, dtype: DTypeLike) -> np.ndarray:
    """The inputs of a codec file: edge cases, random values over every binade, float64
    near-midpoints and magnitudes beyond float32's range both ways, and last the values of
    `stochastic_ties`.

    Parameters
    ----------
    fmt : FloatFormat or str
    dtype : float32 or float64 dtype
        The dtype of the codec files, in any spelling ``np.dtype`` takes (``np.float32``,
        ``"float64"``, ``"<f4"``, ...). The inputs step one float32 ulp past the midpoints, so
        narrower floats would lose them, and integers cannot hold NaN or Inf.
    """
    fmt = formats.get(fmt)
    dtype = _check_float_dtype(dtype)
    rng = np.random.default_rng(SEED)
    signs = rng.choice([-1.0, 1.0], size=4096) if fmt.signed else 1.0
    magnitudes = _random_magnitudes(rng, fmt.emin - fmt.mantissa_bits - 3, fmt.emax + 2, 4096)
    with np.errstate(over="ignore", under="ignore"):  # E8M0's top binade is beyond float32: those become Inf
        random_values = (signs * magnitudes).astype(dtype)
    x = np.concatenate([edge_cases(fmt).astype(dtype), random_values])
    if dtype == np.float64:
        midpoints = _midpoints(fmt)
        near = np.concatenate([midpoints * (1 - 2.0**-40), midpoints * (1 + 2.0**-40)])
        # and magnitudes float32 cannot hold, where a cast through float32 first goes wrong: beyond its
        # largest (Inf there; toward_zero must saturate) and below half its smallest subnormal (0
        # there; E8M0 must give its smallest code, not the NaN of zero)
        wide = np.array([1e300, 2.0 * float(np.finfo(np.float32).max), 2.0**128, 1e-300, 2.0**-151, 5e-324])
        x = np.concatenate([x, near, -near if fmt.signed else near, wide, -wide if fmt.signed else wide])
    if fmt.has_nan:  # (by their bits: a float conversion may quiet a signalling NaN)
        x = np.concatenate([x, np.array(NAN_PAYLOAD_BITS[dtype.itemsize], f"u{dtype.itemsize}").view(dtype)])
    return np.concatenate([x, stochastic_ties(fmt)[0].astype(dtype)])


# NaN inputs with payloads, by bits (IEEE 754-2019 section 6.2.1: the top mantissa bit set is quiet), each with
# both signs: signalling NaNs with only the lowest payload bit or every one, and a quiet NaN with a payload;
# float64 adds a signalling NaN whose payload survives a truncation to float32's mantissa. A backend that
# truncates the mantissa, or tests the quiet bit alone, turns a signalling NaN into Inf.
NAN_PAYLOAD_BITS = {
    4: [0x7F800001, 0xFF800001, 0x7FBFFFFF, 0xFFBFFFFF, 0x7FC00001, 0xFFC00001],
    8: [0x7FF0000000000001, 0xFFF0000000000001, 0x7FF7FFFFFFFFFFFF, 0xFFF7FFFFFFFFFFFF, 0x7FF8000000000001,
        0xFFF8000000000001, 0x7FF0000020000000, 0xFFF0000020000000],
}


STOCHASTIC_TIE_STEPS = (0, 1, 254, 255)  # k, with f * 2**RANDOM_BIT_COUNT = k + 1/2


def stochastic_ties(fmt: str | FloatFormat) -> tuple[np.ndarray, np.ndarray]:
    """Inputs on a tie of stochastic rounding, and the random bits that make the tie decide.

    Write ``|x| = (n + f) * quantum`` as the "stochastic" note does. These ``x`` have
    ``f * 2**RANDOM_BIT_COUNT = k + 1/2`` exactly, for ``k`` in `STOCHASTIC_TIE_STEPS`, above
    three values ``n * quantum`` of ``fmt`` (the smallest positive one, 1 and max, where rounding
    away overflows), with both signs where ``fmt`` is signed. Rounding ``k + 1/2`` to even gives
    ``r = k`` for even ``k`` and ``k + 1`` for odd; the random bits ``2**RANDOM_BIT_COUNT - 1 - k``
    put ``r + random_bits`` at ``2**RANDOM_BIT_COUNT - 1`` (toward zero) or ``2**RANDOM_BIT_COUNT``
    (away), so rounding the tie away (even ``k``) or down (odd ``k``) instead changes the result.

    Returns
    -------
    x : float32 ndarray
    random_bits : uint8 ndarray
        The bits for ``x``, element by element.
    """
    fmt = formats.get(fmt)
    grid = _magnitudes(fmt)
    quantum = np.append(np.diff(grid), 2.0 ** (fmt.emax - fmt.mantissa_bits))  # the spacing above each value
    chosen = np.isin(grid, [grid[grid > 0][0], 1.0, fmt.max])
    steps = np.array(STOCHASTIC_TIE_STEPS)
    fractions = (2 * steps + 1) / 2.0 ** (RANDOM_BIT_COUNT + 1)  # exact
    magnitudes = (grid[chosen, None] + quantum[chosen, None] * fractions).reshape(-1)  # exact in float32
    bits = np.tile((1 << RANDOM_BIT_COUNT) - 1 - steps, chosen.sum()).astype(np.uint8)
    if fmt.signed:
        return np.concatenate([magnitudes, -magnitudes]).astype(np.float32), np.concatenate([bits, bits])
    return magnitudes.astype(np.float32), bits


def _check_float_dtype(dtype) -> np.dtype:
    """``dtype`` as the native float32 or float64 dtype; TypeError unless numpy reads it as a dtype."""
    try:
        parsed = None if dtype is None else np.dtype(dtype)  # (np.dtype(None) would be float64)
    except TypeError:
        parsed = None
    if parsed is None:
        raise TypeError(f"codec_inputs: dtype must be a float32 or float64 dtype (np.float32, 'float64', ...), "
                        f"got {type(dtype).__name__} {dtype!r}")
    if parsed.kind != "f" or parsed.itemsize not in (4, 8):
        raise ValueError(f"codec_inputs: dtype must be float32 or float64, got {parsed}")
    return parsed.newbyteorder("=")


def codec_entries(fmt: str | FloatFormat, out: Path) -> list[dict[str, Any]]:
    """Write one file per (format, input dtype) holding the inputs and the codes of every option."""
    fmt = formats.get(fmt)
    entries = []
    for dtype in (np.float32, np.float64):
        x = codec_inputs(fmt, dtype)
        rng = np.random.default_rng(SEED)
        random_bits = rng.integers(0, 1 << RANDOM_BIT_COUNT, size=x.shape, dtype=np.uint8)
        tie_bits = stochastic_ties(fmt)[1]
        random_bits[-tie_bits.size:] = tie_bits  # (codec_inputs ends with the ties)
        arrays = {"x": x, "random_bits": random_bits}
        combos = []
        for rounding in ROUNDINGS:
            for saturate in (False, True):
                name = f"codes_{rounding}_{'sat' if saturate else 'nosat'}"
                options: dict[str, Any] = {"rounding": rounding, "saturate": saturate}
                if rounding == "stochastic":
                    options.update(random_bits=random_bits, random_bit_count=RANDOM_BIT_COUNT)
                arrays[name] = codec.encode(x, fmt, **options)
                combos.append((rounding, saturate, name))
        file_name = f"codec_{fmt.name}_{np.dtype(dtype).name}.npz"
        digest = write_npz(out / file_name, arrays)
        for rounding, saturate, name in combos:
            stochastic = rounding == "stochastic"
            roles = {"input": "x", "expected_codes": name, "random_bits": "random_bits" if stochastic else None}
            entries.append({
                "kind": "codec", "file": file_name, "sha256": digest, "format": fmt.name,
                "format_fields": _format_fields(fmt), "rounding": rounding, "saturate": saturate,
                "input_dtype": np.dtype(dtype).name,
                "arrays": roles, "random_bit_count": RANDOM_BIT_COUNT if stochastic else None,
                **_layout(arrays, roles.values()),
            })
    return entries


def decode_entry(fmt: str | FloatFormat, out: Path) -> dict[str, Any]:
    """Write ``decode_<format>.npz``, every code of ``fmt`` and its value (float64), and return its entry."""
    fmt = formats.get(fmt)
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    arrays: dict[str, np.ndarray] = {"codes": codes, "values": codec.decode(codes, fmt).astype(np.float64)}  # (exact)
    file_name = f"decode_{fmt.name}.npz"
    digest = write_npz(out / file_name, arrays)
    roles = {"codes": "codes", "expected_values": "values"}
    return {"kind": "decode", "file": file_name, "sha256": digest, "format": fmt.name,
            "format_fields": _format_fields(fmt), "arrays": roles, **_layout(arrays, roles.values())}


def _format_fields(fmt: FloatFormat) -> dict[str, Any]:
    """The fields that define ``fmt`` (`minifp8.formats.FloatFormat`), so that a reader can rebuild a
    format the manifest names without knowing the name."""
    return {field.name: getattr(fmt, field.name) for field in dataclasses.fields(fmt)
            if field.name not in ("name", "aliases")}


def block_inputs(rows: int = 24, length: int = 80) -> np.ndarray:
    """Float32 rows for the block-format files, blocked along the last axis (80 = 2.5 blocks of 32).

    Rows, in order: random values at a random binade each (most rows); an all-zero row; a row with
    one huge outlier; float32 subnormals; a row with a NaN; a row with an Inf; and 0.0/-0.0 mixes.
    `mx_inputs` adds rows built for one element format.

    Parameters
    ----------
    rows, length : int
        The shape; at least 7 rows and 71 columns, to hold those special rows (1 to 6) and the Inf
        at column 70.
    """
    rows = _check_int(rows, "block_inputs: rows", 7)
    length = _check_int(length, "block_inputs: length", 71)
    rng = np.random.default_rng(SEED)
    x = _random_rows(rng, rows, length, -20, 20)
    x[1] = 0.0
    x[2, 7] = 3.0e6
    with np.errstate(under="ignore"):  # (float32 subnormals, rounded)
        x[3] = _random_rows(rng, 1, length, 0, 1)[0] * np.float32(2.0**-140)
    x[4, 40] = np.nan
    x[5, 70] = -np.inf
    x[6, ::2] = -0.0
    return x


MX_TIE_EXPONENT = 5  # ties at shared_exp 5: the block amax max_elem * 2**5
MX_BOUNDARY_BINADES = (-100, -20, 20, 100)  # |j| >= 4: a float32 log2 rounds 2**j * (1 +- 2**-24) to j


def mx_inputs(mx_format: str | MXFormat, length: int = 80) -> np.ndarray:
    """The input of one MX file: the rows of `block_inputs`, then rows built for its element format.

    The built rows (OCP MX v1.0 section 6.3; `minifp8.mx`'s module docstring), each 32-element block led by
    the element that is its amax:

    1. Ties: every midpoint between neighbouring element values times ``2**5``, with both signs,
       and the float32 values just below and above each, in blocks of amax ``max_elem * 2**5``,
       so that floor, even and rceil give ``shared_exp = 5`` and the scaled elements land exactly
       on the midpoints and one float32 step beside them (ceil gives 6: half of each midpoint,
       still a tie in the normal range).
    2. The midpoints below ``2**emax`` times ``2**-127``, both signs, in blocks of amax
       ``2**(emax - 127)``: every scale mode gives -127, so ceil meets exact ties too; most of the
       inputs are float32 subnormals (the larger midpoints of E4M3 and E5M2 are normal).
    3. Boundary amaxes, for ``j`` in `MX_BOUNDARY_BINADES`: ``2**j`` and the float32 values either
       side (floor and ceil change there, and a float32 ``log2`` rounds both neighbours to ``j``),
       ``max_elem * 2**j`` and its neighbours (rceil), and the "even" carry point
       ``(2 - 2**-(M + 1)) * 2**j`` and the float32 below it; the other elements of these blocks
       are random values below the amax, of both signs.

    Parameters
    ----------
    mx_format : str or MXFormat
        An MX format (``"MXFP8_E4M3"``, ...): its element format decides the midpoints.
    length : int
        The row length, at least 71 (see `block_inputs`).
    """
    element = mx.get(mx_format).elem
    length = _check_int(length, "mx_inputs: length", 71)
    rng = np.random.default_rng(SEED + 2)
    midpoints = _midpoints(element)
    ties = (midpoints * 2.0**MX_TIE_EXPONENT).astype(np.float32)
    beside = np.concatenate([ties, np.nextafter(ties, np.float32(0)), np.nextafter(ties, np.float32(np.inf))])
    low_ties = (midpoints[midpoints < 2.0**element.emax] * 2.0**-127).astype(np.float32)  # float32 subnormals

    amaxes = []
    for j in MX_BOUNDARY_BINADES:
        power, top = np.float32(2.0**j), np.float32(element.max * 2.0**j)
        carry = np.float32((2 - 2.0 ** -(element.mantissa_bits + 1)) * 2.0**j)
        amaxes += [np.nextafter(power, np.float32(0)), power, np.nextafter(power, np.float32(np.inf)),
                   np.nextafter(top, np.float32(0)), top, np.nextafter(top, np.float32(np.inf)),
                   np.nextafter(carry, np.float32(0)), carry]
    return np.concatenate([block_inputs(length=length),
                           _tie_rows(np.concatenate([beside, -beside]), element.max * 2.0**MX_TIE_EXPONENT, length),
                           _tie_rows(np.concatenate([low_ties, -low_ties]), 2.0 ** (element.emax - 127), length),
                           _boundary_rows(rng, np.array(amaxes, np.float32), length)])


def _tie_rows(values: np.ndarray, amax: float, length: int) -> np.ndarray:
    """float32 rows of ``length`` whose 32-blocks each start with ``amax``, then ``values`` in order
    in the other places (zeros after the last)."""
    leads = np.arange(length) % 32 == 0
    per_row = length - int(leads.sum())
    rows = -(-values.size // per_row)
    x = np.zeros((rows, length), np.float32)
    x[:, leads] = amax
    x[:, ~leads] = np.concatenate([values, np.zeros(rows * per_row - values.size, np.float32)]).reshape(rows, -1)
    return x


def _boundary_rows(rng: np.random.Generator, amaxes: np.ndarray, length: int) -> np.ndarray:
    """float32 rows of ``length``, one 32-block per amax (zero blocks after the last): the amax, with
    a random sign, then random values of both signs below it (``amax * m / 2**24``, ``m`` an integer)."""
    blocks_per_row = -(-length // 32)
    rows = -(-amaxes.size // blocks_per_row)
    block_amax: np.ndarray = np.zeros(rows * blocks_per_row, np.float32)  # (reshaped to 2-d below)
    block_amax[:amaxes.size] = amaxes * rng.choice(np.array([-1, 1], np.float32), amaxes.size)
    block_amax = block_amax.reshape(rows, blocks_per_row)
    fractions = rng.integers(-(1 << 24) + 1, 1 << 24, size=(rows, length)) / 2.0**24
    x = (np.repeat(block_amax, 32, axis=1)[:, :length] * fractions).astype(np.float32)
    x[:, ::32] = block_amax
    return x


def nvfp4_inputs(rows: int = 24, length: int = 80) -> np.ndarray:
    """Float32 rows for the NVFP4 file: random values, each row centred at a random binade from
    ``2**-6`` to ``2**5`` with its values within 3 binades of it (``2**-9`` to ``2**8``), an all-zero
    row, 0.0/-0.0 mixes and a row with a 16x outlier. One tensor scale serves all blocks, so a wider
    range (the MX rows span ``2**45``) would leave most block scales at E4M3's zero.

    Parameters
    ----------
    rows, length : int
        The shape; at least 7 rows and 8 columns, to hold the special rows (1, 2 and 6) and the
        outlier at column 7.
    """
    rows = _check_int(rows, "nvfp4_inputs: rows", 7)
    length = _check_int(length, "nvfp4_inputs: length", 8)
    rng = np.random.default_rng(SEED + 1)
    x = _random_rows(rng, rows, length, -6, 6)
    x[1] = 0.0
    x[2, 7] = 16 * np.abs(x).max()
    x[6, ::2] = -0.0
    return x


def _random_rows(rng: np.random.Generator, rows: int, length: int, low: int, high: int) -> np.ndarray:
    """float32 ``(rows, length)``: each row's values signed, from [1, 2) times ``2**e`` with ``e`` in
    [e_row - 3, e_row + 3), and ``e_row`` in [low, high) per row (`_random_magnitudes`, libm-free)."""
    centres = rng.integers(low, high, size=(rows, 1))
    magnitudes = _random_magnitudes(rng, -3, 3, (rows, length)) * np.ldexp(1.0, centres)
    signs = rng.choice([-1.0, 1.0], size=(rows, length))
    with np.errstate(under="ignore"):  # (rows down among float32's subnormals round to them)
        return (signs * magnitudes).astype(np.float32)


def nvfp4_cap_inputs() -> dict[str, np.ndarray]:
    """Two small float32 tensors for the caps of the "nvfp4" note, which the other inputs never meet.

    ``"tiny"`` (4 x 32): random magnitudes in ``[2**-127, 2**-118)`` (float32 subnormals among them;
    the largest drawn is below ``2**-119``), so ``2688 / max |x|`` exceeds FLT_MAX and S_enc is
    FLT_MAX. ``"zero_scale"`` (1 x 32): 6.0,
    so S_enc = 448, and a block of amax ``2**-17``, whose scale ``2**-17 * 74.67`` rounds to E4M3's 0:
    its encode scale is ``1 / 0``, so FLT_MAX, which takes ``2**-17`` to 6, ``2**-127`` to 2 and keeps
    zeros (an encode scale of 0 or Inf would not).
    """
    tiny = _random_rows(np.random.default_rng(SEED + 4), 4, 32, -124, -121)
    zero_scale = np.zeros((1, 32), np.float32)
    zero_scale[0, 0] = 6.0
    zero_scale[0, 16:24] = [2.0**-17, -2.0**-17, 0.0, -0.0, 2.0**-127, -2.0**-128, 3 * 2.0**-130, 2.0**-149]
    return {"tiny": tiny, "zero_scale": zero_scale}


NVFP4_GLOBAL_AMAXES = (6.0, 54.23361)  # S_enc: 448 exactly, and one that is not a power of two times 448


def nvfp4_boundary_inputs(global_amax: float | np.floating | np.integer, rows: int = 6,
                          length: int = 80) -> np.ndarray:
    """Float32 rows for an NVFP4 entry with a given tensor amax, where the order of the float32
    operations decides codes (`minifp8.mx.quantize_nvfp4`).

    Block ``b`` (16 elements) has its amax within 2 float32 steps of the midpoint between the
    E4M3 values of codes ``c_b`` and ``c_b + 1`` times ``6 * global_amax / 2688``, with ``c_b``
    running from 0x01 to 0x7D over the blocks, so that its block scale lies on a rounding
    boundary; its other elements lie within 2 float32 steps of an E2M1 midpoint (0.25 to 5)
    times ``global_amax * S_dec_b / 2688`` (the inverse of the element scale), with random signs.
    Every amax is below ``global_amax``.

    Parameters
    ----------
    global_amax : float
        The tensor amax the entry gives: a finite number > 0, rounded to float32.
    rows, length : int
        The shape; at least 1 row and 16 columns.
    """
    global_amax = mx._check_float32_number(global_amax, "nvfp4_boundary_inputs: global_amax", positive=True)
    rows = _check_int(rows, "nvfp4_boundary_inputs: rows", 1)
    length = _check_int(length, "nvfp4_boundary_inputs: length", 16)
    rng = np.random.default_rng(SEED + 3)
    used = 16 * (length // 16)  # the columns of whole blocks; the rest stay zero
    e4m3 = formats.E4M3.values().astype(np.float64)
    scale_codes = np.round(np.linspace(0x01, 0x7D, rows * used // 16)).astype(np.int64)
    midpoints = (e4m3[scale_codes] + e4m3[scale_codes + 1]) / 2
    block_amax = _float32_steps((midpoints * 6 * global_amax / 2688).astype(np.float32),
                                rng.integers(-2, 3, scale_codes.size))
    tiny = np.finfo(np.float32).tiny

    def check_normal(values: np.ndarray) -> None:
        if not np.all(np.isfinite(values) & ((values == 0) | (np.abs(values) >= tiny))):
            raise ValueError(f"nvfp4_boundary_inputs: global_amax {float(global_amax):.6g} is too small: inputs "
                             f"near its smallest block scales would fall below float32's normal numbers, where "
                             f"float32 steps are not the boundaries this file is for; give "
                             f"{_NVFP4_SMALLEST_AMAX:g} or more")

    check_normal(block_amax)
    blocks = np.zeros((scale_codes.size, 16), np.float32)
    blocks[:, 0] = block_amax
    x = np.zeros((rows, length), np.float32)
    x[:, :used] = blocks.reshape(rows, used)
    block_scales = codec.decode(mx.quantize_nvfp4(x, global_amax=global_amax).scales[:, :used // 16], "E4M3")
    inverse_scale = block_scales.reshape(-1, 1).astype(np.float64) * global_amax / 2688
    near = (rng.choice(_midpoints(formats.E2M1), (scale_codes.size, 15)) * inverse_scale).astype(np.float32)
    near = np.minimum(_float32_steps(near, rng.integers(-2, 3, near.shape)), block_amax[:, None])
    blocks[:, 1:] = near * rng.choice(np.array([-1, 1], np.float32), near.shape)
    x[:, :used] = blocks.reshape(rows, used)
    check_normal(x)
    return x


_NVFP4_SMALLEST_AMAX = 1e-30
"""A ``global_amax`` from which `nvfp4_boundary_inputs` keeps every input a float32 normal number."""


def _float32_steps(values: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Positive float32 ``values`` moved by ``steps`` float32 steps each (an integer on the bits)."""
    return (values.view(np.int32) + steps.astype(np.int32)).view(np.float32)


def _layout(arrays: dict[str, np.ndarray], names) -> dict:
    """The ``shapes`` and ``dtypes`` (numpy's little-endian ``dtype.str``) of the named arrays."""
    names = [name for name in names if name is not None]
    return {"shapes": {name: list(np.shape(arrays[name])) for name in names},
            "dtypes": {name: np.asarray(arrays[name]).dtype.newbyteorder("<").str for name in names}}


def block_entries(out: Path) -> list[dict[str, Any]]:
    """MX files (every named MX format, every scale mode) and one NVFP4 file (several entries)."""
    entries = []
    for mx_format in mx.FORMATS.values():
        x = mx_inputs(mx_format)
        arrays = {"x": x}
        for scale_mode in mx.SCALE_MODES:
            result = mx.quantize(x, mx_format, scale_mode=scale_mode)
            arrays[f"scales_{scale_mode}"], arrays[f"codes_{scale_mode}"] = result.scales, result.codes
        file_name = f"mx_{mx_format.name}.npz"
        digest = write_npz(out / file_name, arrays)
        for scale_mode in mx.SCALE_MODES:
            roles = {"input": "x", "expected_scales": f"scales_{scale_mode}", "expected_codes": f"codes_{scale_mode}"}
            entries.append({
                "kind": "mx", "file": file_name, "sha256": digest, "format": mx_format.name,
                "element_format": mx_format.elem.name, "block_size": mx_format.block_size, "axis": -1,
                "scale_mode": scale_mode, "rounding": "nearest_even", "saturate": True, "input_dtype": "float32",
                "ignore_codes_where_scale": mx.E8M0_NAN, "arrays": roles, **_layout(arrays, roles.values()),
            })
    cases = [("", nvfp4_inputs(), None)] + [(f"_{i}", nvfp4_boundary_inputs(amax), amax)
                                            for i, amax in enumerate(NVFP4_GLOBAL_AMAXES, 1)]
    cases += [(f"_{name}", x, None) for name, x in nvfp4_cap_inputs().items()]
    arrays = {}
    nvfp4_roles: list[tuple[dict[str, str], bool]] = []  # (the names of each entry's arrays, global_amax given)
    for suffix, x, global_amax in cases:
        nvfp4 = mx.quantize_nvfp4(x, global_amax=global_amax)
        arrays.update({f"x{suffix}": x, f"scales{suffix}": nvfp4.scales, f"codes{suffix}": nvfp4.codes,
                       f"global_amax{suffix}": np.array(nvfp4.global_amax, np.float32),
                       f"encode_scale{suffix}": np.array(nvfp4.encode_scale, np.float32),
                       f"dequantized{suffix}": nvfp4.dequantize()})
        nvfp4_roles.append(({"input": f"x{suffix}", "expected_scales": f"scales{suffix}",
                             "expected_codes": f"codes{suffix}", "global_amax": f"global_amax{suffix}",
                             "encode_scale": f"encode_scale{suffix}", "expected_dequantized": f"dequantized{suffix}"},
                            global_amax is not None))
    digest = write_npz(out / "nvfp4.npz", arrays)
    for names, given in nvfp4_roles:
        entries.append({
            "kind": "nvfp4", "file": "nvfp4.npz", "sha256": digest, "format": "NVFP4", "element_format": "E2M1",
            "scale_format": "E4M3", "block_size": mx.NVFP4_BLOCK_SIZE, "axis": -1, "input_dtype": "float32",
            "global_amax_given": given, "arrays": names, **_layout(arrays, names.values()),
        })
    return entries


# ---- scaled GEMMs (the "gemm" note) ----------------------------------------------------------------
# name, layout, a_format, b_format, (M, K, N), description
GEMM_PROBLEMS = (
    ("per_tensor", "per_tensor", "E5M2", "E4M3", (16, 256, 32),
     "one float32 scale per operand (A in E5M2, as a gradient; B in E4M3)"),
    ("rowwise", "rowwise", "E4M3", "E4M3", (16, 256, 32),
     "a float32 scale per row of A and per column of B; row 3 of A is zero codes (0x00 and 0x80)"),
    ("1x128_128x128", "1x128_128x128", "E4M3", "E4M3", (16, 256, 256),
     "DeepSeek-V3: a float32 scale per 1 x 128 tile of A and per 128 x 128 block of B (2 x 2 blocks)"),
    ("mx", "mx", "E4M3", "E5M2", (16, 256, 32), "MX: an E8M0 scale per 32 elements along K"),
    ("nvfp4", "nvfp4", "E2M1", "E2M1", (16, 256, 32),
     "NVFP4: E2M1 codes, an E4M3 scale per 16 elements along K, and a float32 tensor scale per operand"),
    ("mx_nan", "mx", "E4M3", "E4M3", (16, 64, 16),
     "MX with NaN: A[5, 10] is 0x7F and A[9, 40] is 0xFF (E4M3 NaN: rows 5 and 9 of D are NaN); B's E8M0 "
     "scale [1, 7] is 0xFF (NaN: column 7 of D is NaN)"),
    ("rowwise_tiny", "rowwise", "E4M3", "E4M3", (16, 64, 16),
     "float32 subnormal scales for A (about 2**-138) and large ones for B (about 2**100): A's dequantised "
     "values lie below 2**-126, where a float32 kernel rounds them to float32 subnormals; the tolerance's "
     "underflow term C covers that"),
)
GEMM_LAYOUTS = ("per_tensor", "rowwise", "1x128_128x128", "mx", "nvfp4")
_GEMM_SCALE_FORMATS = {"mx": "E8M0", "nvfp4": "E4M3"}


def gemm_scale_blocks(layout: str, m: int, k: int, n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The blocks that one scale covers in A (M x K) and in B (K x N) under ``layout``, one of `GEMM_LAYOUTS`."""
    if layout not in GEMM_LAYOUTS:
        raise ValueError(f"gemm_scale_blocks: layout must be one of {', '.join(GEMM_LAYOUTS)}, got {layout!r}")
    m, k, n = (_check_int(size, f"gemm_scale_blocks: {name}", 1) for name, size in (("m", m), ("k", k), ("n", n)))
    blocks = {"per_tensor": ((m, k), (k, n)), "rowwise": ((1, k), (k, 1)), "1x128_128x128": ((1, 128), (128, 128)),
              "mx": ((1, 32), (32, 1)), "nvfp4": ((1, 16), (16, 1))}
    along_k = blocks[layout][0][1]
    if k % along_k:  # (a partial block would make minifp8.gemm read other blocks from the scales' count)
        raise ValueError(f"gemm_scale_blocks: k must be a multiple of {along_k}, the {layout} blocks along K, "
                         f"got {k}")
    return blocks[layout]


def _gemm_element_codes(rng: np.random.Generator, fmt, shape: tuple, low: int, high: int) -> np.ndarray:
    """Element codes: E2M1 any of its 16 codes; E4M3/E5M2 random values at binades [low, high) with
    random signs, rounded to the format, and about one code in 16 set to 0x00."""
    fmt = formats.get(fmt)
    if fmt.name == "E2M1":
        return rng.integers(0, 16, size=shape).astype(np.uint8)
    values = rng.choice([-1.0, 1.0], size=shape) * _random_magnitudes(rng, low, high, shape)
    codes = codec.encode(values, fmt, saturate=True)
    codes[rng.integers(0, 16, size=shape) == 0] = 0
    return codes


def _float32_scales(rng: np.random.Generator, shape: tuple, bits: int, low: int, high: int) -> np.ndarray:
    """Positive float32 scales of exactly ``bits`` significant bits at binades [low, high) (exact steps).
    Few bits keep every sum of the GEMM exact in float64 (`_check_exact_sums`)."""
    significands = rng.integers(1 << (bits - 1), 1 << bits, size=shape)
    return np.ldexp(significands.astype(np.float64), rng.integers(low, high, size=shape) - (bits - 1)).astype(np.float32)


def gemm_inputs(name: str) -> dict[str, np.ndarray]:
    """The operands of GEMM problem ``name`` (one of `GEMM_PROBLEMS`), from golden's seed.

    Returns ``a_codes`` (M x K) and ``b_codes`` (K x N), uint8; ``a_scales`` and ``b_scales``,
    float32, laid out as `gemm_scale_blocks` says (2-d: per tensor 1 x 1); for MX the E8M0 codes
    of the scales, ``a_scale_codes`` and ``b_scale_codes``; for NVFP4 the E4M3 codes of the block
    scales and the 0-d float32 tensor scales ``a_tensor_scale`` and ``b_tensor_scale``.
    """
    problems = {problem[0]: problem for problem in GEMM_PROBLEMS}
    if name not in problems:
        raise ValueError(f"gemm_inputs: name must be one of {', '.join(problems)}, got {name!r}")
    index = list(problems).index(name)
    _, layout, a_format, b_format, (m, k, n), _ = problems[name]
    rng = np.random.default_rng([SEED, 5, index])
    (a_rows, a_columns), (b_rows, b_columns) = gemm_scale_blocks(layout, m, k, n)
    a_shape, b_shape = (m // a_rows, k // a_columns), (k // b_rows, n // b_columns)
    arrays = {"a_codes": _gemm_element_codes(rng, a_format, (m, k), -3, 3),
              "b_codes": _gemm_element_codes(rng, b_format, (k, n), -3, 3)}
    if layout == "mx":
        for operand, shape in (("a", a_shape), ("b", b_shape)):
            scale_codes = (127 + rng.integers(-6, 6, size=shape)).astype(np.uint8)
            arrays[f"{operand}_scale_codes"] = scale_codes
        if name == "mx_nan":
            arrays["a_codes"][5, 10], arrays["a_codes"][9, 40] = 0x7F, 0xFF
            arrays["b_scale_codes"][1, 7] = mx.E8M0_NAN
        for operand in "ab":
            arrays[f"{operand}_scales"] = codec.decode(arrays[f"{operand}_scale_codes"], "E8M0")
    elif layout == "nvfp4":
        for operand, shape in (("a", a_shape), ("b", b_shape)):
            # E4M3 codes of 1.mmm * 2**e, e in [-2, 2): exponent field 7 + e
            fields = 7 + rng.integers(-2, 2, size=shape)
            arrays[f"{operand}_scale_codes"] = (fields * 8 + rng.integers(0, 8, size=shape)).astype(np.uint8)
            arrays[f"{operand}_scales"] = codec.decode(arrays[f"{operand}_scale_codes"], "E4M3")
            arrays[f"{operand}_tensor_scale"] = _float32_scales(rng, (), 12, -10, -6)
    elif name == "rowwise_tiny":
        # float32 subnormals j * 2**-149 with 12-bit j: about 2**-138
        arrays["a_scales"] = (rng.integers(1 << 11, 1 << 12, size=a_shape) * np.float32(2.0**-149)).astype(np.float32)
        arrays["b_scales"] = _float32_scales(rng, b_shape, 10, 98, 102)
    else:
        bits = {"per_tensor": 14, "rowwise": 12, "1x128_128x128": 10}[layout]
        low, high = (-2, 2) if layout == "1x128_128x128" else (-4, 4)
        arrays["a_scales"] = _float32_scales(rng, a_shape, bits, low, high)
        arrays["b_scales"] = _float32_scales(rng, b_shape, bits, low, high)
    if name == "rowwise":
        arrays["a_codes"][3] = np.where(np.arange(k) % 3 == 0, 0x80, 0x00)
    return arrays


def _gemm_scale_values(arrays: dict, operand: str) -> np.ndarray:
    """The full scale of each block of an operand, float64: the scales times the tensor scale (exact)."""
    scales = arrays[f"{operand}_scales"].astype(np.float64)
    tensor_scale = arrays.get(f"{operand}_tensor_scale")
    return scales if tensor_scale is None else scales * np.float64(tensor_scale)


def _grid_bits(values: np.ndarray, axis: int) -> int:
    """The most bits any line along ``axis`` of ``values`` spans: ``h - g`` with every finite value of
    the line a multiple of ``2**g`` below ``2**h`` in magnitude (0 for a line of zeros)."""
    magnitudes = np.where(np.isfinite(values), np.abs(values), 0.0)
    mantissas, exponents = np.frexp(magnitudes)  # magnitude = mantissa * 2**exponent, mantissa in [0.5, 1)
    significands = np.ldexp(mantissas, 53).astype(np.int64)
    lowest_bit = np.frexp((significands & -significands).astype(np.float64))[1].astype(np.int64) - 1
    nonzero, exponents = magnitudes > 0, exponents.astype(np.int64)  # (int64: the fill values below fit)
    top = np.where(nonzero, exponents, -(1 << 20)).max(axis=axis)
    bottom = np.where(nonzero, exponents - 53 + lowest_bit, 1 << 20).min(axis=axis)
    return int(np.where(nonzero.any(axis=axis), top - bottom, 0).max())


def _check_exact_sums(a: np.ndarray, b: np.ndarray) -> None:
    """Raise unless every product and every partial sum of ``a @ b`` (float64, dequantised; NaN and Inf
    left out) is exact in float64, whatever the order: the terms of an output are multiples of
    ``2**(g_a + g_b)`` below ``2**(h_a + h_b)``, and K of them stay below ``2**53`` such units. Then
    BLAS, in any order, with or without FMA, gives the exact product, so the file's bytes are the same
    on every machine."""
    bits = _grid_bits(a, axis=1) + _grid_bits(b, axis=0) + (a.shape[1] - 1).bit_length()
    if bits > 53:
        raise RuntimeError(f"golden: the GEMM inputs need {bits} bits for exact float64 sums (53 at most)")


def gemm_entries(out: Path) -> list[dict]:
    """One file, ``gemm.npz``, with an entry per problem of `GEMM_PROBLEMS`: operands, scales, the
    reference and the tolerance of `minifp8.gemm` for a float32 kernel with float32 output."""
    from . import gemm  # (gemm imports testing, as golden does; no cycle, but only this needs it)

    arrays, described = {}, []
    for name, layout, a_format, b_format, (m, k, n), description in GEMM_PROBLEMS:
        inputs = gemm_inputs(name)
        a_scales, b_scales = _gemm_scale_values(inputs, "a"), _gemm_scale_values(inputs, "b")
        operands = (inputs["a_codes"], a_scales, inputs["b_codes"], b_scales)
        _check_exact_sums(gemm.dequantize(inputs["a_codes"], a_scales, a_format),
                          gemm.dequantize(inputs["b_codes"], b_scales, b_format))
        reference = gemm.reference_matmul(*operands, a_format=a_format, b_format=b_format)
        report = gemm.compare_matmul(reference.value.astype(np.float32), *operands, a_format=a_format,
                                     b_format=b_format, accumulator="float32", output="float32", max_rows=0)
        if not report.ok:
            raise RuntimeError(f"golden: the float32 rounding of the GEMM reference {name} is beyond its tolerance")
        carried = gemm._carried_underflow(*gemm._operands(*operands, a_format, b_format), gemm._accumulator("float32",
                                                                                                      None))
        results = {"reference": report.reference.value, "magnitude": report.reference.magnitude,
                   "reference_error_bound": report.reference.error_bound, "tolerance": report.tolerance,
                   "underflow_term": np.broadcast_to(np.asarray(carried, np.float64), (m, n)).copy()}
        roles = {role: f"{name}_{role}" for role in (*inputs, *results)}
        arrays.update({roles[role]: array for role, array in {**inputs, **results}.items()})
        a_block, b_block = gemm_scale_blocks(layout, m, k, n)
        optional = {role: roles.get(role) for role in ("a_scale_codes", "b_scale_codes", "a_tensor_scale",
                                                       "b_tensor_scale")}
        described.append(({
            "kind": "gemm", "file": "gemm.npz", "name": name, "layout": layout, "description": description,
            "format": f"{a_format}x{b_format}", "a_format": a_format, "b_format": b_format, "m": m, "k": k, "n": n,
            "a_scale_block": list(a_block), "b_scale_block": list(b_block),
            "scale_format": _GEMM_SCALE_FORMATS.get(layout), "accumulator": "float32", "promote_every": None,
            "output": "float32",
        }, {**roles, **optional}))
    digest = write_npz(out / "gemm.npz", arrays)
    return [{**fields, "sha256": digest, "arrays": roles, **_layout(arrays, roles.values())}
            for fields, roles in described]


def write(out: str | os.PathLike[str], format_names: str | FloatFormat | Iterable[str | FloatFormat] | None = None,
          blocks: bool = True) -> dict[str, Any]:
    """Write every golden file under ``out`` and return the manifest (also written as manifest.json).

    Parameters
    ----------
    out : str or os.PathLike
        The folder (created if missing). An existing folder is written into: files of the names
        this writes (``manifest.json``, ``codec_<format>_<dtype>.npz``, ``decode_<format>.npz``, ``mx_<format>.npz``,
        ``nvfp4.npz``, ``gemm.npz``) are replaced; other files stay as they are, and only the manifest says
        which files are this run's.
    format_names : str, FloatFormat or sequence of them, optional
        The formats of the codec and decode files: one name, or a non-empty list (duplicates are written
        once); default every catalogued format.
    blocks : bool
        Also write the MX, NVFP4 and GEMM files.
    """
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"golden.write: out must be a folder path (str or os.PathLike), got {type(out).__name__} "
                        f"{out!r}")
    if not os.fspath(out):  # (Path("") is the current folder)
        raise ValueError("golden.write: out must name a folder, got an empty path")
    if format_names is None:
        selected = list(formats.CATALOGUE.values())
    else:
        try:
            selected = formats.get_list(format_names, "format_names")
        except (TypeError, ValueError) as error:
            raise type(error)(f"golden.write: {error}") from None
    for fmt in selected:  # (a file is named by its format's name, which the manifest gives as the format)
        if not all(c.isascii() and (c.isalnum() or c in "_.-") for c in fmt.name):  # (never empty: FloatFormat)
            raise ValueError(f"golden.write: a format's name names its files: letters, digits, '_', '.' and '-' "
                             f"only, got {fmt.name!r}")
        try:  # (a name `formats.get` reads: the catalogue's, or an alias of it such as float8_e4m3fn)
            known = [formats.get(fmt.name)]
        except ValueError:
            known = []
        same_name = [other for other in selected if other.name == fmt.name] + known
        # (a format's equality: its fields, its name among them; an alias names the same fields otherwise)
        clash = next((other for other in same_name if dataclasses.replace(other, name=fmt.name) != fmt), None)
        if clash is not None:
            where = "the catalogue's" if known and clash is known[0] else "another listed"
            raise ValueError(f"golden.write: {fmt!r} has a name of {where} {clash!r}, whose fields differ: "
                             f"files and entries are named by the format's name; rename it")
        folded = next((other.name for other in selected if other.name != fmt.name
                       and other.name.casefold() == fmt.name.casefold()), None)
        if folded is not None:
            raise ValueError(f"golden.write: the format names {fmt.name!r} and {folded!r} differ only in case: "
                             f"their files would be one file on a case-insensitive file system (macOS, Windows); "
                             f"rename one")
    blocks = formats._check_bool(blocks, "golden.write: blocks")
    out = Path(out)
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError("it is a file, not a folder")
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".minifp8-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise OSError(f"cannot write golden files to {out}: {error.strerror or error}") from error
    entries = []
    for fmt in selected:
        entries += codec_entries(fmt, out) + [decode_entry(fmt, out)]
    if blocks:
        entries += block_entries(out) + gemm_entries(out)
    manifest = {"schema": "minifp8-golden", "schema_version": SCHEMA_VERSION, "minifp8_version": __version__,
                "notes": NOTES, "entries": entries}
    # newline="\n": text mode on Windows would write "\r\n", and the bytes are promised the same everywhere
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8",
                                       newline="\n")
    return manifest


def load(directory: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Read a golden directory with numpy alone: the manifest and ``{file name: {array: ndarray}}``.

    Raises ``ValueError`` when ``manifest.json`` is not a minifp8 golden manifest of a schema this
    version reads (not JSON, nested too deeply, or ``entries`` not a list of objects that each name
    a file in ``directory`` by its bare name and its sha256 in hex), when a file's sha256 is not
    the one its entries record (a truncated copy, or files from another run), or when an entry
    names an array its file does not hold, or gives an array a shape or dtype (``shapes``,
    ``dtypes``) other than the one its file holds; ``FileNotFoundError`` when a listed file is missing.
    """
    directory = Path(directory)
    shown = directory / "manifest.json"
    try:
        manifest = json.loads(shown.read_text(encoding="utf-8"))
    except RecursionError:  # (json's own error for arrays or objects nested thousands deep)
        raise ValueError(f"golden.load: {shown}: its JSON is nested too deeply to read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:  # (their messages name no file)
        raise ValueError(f"golden.load: {shown} is not a JSON text: {error}") from None
    schema = (manifest.get("schema"), manifest.get("schema_version")) if isinstance(manifest, dict) else None
    if schema != ("minifp8-golden", SCHEMA_VERSION):
        raise ValueError(f"golden.load: {shown} must be a 'minifp8-golden' manifest of "
                         f"schema_version {SCHEMA_VERSION}, got schema and version {schema}")
    entries = manifest.get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"golden.load: {shown}: entries must be a list, got {type(entries).__name__}")
    for index, entry in enumerate(entries):
        name = entry.get("file") if isinstance(entry, dict) else None
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        # a bare file name: a manifest may not send the reader elsewhere ("../x.npz", "/etc/...")
        if not (isinstance(name, str) and name and name == Path(name).name and name not in (".", "..")
                and "\\" not in name and isinstance(digest, str) and len(digest) == 64
                and set(digest) <= set("0123456789abcdef")):
            raise ValueError(f"golden.load: {shown}: entry {index} must be an object with a file (a bare file name "
                             f"in the directory) and its sha256 (64 hex digits), got file {_described(name)} and "
                             f"sha256 {_described(digest)}")
    files = {}
    digests = {}  # several entries may name one file, each with its sha256: the file is read once, checked by each
    for index, entry in enumerate(manifest["entries"]):
        path = directory / entry["file"]
        data = None
        if entry["file"] not in digests:
            if not path.is_file():
                raise FileNotFoundError(f"golden.load: {path}: the manifest lists it, but there is no such file")
            data = path.read_bytes()
            digests[entry["file"]] = hashlib.sha256(data).hexdigest()
        if digests[entry["file"]] != entry["sha256"]:
            raise ValueError(f"golden.load: {path} has sha256 {digests[entry['file']]}, but the manifest's entry "
                             f"{index} records {entry['sha256']}: the file is damaged or from another run")
        if data is not None:
            if not data.startswith(b"PK"):  # (np.load would say "pickled (object) data", naming no file)
                raise ValueError(f"golden.load: {path} is not an .npz archive (a zip file), which the manifest's "
                                 f"entry {index} says it is")
            try:  # (a damaged archive: zipfile's or NumPy's error, naming no file)
                with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                    files[entry["file"]] = {name: archive[name] for name in archive.files}
                raw = sorted(name for name, array in files[entry["file"]].items() if not isinstance(array, np.ndarray))
                if raw:  # (NumPy hands back a member without the .npy header as its bytes)
                    raise ValueError(f"members {raw} are not .npy arrays")
            except (zipfile.BadZipFile, ValueError, OSError, EOFError, zlib.error, lzma.LZMAError) as error:
                raise ValueError(f"golden.load: {path} is not a readable .npz archive, which the manifest's "
                                 f"entry {index} says it is ({type(error).__name__}: {error})") from None
        roles = entry.get("arrays", {})
        named = roles.values() if isinstance(roles, dict) else ()
        missing = sorted(name for name in named if isinstance(name, str) and name not in files[entry["file"]])
        if missing:
            raise ValueError(f"golden.load: {shown}: entry {index} names arrays {missing} that "
                             f"{entry['file']} does not hold")
        _check_layout(entry, files[entry["file"]], f"golden.load: {shown}: entry {index}")
    return manifest, files


def _check_layout(entry: dict, arrays: dict[str, np.ndarray], where: str) -> None:
    """Check that the arrays an entry's ``shapes`` and ``dtypes`` name have that shape and dtype.

    A reader in another language sizes its buffers from the manifest, so the two must agree; a
    hand-edited manifest (the files' checksums still match) is refused here rather than in its tests.
    """
    for key, actual in (("shapes", lambda array: list(array.shape)), ("dtypes", lambda array: array.dtype.str)):
        listed = entry.get(key, {})
        if not isinstance(listed, dict):
            raise ValueError(f"{where}: {key} must be an object mapping array names to their {key[:-1]}s, "
                             f"got {type(listed).__name__}")
        for name, expected in listed.items():
            if name not in arrays:
                raise ValueError(f"{where} gives the {key[:-1]} of an array {name!r} that {entry['file']} "
                                 f"does not hold")
            if actual(arrays[name]) != expected:
                raise ValueError(f"{where} gives array {name!r} the {key[:-1]} {expected!r}, but {entry['file']} "
                                 f"holds it with {key[:-1]} {actual(arrays[name])!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (0 written, 1 the folder cannot be written or the CPU
    flushes subnormals or rounds other than to nearest). Bad flags print a one-line error and raise
    ``SystemExit(2)``, as argparse does; ``-h`` raises ``SystemExit(0)``."""
    parser = Parser(  # one-line errors, a list flag given twice refused
        prog="python -m minifp8.golden",
        description="Write golden-vector files (.npz + manifest.json) for testing another backend against minifp8.",
        epilog=("File layout (schema version " + __doc__.split("\nFile layout (schema version ", 1)[1]
                if __doc__ else "File layout: this module's docstring (python -OO drops it).")  # (None under -OO)
        + "\nExit status: 0 written, 1 the folder cannot be written (or the CPU flushes subnormals or rounds "
          "other than to nearest), 2 bad flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True,
                        help="output folder, created if missing; an existing one is written into: files of the "
                             "names this writes are replaced, other files stay, and manifest.json lists this "
                             "run's files only (required)")
    parser.add_argument("--formats", default=None, action=ListFlag,
                        help=f"comma-separated formats of the codec and decode files, in any case, each written once "
                             f"(default: all: {','.join(formats.CATALOGUE)}); the MX, NVFP4 and GEMM files do "
                             f"not depend on it (see --no-blocks)")
    parser.add_argument("--no-blocks", action="store_true", help="skip the MX, NVFP4 and GEMM files")
    args = parser.parse_args(argv)
    if not args.out.strip():
        parser.error("--out must name a folder, got an empty string")
    names = None
    if args.formats is not None:
        names = [name.strip() for name in args.formats.split(",") if name.strip()]
        if not names:
            parser.error(f"--formats names no format, got {args.formats!r}; leave it out for all formats")
        for name in names:
            try:
                formats.get(name)
            except ValueError as error:
                parser.error(f"--formats: {error}")
    try:
        if Path(args.out).exists() and not Path(args.out).is_dir():
            print(one_line(f"{parser.prog}: error: --out {args.out} is a file, not a folder"), file=sys.stderr)
            return 1
        manifest = write(args.out, names, blocks=not args.no_blocks)
    except OSError as error:
        print(one_line(f"{parser.prog}: error: --out: {error}"), file=sys.stderr)
        return 1
    except FloatingPointError as error:  # the CPU's float mode is not IEEE's default (codec._check_float_environment)
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    files = sorted({entry["file"] for entry in manifest["entries"]})
    print(f"wrote {len(files)} files and manifest.json ({len(manifest['entries'])} entries) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(exit_status_of(main))  # (status 141, quietly, under `| head`)
