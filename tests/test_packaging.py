"""What ``pip install minifp8`` gives: the declared packages and data, NumPy as the only runtime
dependency, and dependency floors that were checked by installing them.

- Every folder of ``minifp8/`` is a declared package and every data file in it matches the
  declared package data, so a wheel holds what a source checkout has (`results/*.json` is read
  by ``bench.load_speed_results`` and ``train_tiny.load_results``).
- Importing every module loads nothing outside the standard library but NumPy.
- Modules import one way, in DESIGN.md section 1's order (a module never imports one below it).
- The floors in ``pyproject.toml`` are no lower than the lowest versions that work (see there).
- pyproject's ``filterwarnings`` makes a warning raised in our own code an error, and not one raised in
  another library's.
- An sdist holds every file at the checkout's root that the tests (which it ships) read.
- ``-m slow``: a wheel built from the sources holds every module and data file, and runs from a
  folder outside the checkout (needs PyPI for the build backend, unless setuptools >= 77 is here).
"""
from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minifp8"

# The lowest versions that were installed and shown to work beside NumPy 2 on Python 3.11, and why
# the one below each fails (pyproject.toml's comments say the same).
VERIFIED_FLOORS = {
    "numpy": (2, 0),           # NEP 50 scalar promotion (NumPy 2.0)
    "matplotlib": (3, 8, 4),   # 3.7.0-3.8.3 wheels are built for NumPy 1.x and fail to import
    "ml_dtypes": (0, 5, 1),    # 0.5.0 rounds E8M0 ties (1.5 * 2**e) to an even code, not up
    "mkdocs": (1, 6),          # mkdocs.yml sets validation.links.anchors, new in 1.6
    "mypy": (2, 0),            # 1.20 reports a false attr-defined after a hasattr test in plots.py
}


def pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10: tomli, which pytest itself needs there
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)


