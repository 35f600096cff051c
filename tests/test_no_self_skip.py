"""A test never skips because the project's own code does not import: a broken first-party import is a
failure, not a skip. Flagged in every test file: `pytest.importorskip` of a first-party module (or of a name
that is not a literal); a `try:` that imports a first-party module with an `except ImportError` (or
`ModuleNotFoundError`) handler, by statement or by call (`importlib.import_module`, `__import__`, `find_spec`
of a first-party literal, or of a name known only at run time); and an expected failure on an import error
(`pytest.mark.xfail(raises=ImportError)`, `ModuleNotFoundError` or a tuple holding one, as a decorator, a
`pytest.param` mark or a call): an xfail that an import error satisfies hides a broken module as well as a
skip does. Optional third-party packages (bcc, playwright) keep their skip-or-fail helpers.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("aiops", "collectors", "guardrails", "evals", "playbooks", "bpf", "tests", "bench")
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}
DYNAMIC_IMPORTS = {"import_module", "__import__", "find_spec", "spec_from_loader"}


def _first_party(name: str) -> bool:
    return name.split(".")[0] in FIRST_PARTY


def _call_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _imported(node: ast.AST) -> list[str]:
    """Every module an import statement or a dynamic import under `node` names (relative imports are
    first-party; a dynamic import of a name known only at run time is `tests`: it may be the project's)."""
    out: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            out.extend(alias.name for alias in sub.names)
        elif isinstance(sub, ast.ImportFrom):
            out.append("tests" if sub.level else (sub.module or ""))
        elif isinstance(sub, ast.Call) and _call_name(sub.func) in DYNAMIC_IMPORTS:
            arg = sub.args[0] if sub.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            out.append(str(arg.value) if literal and not str(arg.value).startswith(".") else "tests")  # type: ignore[union-attr]
    return out


def _names(node: ast.expr) -> set[str]:
    """The exception names an expression holds (`ImportError`, `builtins.ImportError`, a tuple of them)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {_call_name(item) if not isinstance(item, ast.Name) else item.id for item in items}


def _xfails_on_import_error(node: ast.Call) -> bool:
    """`pytest.mark.xfail(..., raises=ImportError)` (or ModuleNotFoundError, in a tuple too)."""
    if _call_name(node.func) != "xfail":
        return False
    return any(k.arg == "raises" and _names(k.value) & IMPORT_ERRORS for k in node.keywords)


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
            name = _call_name(func)
            if _xfails_on_import_error(node):
                raises = next(ast.unparse(k.value) for k in node.keywords if k.arg == "raises")
                found.append(f"{filename}:{node.lineno}: xfail(raises={raises})")
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
        "import importlib\n"
        "try:\n"
        "    twin = importlib.import_module('aiops.sim.twin')\n"
        "except ImportError:\n"
        "    twin = None\n"
        "def h(name):\n"
        "    try:\n"
        "        return __import__(name)\n"
        "    except Exception:\n"
        "        pytest.skip(name)\n"
        "try:\n"
        "    importlib.import_module('playwright.sync_api')\n"
        "except ImportError:\n"
        "    pass\n"
        "@pytest.mark.xfail(raises=ImportError)\n"
        "def test_a():\n"
        "    import aiops.sim\n"
        "@pytest.mark.xfail(raises=(ValueError, builtins.ModuleNotFoundError), strict=False)\n"
        "def test_b():\n"
        "    pass\n"
        "@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.xfail(raises=ImportError))])\n"
        "def test_c(x):\n"
        "    pass\n"
        "@pytest.mark.xfail(raises=ValueError)\n"
        "def test_d():\n"
        "    pass\n"
    )
    assert sorted(self_skips(planted)) == sorted(
        [
            "<test>:15: try/except ImportError around tests",
            "<test>:2: importorskip('aiops.sim')",
            "<test>:20: try/except ImportError around aiops.sim.twin",
            "<test>:25: try/except ImportError around tests",
            "<test>:33: xfail(raises=ImportError)",
            "<test>:36: xfail(raises=(ValueError, builtins.ModuleNotFoundError))",
            "<test>:39: xfail(raises=ImportError)",
            "<test>:5: importorskip(name)",
            "<test>:6: try/except ImportError around guardrails.executor",
        ]
    )
