"""A pytest plugin for CI (``-p without_ml_dtypes``): ``import ml_dtypes`` raises ImportError, as where it
is not installed, so that the tests that cross-check against it skip and every other test must pass."""
import sys

sys.modules["ml_dtypes"] = None  # (a None entry makes the import raise ImportError)
