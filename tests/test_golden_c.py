"""The golden files serve a consumer in another language: C.

``tests/golden_consumer.c`` (C99, standard library only) reads the ``.npz`` files with its own zip
and ``.npy`` reader and checks every expected code and scale against its own encoders, written from
the specifications (IEEE 754-2019, OCP OFP8 rev 1.0, OCP MX v1.0) and the manifest's notes: one
generic encoder for every catalogued format, every rounding mode (stochastic with the files' random
bits), float32 and float64 inputs, the four MX scale modes and NVFP4's float32 steps; and for the
GEMM entries, its own decoding of the scale codes, a float64 GEMM that must give the (exact)
reference and S bit for bit, and a float32 GEMM that must lie within the stored tolerance. These
tests compile it, run it on every entry of the files that ``minifp8.golden`` writes by default, and
show that it fails on a damaged expected code, scale or reference in each kind of file, on a
malformed file, and, with one rule of the notes broken (a GEMM scale applied twice among them), on
exactly the entries built for that rule.
"""
from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from minifp8 import formats, golden, mx

SOURCE = Path(__file__).with_name("golden_consumer.c")
COMPILER = next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)


@pytest.fixture(scope="module")
def consumer(tmp_path_factory) -> Path:
    """The compiled consumer (C99, warnings on; not errors, so that a newer compiler's new warnings do
    not fail the suite: the file builds without any under gcc -Wall -Wextra -Wpedantic)."""
    if COMPILER is None:
        pytest.skip("no C compiler on PATH (looked for cc, gcc, clang): cannot build tests/golden_consumer.c")
    folder = tmp_path_factory.mktemp("consumer")
    # a compiler that cannot build an empty program is none (macOS's cc without the Command Line
    # Tools is a stub that asks to install them): skip, where our own file failing to build fails
    (folder / "empty.c").write_text("int main(void) { return 0; }\n", encoding="utf-8")
    probe = subprocess.run([COMPILER, str(folder / "empty.c"), "-o", str(folder / "empty")], capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{COMPILER} cannot build an empty C program: {probe.stderr.strip()[:200]}")
    executable = folder / "golden_consumer"
    build = subprocess.run([COMPILER, "-std=c99", "-O2", "-Wall", "-Wextra", "-Wpedantic", str(SOURCE),
                            "-o", str(executable)], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"{COMPILER} failed:\n{build.stderr}"
    return executable


@pytest.fixture(scope="module")
def golden_files(tmp_path_factory) -> tuple[Path, dict]:
    """What ``python -m minifp8.golden --out DIR`` writes by default (every format, the block files)."""
    folder = tmp_path_factory.mktemp("golden")
    return folder, golden.write(folder)


def consumer_arguments(entry: dict) -> list[str]:
    """One entry of the consumer's command line (see the usage in golden_consumer.c)."""
    roles = entry["arrays"]
    if entry["kind"] == "decode":
        return ["decode", entry["file"], roles["codes"], roles["expected_values"], entry["format"]]
    if entry["kind"] == "codec":
        arguments = ["codec", entry["file"], roles["input"], roles["expected_codes"], entry["format"],
                     str(int(entry["saturate"])), f"input_dtype={entry['input_dtype']}",
                     f"rounding={entry['rounding']}"]
        if roles["random_bits"] is not None:
            arguments += [f"random_bits={roles['random_bits']}", f"random_bit_count={entry['random_bit_count']}"]
        return arguments
    if entry["kind"] == "gemm":
        assert (entry["accumulator"], entry["output"], entry["promote_every"]) == ("float32", "float32", None)
        arguments = ["gemm", entry["file"], roles["a_codes"], entry["a_format"], roles["a_scales"], roles["b_codes"],
                     entry["b_format"], roles["b_scales"], roles["reference"], roles["magnitude"],
                     roles["reference_error_bound"], roles["tolerance"], roles["underflow_term"]]
        if entry["scale_format"] is not None:
            arguments += [f"scale_format={entry['scale_format']}", f"a_scale_codes={roles['a_scale_codes']}",
                          f"b_scale_codes={roles['b_scale_codes']}"]
        if roles["a_tensor_scale"] is not None:
            arguments += [f"a_tensor_scale={roles['a_tensor_scale']}", f"b_tensor_scale={roles['b_tensor_scale']}"]
        return arguments
    assert entry["axis"] == -1 and entry["input_dtype"] == "float32"  # what the consumer assumes
    if entry["kind"] == "mx":
        assert entry["ignore_codes_where_scale"] == 0xFF and entry["saturate"] is True
        return ["mx", entry["file"], roles["input"], roles["expected_scales"], roles["expected_codes"],
                entry["element_format"], str(entry["block_size"]), f"scale_mode={entry['scale_mode']}",
                f"rounding={entry['rounding']}"]
    assert entry["kind"] == "nvfp4" and entry["block_size"] == 16
    assert (entry["element_format"], entry["scale_format"]) == ("E2M1", "E4M3")
    return ["nvfp4", entry["file"], roles["input"], roles["expected_scales"], roles["expected_codes"],
            roles["global_amax"], roles["encode_scale"], str(int(entry["global_amax_given"])),
            roles["expected_dequantized"]]


def run_consumer(consumer: Path, folder: Path, entries: list[dict]) -> subprocess.CompletedProcess:
    command = [str(consumer), str(folder)] + [arg for entry in entries for arg in consumer_arguments(entry)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def load_arrays(folder: Path, entry: dict) -> dict:
    with np.load(folder / entry["file"]) as archive:
        return {key: archive[key] for key in archive.files}


def expected_line(entry: dict, arrays: dict) -> tuple[str, int]:
    """The consumer's line for an entry that passes, and the number of values it must compare,
    counted here from the arrays: every code; for blocks every scale, and the codes of the blocks
    whose scale is not NaN (their others are don't-care); NVFP4 adds S_enc, every dequantised value
    and, where it is not given, the tensor amax."""
    roles = entry["arrays"]
    if entry["kind"] == "gemm":  # five values an output (float32 within tolerance, reference, S, the reference's
        # error bound, the tolerance), and scale codes
        outputs = arrays[roles["reference"]].size
        checked = 5 * outputs + sum(arrays[roles[name]].size for name in ("a_scale_codes", "b_scale_codes")
                                    if roles[name] is not None)
        return (f"ok gemm {entry['a_format']}x{entry['b_format']} {entry['m']}x{entry['k']}x{entry['n']} "
                f"{entry['file']}:{roles['reference']}: {outputs} outputs, {checked} values checked, 0 mismatches"
                ), checked
    if entry["kind"] == "decode":
        codes = arrays[roles["codes"]].size
        return (f"ok decode {entry['format']} {entry['file']}:{roles['expected_values']}: {codes} codes, 0 mismatches",
                codes)
    inputs = arrays[roles["input"]]
    if entry["kind"] == "codec":
        return (f"ok codec {entry['format']} {entry['input_dtype']} {entry['rounding']} saturate="
                f"{int(entry['saturate'])} {entry['file']}:{roles['expected_codes']}: {inputs.size} inputs, "
                f"0 mismatches"), inputs.size
    scales, size = arrays[roles["expected_scales"]], entry["block_size"]
    checked = scales.size + int(np.repeat(scales != 0xFF, size, axis=1)[:, :inputs.shape[1]].sum())
    described = (f"{entry['file']}:{roles['expected_scales']},{roles['expected_codes']}: {scales.size} blocks, "
                 f"{inputs.size} elements")
    if entry["kind"] == "mx":
        return (f"ok mx {entry['element_format']} block_size={size} scale_mode={entry['scale_mode']} {described}, "
                f"{checked} values checked, 0 mismatches"), checked
    checked += 1 + (not entry["global_amax_given"]) + inputs.size  # (S_enc, the amax, the dequantised values)
    return (f"ok nvfp4 given={int(entry['global_amax_given'])} {described}, {checked} values checked, "
            f"0 mismatches"), checked


def test_consumer_in_c_checks_every_entry_of_every_file(consumer, golden_files):
    folder, manifest = golden_files
    entries = manifest["entries"]
    # every file the writer produces, every entry: 8 formats x 2 input dtypes x 4 roundings x 2 saturations,
    # 5 MX formats x 4 scale modes, and NVFP4 with max |x|, with each given tensor amax and the two cap tensors
    assert {path.name for path in folder.glob("*.npz")} == {entry["file"] for entry in entries}
    kinds = [entry["kind"] for entry in entries]
    assert kinds.count("codec") == len(formats.CATALOGUE) * 2 * len(golden.ROUNDINGS) * 2 == 128
    assert kinds.count("decode") == len(formats.CATALOGUE) == 8  # every code of each format, and its value
    assert kinds.count("mx") == len(mx.FORMATS) * len(mx.SCALE_MODES) == 20
    assert kinds.count("nvfp4") == 1 + len(golden.NVFP4_GLOBAL_AMAXES) + len(golden.nvfp4_cap_inputs()) == 5
    # and a GEMM per scale layout, two of them with NaN and with subnormal dequantised values
    assert kinds.count("gemm") == len(golden.GEMM_PROBLEMS) == 7
    result = run_consumer(consumer, folder, entries)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    files = {}
    for entry in entries:
        if entry["file"] not in files:
            files[entry["file"]] = load_arrays(folder, entry)
    expected = [expected_line(entry, files[entry["file"]]) for entry in entries]
    total = sum(checked for _, checked in expected)
    assert result.stdout.splitlines() == [line for line, _ in expected] + [
        f"summary: {len(entries)} entries, {total} values checked, 0 mismatches"]


@pytest.mark.parametrize("flags", [["-ffp-contract=fast", "-march=native"], ["-mfpmath=387"]],
                         ids=["fused multiply-add", "x87"])
def test_consumer_in_c_rebuilds_the_tolerances_under_any_float_code_generation(golden_files, tmp_path, flags):
    """A review's find: the note's tolerance, rebuilt in one expression, failed 58 outputs where the compiler
    fuses a multiply and an add (clang's default within an expression, GCC's across statements outside ISO
    C; FMA hardware, as -march=native gives here) and thousands under x87's wider intermediates. Built so,
    the consumer still agrees with every value (a compiler that lacks a flag skips its case)."""
    if COMPILER is None:
        pytest.skip("no C compiler on PATH")
    executable = tmp_path / "golden_consumer"
    build = subprocess.run([COMPILER, "-std=c99", "-O2", *flags, str(SOURCE), "-o", str(executable)],
                           capture_output=True, text=True, timeout=120)
    if build.returncode != 0:
        pytest.skip(f"{COMPILER} cannot build with {' '.join(flags)} here: {build.stderr.strip()[:200]}")
    folder, manifest = golden_files
    result = run_consumer(executable, folder, manifest["entries"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert result.stdout.splitlines()[-1].endswith(" 0 mismatches")


def _block_of(arrays: dict, entry: dict, wanted) -> tuple[int, int]:
    """The first (row, block) whose expected scale satisfies ``wanted``."""
    scales = arrays[entry["arrays"]["expected_scales"]]
    row, block = np.argwhere(wanted(scales))[0]
    return int(row), int(block)


def _amax_bits(inputs: np.ndarray, row: int, block: int, size: int) -> int:
    return int((inputs[row, block * size:(block + 1) * size].view("<u4") & 0x7FFFFFFF).max())


def _damage_a_code(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    """Change one expected code (in a block whose scale is not NaN) to its neighbour; return the
    array's name and the mismatch line the consumer must print (up to the input's value)."""
    roles = entry["arrays"]
    name, inputs = roles["expected_codes"], arrays[roles["input"]]
    if entry["kind"] == "codec":
        index = inputs.size // 2
    else:
        row, block = _block_of(arrays, entry, lambda scales: (scales != 0xFF) & (scales != 0x00))
        index = row * inputs.shape[1] + block * entry["block_size"] + 5
    codes = arrays[name].reshape(-1)
    original = int(codes[index])
    codes[index] ^= 1
    bits = inputs.reshape(-1)[index:index + 1].view(f"<u{inputs.itemsize}")[0]
    return name, (f"  mismatch {entry['file']}:{name}[{index}]: input 0x{bits:0{2 * inputs.itemsize}X} (",
                  f"): expected 0x{original ^ 1:02X}, this encoder gives 0x{original:02X}")


def _damage_a_value(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    """Move one decoded value (code 0x01, the smallest subnormal) to the next float64 up."""
    name = entry["arrays"]["expected_values"]
    original = arrays[name][1]
    arrays[name][1] = np.nextafter(original, np.inf)
    return name, (f"  mismatch {entry['file']}:{name}[1]: code 0x01: expected {arrays[name][1]:.17g}, ",
                  f"this decoder gives {original:.17g}")


def _damage_a_scale(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    roles = entry["arrays"]
    name = roles["expected_scales"]
    row, block = _block_of(arrays, entry, lambda scales: (scales != 0xFF) & (scales != 0x00))
    original = int(arrays[name][row, block])
    arrays[name][row, block] ^= 1
    amax = _amax_bits(arrays[roles["input"]], row, block, entry["block_size"])
    return name, (f"  mismatch {entry['file']}:{name}[{row}, {block}]: block amax 0x{amax:08X} (",
                  f"): expected scale 0x{original ^ 1:02X}, this encoder gives 0x{original:02X}")


def _damage_the_encode_scale(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    name = entry["arrays"]["encode_scale"]
    original = int(arrays[name].view("<u4"))
    arrays[name] = np.array(original + 1, "<u4").view("<f4")  # the next float32
    return name, (f"  mismatch {entry['file']}:{name}: expected 0x{original + 1:08X} (",
                  f"), this consumer gives 0x{original:08X} (")


def _damage_the_reference(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    """Move one output of a GEMM's reference to the next float64 up: the consumer's float64 GEMM, exact
    for these inputs, no longer equals it (the float32 kernel's output still lies within tolerance)."""
    name = entry["arrays"]["reference"]
    original = arrays[name][2, 3]
    arrays[name][2, 3] = np.nextafter(original, np.inf)
    return name, (f"  mismatch {entry['file']}:{name}[2, 3]: the float64 GEMM gives {original:.17g}, ",
                  f"expected {arrays[name][2, 3]:.17g}")


def _damage_a_gemm_bound(role: str, what: str):
    """Inflate one output's stored reference error bound or tolerance a thousandfold (a review's find: the
    consumer used the tolerance as given, so any inflated one passed every kernel)."""
    def damage(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
        name = entry["arrays"][role]
        original = arrays[name][2, 3]
        arrays[name][2, 3] = 1000 * original
        return name, (f"  mismatch {entry['file']}:{name}[2, 3]: {what} {original:.17g}, ",
                      f"expected {arrays[name][2, 3]:.17g}")
    damage.__name__ = f"_damage_the_{role}"
    return damage


def _damage_a_dequantized_value(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    """Move one NVFP4 dequantised value (a nonzero one) to the next float32 up."""
    name = entry["arrays"]["expected_dequantized"]
    values = arrays[name].reshape(-1)
    index = int(np.flatnonzero(values)[3])
    original = int(values[index:index + 1].view("<u4")[0])
    values[index:index + 1].view("<u4")[0] += 1
    return name, (f"  mismatch {entry['file']}:{name}[{index}]: expected 0x{original + 1:08X} (",
                  f"), this consumer gives 0x{original:08X} (")


def _damage_a_signalling_nan_code(arrays: dict, entry: dict) -> tuple[str, tuple[str, str]]:
    """Make the code of the first signalling NaN input the Inf of its sign, as a backend that truncates
    its mantissa writes (0x7F800001 keeps only the payload bits that truncation drops)."""
    roles = entry["arrays"]
    name, inputs = roles["expected_codes"], arrays[roles["input"]]
    index = int(np.flatnonzero(inputs.view("<u4") == golden.NAN_PAYLOAD_BITS[4][0])[0])
    original = int(arrays[name][index])
    arrays[name][index] = 0x7C
    return name, (f"  mismatch {entry['file']}:{name}[{index}]: input 0x7F800001 (",
                  f"): expected 0x7C, this encoder gives 0x{original:02X}")


def _entry(kind: str, **fields):
    """A test of whether a manifest entry is of ``kind`` with these fields (``input``: its input array)."""
    def matches(entry):
        roles = {"input": entry["arrays"].get("input")}
        return entry["kind"] == kind and all({**entry, **roles}[key] == value for key, value in fields.items())
    return matches


@pytest.mark.parametrize("selected, damage", [
    (_entry("decode", format="E5M2"), _damage_a_value),
    (_entry("codec", format="E4M3", input_dtype="float32", rounding="nearest_even", saturate=True), _damage_a_code),
    (_entry("codec", format="E8M0", input_dtype="float64", rounding="stochastic", saturate=False), _damage_a_code),
    (_entry("codec", format="E2M3", input_dtype="float32", rounding="toward_zero", saturate=False), _damage_a_code),
    (_entry("mx", format="MXFP4_E2M1", scale_mode="rceil"), _damage_a_scale),
    (_entry("mx", format="MXFP6_E3M2", scale_mode="even"), _damage_a_code),
    (_entry("nvfp4", input="x_1"), _damage_a_scale),
    (_entry("nvfp4", input="x_2"), _damage_a_code),
    (_entry("nvfp4", input="x"), _damage_the_encode_scale),
    (_entry("gemm", name="mx"), _damage_the_reference),
    (_entry("gemm", name="rowwise"), _damage_a_gemm_bound("tolerance", "the note's tolerance is")),
    (_entry("gemm", name="rowwise_tiny"), _damage_a_gemm_bound("tolerance", "the note's tolerance is")),
    (_entry("gemm", name="nvfp4"), _damage_a_gemm_bound("reference_error_bound", "the reference's error bound is")),
    (_entry("nvfp4", input="x"), _damage_a_dequantized_value),
    (_entry("codec", format="E5M2", input_dtype="float32", rounding="toward_zero", saturate=False),
     _damage_a_signalling_nan_code),
], ids=["decode-E5M2-value",
        "codec-E4M3-code", "codec-E8M0-float64-stochastic-code", "codec-E2M3-code", "mx-MXFP4-rceil-scale",
        "mx-MXFP6-even-code", "nvfp4-given-amax-scale", "nvfp4-given-amax-code", "nvfp4-encode-scale",
        "gemm-mx-reference", "gemm-rowwise-tolerance", "gemm-rowwise-tiny-tolerance", "gemm-nvfp4-error-bound",
        "nvfp4-dequantized", "codec-E5M2-signalling-nan"])
def test_consumer_in_c_names_a_damaged_expected_value(consumer, golden_files, tmp_path, selected, damage):
    """One expected code or scale changed in a file: the consumer exits 1 and names the index (row and
    block for a scale), the input (the block amax) and both values; the file's other entries pass."""
    folder, manifest = golden_files
    damaged_entry = next(filter(selected, manifest["entries"]))
    copy = Path(shutil.copytree(folder, tmp_path / "damaged"))
    arrays = load_arrays(copy, damaged_entry)
    name, (line_start, line_end) = damage(arrays, damaged_entry)
    np.savez(copy / damaged_entry["file"], **arrays)  # numpy's own writer (zip64 local headers)
    result = run_consumer(consumer, copy, manifest["entries"])
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr
    mismatches = [line for line in result.stdout.splitlines() if line.startswith("  mismatch")]
    assert len(mismatches) == 1 and mismatches[0].startswith(line_start) and line_end in mismatches[0], \
        (mismatches, line_start, line_end)
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].endswith(", 1 mismatches") and f" {damaged_entry['file']}:" in failed[0]
    # (the line names the damaged array, or, for an array it does not list, the entry's own)
    named = {"gemm": "reference", "nvfp4": "expected_scales"}.get(damaged_entry["kind"])
    assert name in failed[0] or (named is not None and f":{damaged_entry['arrays'][named]}" in failed[0])
    passed = [line for line in result.stdout.splitlines() if line.startswith("ok ")]
    assert len(passed) == len(manifest["entries"]) - 1  # the other entries, of the same file too
    assert result.stdout.endswith(" 1 mismatches\n")


def _codec(*format_names, rounding=None):
    return lambda entry: (entry["kind"] == "codec" and entry["format"] in format_names
                          and rounding in (None, entry["rounding"]))


def _nvfp4(input_name):
    return lambda entry: entry["kind"] == "nvfp4" and entry["arrays"]["input"] == input_name


def _gemm(*names):
    return lambda entry: entry["kind"] == "gemm" and entry["name"] in names


# Rules that the notes state, each broken in a copy of the consumer: (its code, the broken code, the
# entries that must fail). Before the inputs built for them (-NaN; stochastic ties; NVFP4's caps), every
# entry passed with each of these.
CONSUMER_MUTANTS = {
    "a NaN drops its sign": ("return nan_code(f, x->negative && f->is_signed);", "return nan_code(f, 0);",
                             _codec("E4M3", "E5M2")),  # (FNUZ: 0x80 for both signs)
    "stochastic ties of f * 2**K round away": (
        "return quotient + (side > 0 || (side == 0 && (quotient & 1)));", "return quotient + (side >= 0);",
        _codec(*formats.CATALOGUE, rounding="stochastic")),
    "stochastic ties of f * 2**K round down": (
        "return quotient + (side > 0 || (side == 0 && (quotient & 1)));", "return quotient + (side > 0);",
        _codec(*formats.CATALOGUE, rounding="stochastic")),
    "FNUZ's +-Inf gives NaN when saturating (ONNX Cast-19's rule; Cast-24's is +-max)": (
        "        return overflow_code(f, x->negative, saturate || !has_nan);",
        "        return f->nan_style == NAN_NEGATIVE_ZERO ? nan_code(f, 0) : overflow_code(f, x->negative, saturate || !has_nan);",
        lambda entry: entry["kind"] == "codec" and entry["format"].endswith("FNUZ") and entry["saturate"]),
    "S_enc is not capped at FLT_MAX": ("return min_with_flt_max(quotient);", "return quotient;", _nvfp4("x_tiny")),
    "1 / 0 gives an encode scale of 0": ("if (denominator == 0.0f) {\n        return FLT_MAX;",
                                         "if (denominator == 0.0f) {\n        return 0.0f;", _nvfp4("x_zero_scale")),
    # the GEMM entries: each tolerance is tight enough to fail a kernel with one of these bugs
    "a GEMM scale applied twice": ("const float value = decoded * scale;", "const float value = decoded * scale * scale;",
                                   _gemm(*(problem[0] for problem in golden.GEMM_PROBLEMS))),
    "dequantised float32 subnormals flushed to zero": (
        "const float value = decoded * scale;\n    return value;",
        "const float value = decoded * scale;\n    return value < FLT_MIN && value > -FLT_MIN ? 0.0f * value : value;",
        _gemm("rowwise_tiny")),
    "an E8M0 NaN scale decoded as 2**128, Inf in float32 (the all-ones NaN taken for E4M3's only)": (
        "|| (f->nan_style == NAN_ALL_ONES && magnitude ==",
        "|| (f->nan_style == NAN_ALL_ONES && f->is_signed && magnitude ==",
        lambda entry: (entry["kind"] == "decode" and entry["format"] == "E8M0") or _gemm("mx_nan")(entry)),
    # the decode entries
    "exponent field 0 read as subnormal in a format without subnormals (E8M0's 0x00 as 0)": (
        "significand = field == 0 && f->has_subnormals ? mantissa", "significand = field == 0 ? mantissa",
        lambda entry: entry["kind"] == "decode" and entry["format"] == "E8M0"),
    "E5M2's Inf decoded as a number (has_infinity ignored)": (
        "if (f->has_infinity && magnitude == all_ones_exponent(f)) {", "if (0) {",
        lambda entry: (entry["kind"] == "decode" and entry["format"] == "E5M2")),
}


@pytest.mark.parametrize("mutant", list(CONSUMER_MUTANTS))
def test_each_rule_of_the_notes_fails_a_consumer_that_breaks_it(consumer, golden_files, tmp_path, mutant):
    """The files pin each of these rules: the consumer with the rule broken fails exactly the entries
    built for it, and passes the others."""
    folder, manifest = golden_files
    original, broken, failing = CONSUMER_MUTANTS[mutant]
    source = SOURCE.read_text()
    assert source.count(original) == 1, f"golden_consumer.c changed: update CONSUMER_MUTANTS[{mutant!r}]"
    mutated = tmp_path / "mutant.c"
    mutated.write_text(source.replace(original, broken))
    build = subprocess.run([COMPILER, "-std=c99", "-O1", str(mutated), "-o", str(tmp_path / "mutant")],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    result = run_consumer(tmp_path / "mutant", folder, manifest["entries"])
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr
    failed = [line.startswith("FAIL") for line in result.stdout.splitlines() if line.startswith(("ok ", "FAIL "))]
    assert failed == [failing(entry) for entry in manifest["entries"]]


def test_consumer_in_c_ignores_the_codes_of_a_nan_scale_block(consumer, golden_files, tmp_path):
    """The codes of a block whose expected scale is 0xFF (ignore_codes_where_scale) are don't-care:
    changing one is no mismatch."""
    folder, manifest = golden_files
    entry = next(entry for entry in manifest["entries"] if entry["kind"] == "mx")
    copy = Path(shutil.copytree(folder, tmp_path / "dont_care"))
    arrays = load_arrays(copy, entry)
    row, block = _block_of(arrays, entry, lambda scales: scales == 0xFF)
    arrays[entry["arrays"]["expected_codes"]][row, block * entry["block_size"]] ^= 1
    np.savez(copy / entry["file"], **arrays)
    result = run_consumer(consumer, copy, [entry])
    assert result.returncode == 0, result.stdout + result.stderr


def _truncate(path: Path, arrays: dict) -> None:
    path.write_bytes(path.read_bytes()[:-1])


def _flip_a_data_byte(path: Path, arrays: dict) -> None:
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("x.npy")
    data = bytearray(path.read_bytes())
    # x.npy's last byte: past the local header (30 bytes, then the name and the extra field, whose
    # lengths the local header holds at bytes 26 and 28: they may differ from the central directory's)
    local = info.header_offset
    name_length, extra_length = (int.from_bytes(data[local + at:local + at + 2], "little") for at in (26, 28))
    data[local + 30 + name_length + extra_length + info.compress_size - 1] ^= 0x40
    path.write_bytes(bytes(data))


def _deflate(path: Path, arrays: dict) -> None:
    np.savez_compressed(path, **arrays)


def _as_float64(path: Path, arrays: dict) -> None:
    with np.errstate(invalid="ignore"):  # (a signalling NaN input is quieted as it widens)
        np.savez(path, **{**arrays, "x": arrays["x"].astype(np.float64)})


def _emptied(path: Path, arrays: dict) -> None:
    """Every array cut to no element (a review's find: such an entry printed "ok ...: 0 inputs")."""
    np.savez(path, **{name: array[:0] for name, array in arrays.items()})


@pytest.mark.parametrize("damage, message", [
    (_emptied, "the entry holds no value to check"),
    (_truncate, "not a zip archive"),
    (_flip_a_data_byte, "fails its CRC-32 check"),
    (_deflate, "is compressed (method 8); this reader reads stored members only"),
    (_as_float64, "array x: expected descr '<f4', got header {'descr': '<f8'"),
])
def test_consumer_in_c_rejects_a_malformed_file(consumer, golden_files, tmp_path, damage, message):
    folder, manifest = golden_files
    entry = next(entry for entry in manifest["entries"] if entry["kind"] == "codec" and entry["format"] == "E5M2"
                 and entry["input_dtype"] == "float32")
    copy = Path(shutil.copytree(folder, tmp_path / "malformed"))
    damage(copy / entry["file"], load_arrays(copy, entry))
    result = run_consumer(consumer, copy, [entry])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"golden_consumer: error: {entry['file']}: ")
    assert message in result.stderr


@pytest.mark.parametrize("arguments, message", [
    (["codec", "f.npz", "x", "c", "E4M3", "1", "roundng=toward_zero"], "unknown option"),
    (["codec", "f.npz", "x", "c", "E4M3", "1", "rounding=stochastic"], "needs random_bits=ARRAY"),
    (["codec", "f.npz", "x", "c", "E4M3", "2"], "SATURATE must be 0 or 1, got 2"),
    (["codec", "f.npz", "x", "c", "E3M3", "1"], "FORMAT must be E4M3, E5M2, E4M3FNUZ"),
    (["mx", "f.npz", "x", "s", "c", "E4M3", "32", "scale_mode=round"], "scale_mode must be floor, ceil"),
    (["nvfp4", "f.npz", "x", "s", "c", "a", "e", "1"], "expected an entry"),
    (["gemm", "f.npz", "a", "E4M3", "sa", "b", "E4M3", "sb", "r", "m", "e", "t", "u", "a_scale_codes=ca"],
     "a_scale_codes, b_scale_codes and scale_format together"),
    (["gemm", "f.npz", "a", "E8M0", "sa", "b", "E4M3", "sb", "r", "m", "e", "t", "u"],
     "a gemm operand's FORMAT must be"),
    # (a review's finds: trailing characters were read as the number before them, and a repeated option
    # silently took its first value)
    (["mx", "f.npz", "x", "s", "c", "E4M3", "32abc"], "BLOCK_SIZE must be a whole number, got 32abc"),
    (["mx", "f.npz", "x", "s", "c", "E4M3", "-32"], "BLOCK_SIZE must be a whole number, got -32"),
    (["mx", "f.npz", "x", "s", "c", "E4M3", "99999999999999999999"],
     "BLOCK_SIZE must be a whole number, got 99999999999999999999"),  # (strtol's overflow, ERANGE)
    (["mx", "f.npz", "x", "s", "c", "E4M3", "9223372036854775807"], "BLOCK_SIZE must be a positive integer up to"),
    (["codec", "f.npz", "x", "c", "E4M3", "1", "rounding=stochastic", "random_bits=r", "random_bit_count=8junk"],
     "random_bit_count must be a whole number, got 8junk"),
    (["codec", "f.npz", "x", "c", "E4M3", "1", "rounding=toward_zero", "rounding=nearest_even"],
     "an option given twice, got rounding=nearest_even"),
])
def test_consumer_in_c_rejects_bad_usage(consumer, tmp_path, arguments, message):
    result = subprocess.run([str(consumer), str(tmp_path), *arguments], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_golden_notes_state_the_rules_the_consumer_takes_from_them(golden_files):
    """The consumer's rules that no specification gives come from the notes: the FNUZ formats, the
    sign of zero results, the sign bit's place in FP6/FP4 codes, NVFP4's two casts and its 1 / 0."""
    notes = golden_files[1]["notes"]
    for stated in ("bias 8 and 16", "NaN 0x80 only", "max 240 and 57344", "keeps the input's sign",
                   "FNUZ, where it is 0x00", "unbounded above"):
        assert stated in notes["codec"], stated
    assert "0x20 for FP6, 0x08 for FP4" in notes["arrays"]
    assert "the entry's rounding and saturate=true" in notes["mx"]
    for stated in ("block_amax = max |x| over the block's 16", "1 / 0 is Inf, so FLT_MAX",
                   "E4M3 (saturate=true) and E2M1 codes, rounding to nearest even", "-0.0 gives 0x08"):
        assert stated in notes["nvfp4"], stated


def test_golden_files_are_stored_not_deflated(golden_files):
    """The consumer reads stored zip members only: say so here if golden.write ever compresses."""
    folder, manifest = golden_files
    for name in sorted({entry["file"] for entry in manifest["entries"]}):
        with zipfile.ZipFile(folder / name) as archive:
            assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}, name
