"""Packaging: every package folder is in pyproject's list, and no top-level engine/agents gets installed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = {"engine": "dialogsim.engine", "agents": "dialogsim.agents", "users": "dialogsim.users",
         "scenarios": "dialogsim.scenarios", "rl": "dialogsim.rl"}


def test_every_package_folder_is_listed():
    """Each folder with an __init__.py under the parts is a listed package (or it would not install)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {"dialogsim"}
    for folder, name in PARTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert found == set(config["packages"])
    assert all(config["package-dir"][name] == folder for folder, name in PARTS.items())


def test_no_top_level_part_names_are_importable_as_packages():
    """The distribution maps the folders under dialogsim, never as top-level `engine` or `agents`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "dialogsim" or p.startswith("dialogsim.") for p in config["packages"])
