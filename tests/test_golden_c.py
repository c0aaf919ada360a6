"""The golden files serve a consumer in another language: C.

``tests/golden_consumer.c`` (C99, standard library only) reads the ``.npz`` files with its own zip
and ``.npy`` reader and checks their expected codes against its own FP8 encoder, written from the
OCP OFP8 rev 1.0 and OCP MX v1.0 specifications. These tests compile it, run it on files that
``minifp8.golden`` writes, and show that it fails on a damaged expected code or a malformed file.
"""
from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from minifp8 import golden

SOURCE = Path(__file__).with_name("golden_consumer.c")
COMPILER = next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)
FORMATS = ("E4M3", "E5M2")


@pytest.fixture(scope="module")
def consumer(tmp_path_factory) -> Path:
    """The compiled consumer (C99, warnings on; not errors, so that a newer compiler's new warnings do
    not fail the suite: the file builds without any under gcc -Wall -Wextra -Wpedantic)."""
    if COMPILER is None:
        pytest.skip("no C compiler on PATH (looked for cc, gcc, clang): cannot build tests/golden_consumer.c")
    executable = tmp_path_factory.mktemp("consumer") / "golden_consumer"
    build = subprocess.run([COMPILER, "-std=c99", "-O2", "-Wall", "-Wextra", str(SOURCE),
                            "-o", str(executable)], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"{COMPILER} failed:\n{build.stderr}"
    return executable


@pytest.fixture(scope="module")
def golden_files(tmp_path_factory) -> tuple[Path, dict]:
    """The golden files of E4M3 and E5M2 (and the block files), and their manifest."""
    folder = tmp_path_factory.mktemp("golden")
    return folder, golden.write(folder, list(FORMATS))


def checked_entries(manifest: dict) -> list[dict]:
    """The manifest's entries the consumer checks: codec entries of E4M3 and E5M2 with float32
    input and rounding to nearest even, and MX entries of those element formats, scale mode floor."""
    codec = [entry for entry in manifest["entries"] if entry["kind"] == "codec" and entry["format"] in FORMATS
             and entry["input_dtype"] == "float32" and entry["rounding"] == "nearest_even"]
    block = [entry for entry in manifest["entries"] if entry["kind"] == "mx"
             and entry["element_format"] in FORMATS and entry["scale_mode"] == "floor"]
    # both formats, both saturate settings (not a selection that happens to be empty)
    combinations = {(name, saturate) for name in FORMATS for saturate in (False, True)}
    assert {(entry["format"], entry["saturate"]) for entry in codec} == combinations
    assert sorted(entry["element_format"] for entry in block) == sorted(FORMATS)
    return codec + block


def consumer_arguments(entry: dict) -> list[str]:
    """One entry of the consumer's command line (see the usage in golden_consumer.c)."""
    roles = entry["arrays"]
    if entry["kind"] == "codec":
        return ["codec", entry["file"], roles["input"], roles["expected_codes"], entry["format"],
                str(int(entry["saturate"]))]
    assert entry["ignore_codes_where_scale"] == 0xFF and entry["axis"] == -1  # what the consumer assumes
    return ["mx", entry["file"], roles["input"], roles["expected_scales"], roles["expected_codes"],
            entry["element_format"], str(entry["block_size"])]


def run_consumer(consumer: Path, folder: Path, entries: list[dict]) -> subprocess.CompletedProcess:
    command = [str(consumer), str(folder)] + [arg for entry in entries for arg in consumer_arguments(entry)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def input_count(entry: dict) -> int:
    return int(np.prod(entry["shapes"][entry["arrays"]["input"]]))


def test_consumer_in_c_agrees_with_every_code(consumer, golden_files):
    folder, manifest = golden_files
    entries = checked_entries(manifest)
    result = run_consumer(consumer, folder, entries)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for entry, line in zip(entries, lines):
        roles = entry["arrays"]
        if entry["kind"] == "codec":
            assert line == (f"ok codec {entry['format']} saturate={int(entry['saturate'])} {entry['file']}:"
                            f"{roles['expected_codes']}: {input_count(entry)} inputs, 0 mismatches")
        else:
            blocks = int(np.prod(entry["shapes"][roles["expected_scales"]]))
            assert line == (f"ok mx {entry['element_format']} block_size={entry['block_size']} {entry['file']}:"
                            f"{roles['expected_scales']},{roles['expected_codes']}: {blocks} blocks, "
                            f"{input_count(entry)} elements, 0 mismatches")
    total = sum(map(input_count, entries))
    assert lines[len(entries):] == [f"summary: {len(entries)} entries, {total} values checked, 0 mismatches"]


def test_consumer_in_c_names_a_damaged_code(consumer, golden_files, tmp_path):
    folder, manifest = golden_files
    entries = checked_entries(manifest)
    damaged_entry = next(entry for entry in entries if entry["kind"] == "codec" and entry["format"] == "E4M3"
                         and entry["saturate"])
    name, codes_name = damaged_entry["file"], damaged_entry["arrays"]["expected_codes"]
    copy = Path(shutil.copytree(folder, tmp_path / "damaged"))
    with np.load(copy / name) as archive:
        arrays = {key: archive[key] for key in archive.files}
    index = arrays[codes_name].size // 2
    original = int(arrays[codes_name][index])
    arrays[codes_name][index] ^= 1  # the neighbouring code
    np.savez(copy / name, **arrays)  # numpy's own writer this time (zip64 local headers)
    result = run_consumer(consumer, copy, entries)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"  mismatch {name}:{codes_name}[{index}]: input 0x{arrays['x'][index:index + 1].view('<u4')[0]:08X}" \
           in result.stdout
    assert f"expected 0x{original ^ 1:02X}, this encoder gives 0x{original:02X}" in result.stdout
    assert f"FAIL codec E4M3 saturate=1 {name}:{codes_name}: {input_count(damaged_entry)} inputs, 1 mismatches" \
           in result.stdout
    passed = [line for line in result.stdout.splitlines() if line.startswith("ok ")]
    assert len(passed) == len(entries) - 1  # the others, the same file's nosat codes included
    assert result.stdout.endswith(" 1 mismatches\n")


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
    np.savez(path, **{**arrays, "x": arrays["x"].astype(np.float64)})


@pytest.mark.parametrize("damage, message", [
    (_truncate, "not a zip archive"),
    (_flip_a_data_byte, "fails its CRC-32 check"),
    (_deflate, "is compressed (method 8); this reader reads stored members only"),
    (_as_float64, "array x: expected descr '<f4', got header {'descr': '<f8'"),
])
def test_consumer_in_c_rejects_a_malformed_file(consumer, golden_files, tmp_path, damage, message):
    folder, manifest = golden_files
    entry = next(entry for entry in checked_entries(manifest) if entry["format"] == "E5M2")
    copy = Path(shutil.copytree(folder, tmp_path / "malformed"))
    with np.load(copy / entry["file"]) as archive:
        arrays = {key: archive[key] for key in archive.files}
    damage(copy / entry["file"], arrays)
    result = run_consumer(consumer, copy, [entry])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"golden_consumer: error: {entry['file']}: ")
    assert message in result.stderr


def test_golden_files_are_stored_not_deflated(golden_files):
    """The consumer reads stored zip members only: say so here if golden.write ever compresses."""
    folder, manifest = golden_files
    for name in sorted({entry["file"] for entry in checked_entries(manifest)}):
        with zipfile.ZipFile(folder / name) as archive:
            assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}, name
