"""Fixtures of the fault-injection tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.ferretdb import ferretdb_binary


@pytest.fixture(scope="session")
def ferretdb_bin() -> Path:
    """The FerretDB binary, built with Go on the first run of a fresh machine."""
    return ferretdb_binary()
