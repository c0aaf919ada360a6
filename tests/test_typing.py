"""minifp8 as a typed dependency: backends import it into type-checked test suites (PEP 561).

- The package ships ``py.typed``, and it is declared package data, so a wheel carries it.
- Every public callable (each module's ``__all__``, or else its names without a leading underscore:
  its functions, and the public methods,
  properties, ``__init__`` and ``__call__`` of its classes) annotates every parameter and its
  return, and every annotation resolves (``typing.get_type_hints``): no ``Unknown`` reaches a
  caller, and a strict caller gets no "call to untyped function".
- Where mypy is installed (the ``test`` extra installs it): ``mypy`` passes on the package with the
  settings in ``pyproject.toml``, and a consumer written the way a backend's tests use the oracle
  passes ``mypy --strict``, with ``assert_type`` pinning what the main entry points return.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import typing
from pathlib import Path

import pytest

import minifp8
from test_docstrings import public_names  # (__all__, or the public functions and classes defined there)

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(module.name for module in pkgutil.iter_modules(minifp8.__path__) if not module.name.startswith("_"))
CLASS_DUNDERS = ("__init__", "__call__")


def public_callables(module_name: str) -> list[tuple[str, typing.Callable]]:
    """``(qualified name, function)`` for the functions and public class members in ``__all__``."""
    module = importlib.import_module(f"minifp8.{module_name}")
    found = []
    for name in public_names(module):
        value = getattr(module, name)
        if getattr(value, "__module__", None) != module.__name__:
            continue  # re-exported from another module, checked there
        if inspect.isfunction(value):
            found.append((name, value))
        elif inspect.isclass(value):
            for member_name, member in vars(value).items():
                if member_name.startswith("_") and member_name not in CLASS_DUNDERS:
                    continue
                function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(function):
                    found.append((f"{name}.{member_name}", function))
    return found


def test_the_package_ships_py_typed_as_package_data():
    assert (ROOT / "minifp8" / "py.typed").is_file()
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as file:
        package_data = tomllib.load(file)["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["minifp8"]


def test_the_public_api_is_found():
    names = {f"{module}.{name}" for module in MODULES for name, _ in public_callables(module)}
    for expected in ("codec.encode", "codec.decode", "testing.compare", "mx.quantize", "gemm.compare_matmul",
                     "autograd.Tensor.backward", "formats.FloatFormat.values", "nn.Linear.forward"):
        assert expected in names
    assert len(names) > 250


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_callable_annotates_every_parameter_and_its_return(module_name):
    incomplete = []
    for name, function in public_callables(module_name):
        signature = inspect.signature(function)
        missing = [parameter for parameter, value in signature.parameters.items()
                   if parameter not in ("self", "cls") and value.annotation is inspect.Parameter.empty]
        if signature.return_annotation is inspect.Signature.empty and function.__name__ != "__init__":
            missing.append("return")
        if missing:
            incomplete.append(f"{name} ({', '.join(missing)})")
    assert not incomplete, f"minifp8.{module_name}: not annotated: " + "; ".join(incomplete)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_annotation_resolves(module_name):
    for name, function in public_callables(module_name):
        try:
            typing.get_type_hints(function)
        except Exception as error:  # a NameError for a name the module does not import, a typo, ...
            pytest.fail(f"minifp8.{module_name}.{name}: annotations do not resolve: {type(error).__name__}: {error}")


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.fixture(scope="module")
def mypy_run(mypy_cache):
    """``mypy.api.run`` with a cache shared by this module's checks (a cold run takes about 10 s)."""
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]' installs it)")
    cache = mypy_cache

    def run(*arguments: str) -> tuple[str, int]:
        limit = sys.getrecursionlimit()
        try:
            stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
                                              "--no-error-summary", "--hide-error-context", *arguments])
        finally:  # (mypy raises the limit to 2**14 for itself and leaves it there: later tests assume 1000)
            sys.setrecursionlimit(limit)
        return stdout + stderr, status
    return run


PLATFORMS = (None, "win32")  # (this one and Windows, whose typeshed differs most; macOS's: `slow` below)


