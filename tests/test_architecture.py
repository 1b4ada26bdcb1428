"""The layering docs/architecture.md describes, checked on the source: the engine imports none of its implementers."""

from __future__ import annotations

import pytest

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPLEMENTERS = ("dialogsim.agents", "dialogsim.users", "dialogsim.scenarios")
COMPOSITION_ROOT = ROOT / "engine" / "plugins.py"  # names the built-ins by path, as strings, and imports nothing


def _module(path: Path, root: Path) -> list[str]:
    parts = ["dialogsim", *path.relative_to(root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (inside functions too), relative imports resolved."""
    package = _module(path, root) if path.name == "__init__.py" else _module(path, root)[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _engine_files() -> list[Path]:
    return sorted((ROOT / "engine").rglob("*.py"))


def test_the_engine_imports_none_of_its_implementers():
    """No module under engine/ imports dialogsim.agents, .users or .scenarios, not even inside a function."""
    offending = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in _engine_files()
                 for line, name in _imports(path) if name.startswith(IMPLEMENTERS)]
    assert offending == []


def test_only_the_composition_root_names_implementers():
    """Implementers' module paths appear as strings only in engine/plugins.py (no importlib side doors)."""
    offending = []
    for path in _engine_files():
        if path == COMPOSITION_ROOT:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith(IMPLEMENTERS):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert offending == []
    assert not [name for _, name in _imports(COMPOSITION_ROOT) if name.startswith("dialogsim")]


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The import reader resolves a relative import inside a function (so the tests above can fail)."""
    probe = tmp_path / "engine" / "commands" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from ...scenarios.sgd import corpus\n")
    assert _imports(probe, tmp_path) == [(2, "dialogsim.scenarios.sgd.corpus")]


@pytest.mark.slow
def test_a_run_without_live_agents_never_imports_aiohttp(tmp_path):
    """Plug-ins are imported when used: --help and an in-process run leave aiohttp unimported."""
    code = ("import sys\nfrom dialogsim.engine.cli import main\n"
            f"main(['run', '--scenarios', 'builtin', '--episodes', '1', '--no-progress', '--out', {str(tmp_path / 'r')!r}])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiohttp'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
