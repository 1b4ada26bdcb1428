"""Shared fixtures: where the repository and the optional ../shared data live."""

from __future__ import annotations

from pathlib import Path

import pytest

from dialogsim.scenarios.sgd.pack import Pack, load_pack

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture
def shared_sgd() -> Path:
    """The real SGD data in ../shared/sgd, or a skip when this checkout has none beside it."""
    path = SHARED / "sgd"
    if not (path / "dev").is_dir():
        pytest.skip(f"real SGD data not found at {path} (only present on the development machines)")
    return path


@pytest.fixture(scope="session")
def pack() -> Pack:
    """The bundled SGD scenario pack (package data: no ../shared needed), loaded once per test session."""
    return load_pack()