def _start_mypy_on_the_package(platform: str | None, cache) -> "subprocess.Popen[str]":
    """mypy on minifp8/ as ``platform`` (None: this one) sees it, started in a subprocess."""
    import subprocess
    return subprocess.Popen(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
         "--no-error-summary", "--hide-error-context", *(["--platform", platform] if platform else []),
         str(ROOT / "minifp8")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def package_reports(mypy_cache, tmp_path_factory):
    """mypy on minifp8/ for each of `PLATFORMS`, ``{platform: (report, status)}``: both at once, in
    subprocesses, each with a cache of its own (this platform's is the one the other checks share),
    since a platform of its own misses the cache (one after another, this platform, Windows and
    macOS took 70 s on a slow 2-core machine, most of the test run's spare time; macOS, which
    differs least from Linux, now runs under ``-m slow``)."""
    pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]' installs it)")
    processes = {platform: _start_mypy_on_the_package(platform, mypy_cache if platform is None else
                                                      tmp_path_factory.mktemp(f"mypy-cache-{platform}"))
                 for platform in PLATFORMS}
    return {platform: (process.communicate(timeout=600)[0], process.returncode)
            for platform, process in processes.items()}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_package_passes_mypy(package_reports, platform):
    """Here, and as a Windows user's mypy sees it (typeshed has no ``os.sysconf`` on Windows:
    train_tiny used it unguarded)."""
    report, status = package_reports[platform]
    assert status == 0 and report.strip() == "", f"mypy on minifp8/ ({platform or 'this platform'}):\n{report}"


@pytest.mark.slow
def test_the_package_passes_mypy_as_macos_sees_it(tmp_path):
    pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]' installs it)")
    process = _start_mypy_on_the_package("darwin", tmp_path)
    report = process.communicate(timeout=600)[0]
    assert process.returncode == 0 and report.strip() == "", f"mypy on minifp8/ (darwin):\n{report}"


def test_a_backend_test_module_passes_mypy_strict_and_runs(mypy_run, tmp_path):
    consumer = ROOT / "tests" / "typed_consumer.py"
    report, status = mypy_run("--strict", "--follow-imports=silent", str(consumer))
    assert status == 0 and report.strip() == "", f"mypy --strict on {consumer.name}:\n{report}"
    spec = importlib.util.spec_from_file_location("typed_consumer", consumer)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)  # what type-checks also runs


# Each line from the 5th misuses the API and ends with the error mypy must give it (it can only
# where the types are declared); no other line may be flagged.
MISUSES = """\
import numpy as np
import minifp8
from minifp8 import gemm, mx, scaling, testing
x = np.zeros(4, np.float32)
minifp8.encode(x, 4)  # arg-type
minifp8.encode(x, "E4M3", saturate="yes")  # arg-type
minifp8.decode(x, fmt=None)  # arg-type
testing.compare(x, x, "E4M3").mismatches[0].kind + 1  # operator
testing.compare_mx(x, x, x, "MXFP8_E4M3").scale_mismatches[0].expected_code + "0"  # operator
scaling.quantize_current(x, power_of_2="no")  # arg-type
scaling.quantize_blockwise(x, block_shape=128)  # arg-type
mx.quantize(x, "MXFP8_E4M3", block_size="32")  # arg-type
gemm.compare_matmul(x, x, x, x, x, a_format="E4M3", b_format="E4M3").hints[0] + 1  # operator
gemm.compare_matmul(x, x, x, x, x, a_format="E4M3", b_format="E4M3").reference.value.nonexistent  # attr-defined
minifp8.formats.E4M3.max + "1"  # operator
"""


def test_mypy_flags_each_misuse_of_the_api(mypy_run, tmp_path):
    misuses = tmp_path / "misuses.py"
    misuses.write_text(MISUSES, encoding="utf-8")
    report, status = mypy_run("--follow-imports=silent", str(misuses))
    flagged = sorted({(int(line.split(":")[1]), line.rpartition("[")[2].rstrip("]"))
                      for line in report.splitlines() if ": error:" in line})
    expected = [(number, line.rpartition("# ")[2]) for number, line in enumerate(MISUSES.splitlines(), 1)
                if number >= 5]
    assert status == 1 and flagged == expected, f"expected errors {expected}, mypy said:\n{report}"


def test_mypy_sees_the_modules_as_attributes_of_a_bare_import(mypy_run, tmp_path):
    """The final review's find: `minifp8.gemm` after a bare `import minifp8` (PEP 562) was typed as a
    ModuleType, so every name below it was Any and no misuse was flagged."""
    code = ('import numpy as np\nimport minifp8\nx = np.zeros(4, np.float32)\n'
            'minifp8.gemm.compare_matmul(x, x, x, x, x, a_format="E4M3", b_format="E4M3").hints[0] + 1\n'
            'minifp8.mx.quantize(x, "MXFP8_E4M3", block_size="32")\nminifp8.gemm.compare_matmull\nminifp8.formatz\n')
    path = tmp_path / "bare_import.py"
    path.write_text(code, encoding="utf-8")
    report, status = mypy_run("--follow-imports=silent", str(path))
    flagged = sorted(int(line.split(":")[1]) for line in report.splitlines() if ": error:" in line)
    assert status == 1 and flagged == [4, 5, 6, 7], report
