"""The README's two commands are the ones CI and users run."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    return [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("python3 -m venv")]


def test_ci_runs_the_readme_test_command():
    """.ci/run's last line is the README's test command, verbatim."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in _commands()


def test_readme_has_exactly_two_commands():
    """One command installs and runs the main job, one installs (editable) and runs the tests."""
    main, tests = _commands()
    assert "dialogsim run --out runs/demo" in main
    assert "pytest" in tests and "pip install -q -e " in tests


def test_the_tests_import_this_checkout():
    """dialogsim comes from this source tree (an editable install), so an edit is tested without reinstalling."""
    import dialogsim

    assert Path(dialogsim.__file__).resolve().parent == ROOT


def test_the_readme_agent_example_runs_as_printed():
    """The "Testing your own agent" block, executed exactly as the README prints it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Testing your own agent"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("\n```", section.index("```python"))]
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