def package_files() -> list[Path]:
    """The files under minifp8/ that belong to the package (no byte code)."""
    return sorted(path for path in PACKAGE.rglob("*")
                  if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc")


def lower_bounds(requirement: str) -> tuple[str, list[tuple[int, ...]]]:
    """The distribution name and the ``>=`` versions of one PEP 508 requirement string."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0)
    floors = re.findall(r">=\s*([0-9]+(?:\.[0-9]+)*)", requirement)
    return name.lower().replace("-", "_"), [tuple(int(part) for part in floor.split(".")) for floor in floors]


def test_every_folder_of_the_package_is_declared_and_every_data_file_is_package_data():
    setuptools = pyproject()["tool"]["setuptools"]
    declared = set(setuptools["packages"])
    folders = {".".join(path.parent.relative_to(ROOT).parts) for path in package_files()}
    assert folders == declared, f"folders of minifp8/ {sorted(folders)}, [tool.setuptools] packages {sorted(declared)}"
    patterns = setuptools.get("package-data", {})
    for path in package_files():
        package = ".".join(path.parent.relative_to(ROOT).parts)
        globs = [*patterns.get(package, []), *patterns.get("*", [])]
        assert path.suffix == ".py" or any(fnmatch.fnmatch(path.name, glob) for glob in globs), (
            f"{path.relative_to(ROOT)} is not package data of {package} ({globs}): a wheel would leave it out")
    assert any(path.match("minifp8/results/*.json") for path in package_files())


def test_every_module_imports_with_numpy_as_its_only_dependency():
    code = (
        "import importlib, pkgutil, sys\n"
        "before = set(sys.modules)\n"
        "import minifp8\n"
        "names = [m.name for m in pkgutil.iter_modules(minifp8.__path__, 'minifp8.') if not m.ispkg]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "loaded = {name.partition('.')[0] for name in set(sys.modules) - before}\n"
        "print(len(names))\n"
        "print(' '.join(sorted(loaded - set(sys.stdlib_module_names) - {'numpy', 'minifp8'})))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    count, others = result.stdout.splitlines()
    assert int(count) == sum(1 for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert others == "", f"importing minifp8's modules loaded more than NumPy: {others}"


def test_dependency_floors_are_no_lower_than_the_verified_ones():
    project = pyproject()["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    seen = set()
    for requirement in requirements:
        name, floors = lower_bounds(requirement)
        if name in VERIFIED_FLOORS:
            seen.add(name)
            assert floors and max(floors) >= VERIFIED_FLOORS[name], (
                f"{requirement!r}: below {'.'.join(map(str, VERIFIED_FLOORS[name]))} it does not work")
    assert seen == set(VERIFIED_FLOORS)


@pytest.mark.slow
def test_a_built_wheel_holds_the_package_and_runs_outside_the_checkout(tmp_path):
    source = tmp_path / "source"  # a copy, so that the build leaves no build/ or egg-info in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    for path in package_files():
        target = source / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    try:
        import setuptools
        backend_here = int(setuptools.__version__.split(".")[0]) >= 77  # pyproject's build-system floor
    except ImportError:
        backend_here = False
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q", "-w", str(tmp_path / "dist"),
               *(["--no-build-isolation"] if backend_here else []), str(source)]
    build = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("minifp8-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        archive.extractall(tmp_path / "site")
    expected = {"/".join(path.relative_to(ROOT).parts) for path in package_files()}
    package_names = {name for name in names if ".dist-info/" not in name}
    assert package_names == expected, (sorted(expected - package_names), sorted(package_names - expected))
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "License-Expression: MIT" in metadata and "Requires-Dist: numpy>=2.0" in metadata
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "import minifp8; assert minifp8.__file__.startswith(sys.argv[1]), minifp8.__file__\n"
            "from minifp8 import bench, golden, train_tiny\n"
            "assert bench.load_speed_results()['steps'] > 0\n"
            "assert train_tiny.load_results()['runs'] and train_tiny.load_results(train_tiny.FP8LM_RESULTS)['runs']\n"
            "sys.argv = ['golden', '--out', 'golden']\n"
            "import runpy; runpy.run_module('minifp8.golden', run_name='__main__')\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "site")], capture_output=True, text=True,
                            cwd=elsewhere)
    assert (elsewhere / "golden" / "manifest.json").is_file(), result.stderr


# DESIGN.md section 1: "Lower rows may import higher rows, never the reverse". Its table's order, with
# the modules it does not list put where their imports place them (_cli: what every command does alike,
# importing nothing; fastcast: the casts fp8.py places; explain: a narrative of codec.encode_scalar;
# fp8lm: FP8-LM's gradients and optimizer; gemm: the scaled-GEMM oracle, beside testing).
LAYERS = ["_cli", "formats", "codec", "explain", "mx", "scaling", "fastcast", "autograd", "functional", "unit", "fp8",
          "nn", "uu", "model", "optim", "fp8lm", "data", "train_tiny", "testing", "gemm", "golden", "bench", "plots"]
# The exceptions, each imported inside a function (so importing the module does not load it):
UPWARD_IMPORTS = {("train_tiny", "plots")}  # DESIGN: plots is "used by the docs and the CLI" (--out's figure)


def minifp8_imports(path: Path) -> dict[str, bool]:
    """The minifp8 modules a source file imports, each with whether some import of it is at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module.split(".")[0]] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "minifp8":  # from minifp8 import fp8lm
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minifp8."):
            names = [node.module.split(".")[1]]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".")[1] for alias in node.names if alias.name.startswith("minifp8.")]
        for name in names:
            found[name] = found.get(name, False) or id(node) in top_level
    return found


def test_modules_import_one_way_in_the_order_of_design_section_1():
    modules = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem not in ("__init__", "__main__"))
    assert sorted(LAYERS) == modules, "a module was added or removed: place it in LAYERS"
    for module in LAYERS:
        for imported, at_top_level in minifp8_imports(PACKAGE / f"{module}.py").items():
            if imported not in LAYERS:
                continue  # (the package itself: __version__)
            if (module, imported) in UPWARD_IMPORTS:
                assert not at_top_level, f"{module} imports {imported} at module level"
            else:
                assert LAYERS.index(imported) < LAYERS.index(module), (
                    f"minifp8.{module} imports minifp8.{imported}, a module below it in DESIGN.md's layout")


@pytest.mark.parametrize("module", ["minifp8.codec", __name__, "conftest", "tutorial_01_formats"])
def test_a_warning_in_our_own_code_fails_its_test(module):
    """pyproject's filterwarnings: NumPy's C-level warnings are attributed to the Python module that
    called NumPy, so an overflow in the package, a test or a tutorial block raises. (This module's
    own name, as pytest imported it, stands for the tests: under another import mode it would be
    ``tests.test_packaging``, which the filter does not match, and this would fail.)"""
    code = compile("np.array([1e300]).astype(np.float32)", f"{module}.py", "exec")
    with pytest.raises(RuntimeWarning, match="overflow"):
        exec(code, {"__name__": module, "np": np})


