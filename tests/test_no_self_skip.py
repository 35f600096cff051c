"""A test never skips because the project's own code does not import: a broken first-party import is a
failure, not a skip. Flagged in every test file: `pytest.importorskip` of a first-party module (or of a name
that is not a literal), and a `try:` that imports a first-party module with an `except ImportError` (or
`ModuleNotFoundError`) handler. Optional third-party packages (bcc, playwright) keep their skip-or-fail helpers.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("aiops", "collectors", "guardrails", "evals", "playbooks", "bpf", "tests", "bench")
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _first_party(name: str) -> bool:
    return name.split(".")[0] in FIRST_PARTY


def _imported(node: ast.AST) -> list[str]:
    """Every module an import statement under `node` names (relative imports are first-party)."""
    out: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            out.extend(alias.name for alias in sub.names)
        elif isinstance(sub, ast.ImportFrom):
            out.append("tests" if sub.level else (sub.module or ""))
    return out


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True  # a bare except hides an ImportError too
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {
        t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in types
    }
    return bool(names & (IMPORT_ERRORS | {"Exception", "BaseException"}))


def self_skips(source: str, filename: str = "<test>") -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name == "importorskip":
                arg = node.args[0] if node.args else None
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                if not literal or _first_party(str(arg.value)):  # type: ignore[union-attr]
                    shown = ast.unparse(arg) if arg is not None else "()"
                    found.append(f"{filename}:{node.lineno}: importorskip({shown})")
        elif isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            own = sorted({m for stmt in node.body for m in _imported(stmt) if _first_party(m)})
            if own:
                found.append(f"{filename}:{node.lineno}: try/except ImportError around {', '.join(own)}")
    return found


def test_no_test_skips_on_an_import_error_of_the_project() -> None:
    found = [
        hit
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for hit in self_skips(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


def test_the_check_catches_what_it_claims_to() -> None:
    planted = (
        "import pytest\n"
        "sim = pytest.importorskip('aiops.sim')\n"
        "bcc = pytest.importorskip('bcc')\n"
        "def f(name):\n"
        "    return pytest.importorskip(name)\n"
        "try:\n"
        "    from guardrails.executor import Executor\n"
        "except ImportError:\n"
        "    pytest.skip('no executor')\n"
        "try:\n"
        "    import bcc\n"
        "except ImportError:\n"
        "    pass\n"
        "def g():\n"
        "    try:\n"
        "        from .simkit import scenario\n"
        "    except (ModuleNotFoundError, OSError):\n"
        "        return None\n"
    )
    assert sorted(self_skips(planted)) == [
        "<test>:15: try/except ImportError around tests",
        "<test>:2: importorskip('aiops.sim')",
        "<test>:5: importorskip(name)",
        "<test>:6: try/except ImportError around guardrails.executor",
    ]
