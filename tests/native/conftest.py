"""The integration suite's fixtures and requirement marker (a real detd on
a temporary unix socket; see tests/integration/conftest.py), for the
native API's tests."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "detd_integration_conftest", Path(__file__).resolve().parents[1] / "integration" / "conftest.py")
_it = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_it)

BUILD = _it.BUILD
CI = _it.CI
Daemon = _it.Daemon
counter = _it.counter
requires = _it.requires
tmpdir_short = _it.tmpdir_short
pytest_configure = _it.pytest_configure
pytest_runtest_setup = _it.pytest_runtest_setup