def test_a_warning_in_third_party_code_keeps_pythons_default():
    import warnings

    code = compile("np.array([1e300]).astype(np.float32)", "somelibrary.py", "exec")
    with warnings.catch_warnings(record=True) as caught:
        exec(code, {"__name__": "somelibrary", "np": np})
    assert [type(warning.message) for warning in caught] == [RuntimeWarning]


def test_the_package_version_is_the_one_pyproject_declares():
    """``minifp8.__version__`` goes into every golden manifest, whose files are byte-identical for one
    version: it must be the version that pip records."""
    import minifp8

    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    assert declared is not None and minifp8.__version__ == declared.group(1)


def test_the_changelog_says_what_changed_in_this_version():
    """Backends pin the oracle's version (the golden files are byte-identical within one), so
    CHANGELOG.md's first version must be the version that pip installs, with an entry that lists
    what changed, and the README's list of versions must start with it too."""
    import minifp8

    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    entries = re.split(r"^## ", changelog, flags=re.M)[1:]  # ("Unreleased ..." first, where there is one)
    versions = [(match.group(1), entry) for entry in entries if (match := re.match(r"(\d+\.\d+\.\d+)\b", entry))]
    assert versions and versions[0][0] == minifp8.__version__, [version for version, _ in versions]
    listed = re.findall(r"^- \S", versions[0][1], re.M)
    assert listed, f"CHANGELOG.md's {minifp8.__version__} entry lists no change"

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Versions", 1)[1].split("\n#", 1)[0]
    assert "](CHANGELOG.md)" in section
    summarised = re.findall(r"^- \*\*(\d+\.\d+\.\d+)\*\*", section, re.M)
    assert summarised and summarised[0] == minifp8.__version__, summarised


def test_an_sdist_holds_every_root_file_the_shipped_tests_read():
    """MANIFEST.in grafts tests/, so an unpacked sdist runs them: a file at the checkout's root that a
    test reads (CHANGELOG.md, mkdocs.yml) must be in the sdist too, by an ``include`` line or as one
    setuptools adds itself (pyproject.toml, MANIFEST.in, the readme, the license files). Without
    ``include CHANGELOG.md`` the changelog's tests raised FileNotFoundError there. No build: the
    file is read."""
    project = pyproject()["project"]
    readme = project.get("readme")
    added = {"pyproject.toml", "MANIFEST.in", *project.get("license-files", []),
             *([readme.get("file")] if isinstance(readme, dict) else [readme] if readme else [])}
    included = {name for line in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
                if line.split()[:1] == ["include"] for name in line.split()[1:]}
    read = {name for path in (ROOT / "tests").glob("*.py")
            for name in re.findall(r'ROOT\s*/\s*"([^"/]+)"', path.read_text(encoding="utf-8"))
            if (ROOT / name).is_file()}
    assert "CHANGELOG.md" in read, sorted(read)  # (the finder still sees what it was written for)
    missing = sorted(read - included - added)
    assert not missing, f"tests read {missing}, which MANIFEST.in does not include: an sdist lacks them"


def test_every_module_is_an_attribute_of_the_package_imported_on_first_use():
    """A fresh-user review's find: README names `minifp8.gemm.compare_matmul`, `minifp8.testing...`, but
    after `import minifp8` only `formats` was an attribute (AttributeError). Each module is now one,
    imported on first use (PEP 562), so that `import minifp8` alone still loads no training code."""
    import minifp8

    public = {path.stem for path in PACKAGE.glob("*.py") if not path.stem.startswith("_")}
    assert minifp8._MODULES == public - {"formats"}, "a module was added or removed: list it"
    code = ("import sys, minifp8; before = set(sys.modules); "
            "assert 'minifp8.train_tiny' not in before and 'minifp8.gemm' not in before, sorted(before); "
            "assert minifp8.gemm.compare_matmul and minifp8.testing.compare and minifp8.mx.quantize; "
            "assert 'gemm' in dir(minifp8); print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout == "ok\n", result.stderr
    with pytest.raises(AttributeError, match="module 'minifp8' has no attribute 'gemmm'"):
        minifp8.gemmm  # noqa: B018
