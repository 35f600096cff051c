"""The first-party import graph, built from the source (every import statement, inside functions too, relative
imports resolved to their module; importlib.import_module, __import__ and importlib.util.spec_from_*/find_spec
of a literal name count as imports, and so do `sys.modules["aiops.x"]` (and `.get`, `.pop`, `.setdefault`) and a
module reached as an attribute of an imported package (`import aiops` then `aiops.sim.twin.Twin`, or
`getattr(aiops, "sim")`); a name known only at run time fails unless DYNAMIC_ALLOWED lists the module with why;
only `if TYPE_CHECKING:` blocks, which never run, are left out): no cycle between modules, no
import from a lower layer up to a higher one, and no import path from the analyst (detect, rca, playbooks,
pipeline, evidence) to the twin (aiops.sim). docs/ARCHITECTURE.md draws the same layers.

Layers, lowest first; a package may import its own layer's package and anything below, nothing above and no
other package of its own layer (except the base modules, and the order inside the pipeline layer below):

  0 base        aiops (the package), aiops.beneath, aiops.causal, aiops.columns (and .column_model, .columns_gpu), aiops.errors, .labels, .nvml_bits, .models,
                .outbound, .peer_heat, .safeload, .scenarios, .text, .workload
  1 store       aiops.store (workspace, migrations, ingest, readings)
  2 datapath    aiops.datapath (the only code that writes the kernel's datapath; imports aiops.errors alone)
  3 collectors  collectors (read-only telemetry sources), aiops.profile (eBPF uprobes on CUDA/NCCL: AI flame graphs)
  4 guardrails  guardrails (actions, validation, approvals, audit, executor, actuator backends)
  5 control     aiops.control (laws, allocator, thermal manager, DCIM rounds, the readings port)
  6 sim         aiops.sim (the twin: a world behind the same seams)
  7 pipeline    aiops.detect, aiops.rca, aiops.playbooks, aiops.plans, aiops.pipeline, aiops.memory (components'
                history and lemon score)
  8 runtime     aiops.runtime (a workspace put to work: its world, analysis with filing, approvals, DCIM),
                aiops.report, aiops.integrations (the notification sinks and the ticket sink: bodies, durable
                queue, the one transport over aiops.outbound)
  9 apps        aiops.agent, aiops.lab, aiops.service (the node service, its notifier), aiops.fleet, evals
 10 console     aiops.console (the web console: reads the pipeline's results, decides through the runtime,
                chats through the agent; `aiops run` mounts its app on the service's one listener),
                aiops.mcpserver (`aiops mcp`: the agent's read tools and propose over MCP, on the service's
                listener class)
 11 cli         aiops.cli
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("aiops", "collectors", "guardrails", "evals", "playbooks", "bpf")
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "aiops",
        "aiops.beneath",
        "aiops.causal",
        "aiops.column_model",
        "aiops.columns",
        "aiops.columns_gpu",
        "aiops.errors",
        "aiops.labels",
        "aiops.nvml_bits",
        "aiops.models",
        "aiops.outbound",
        "aiops.peer_heat",
        "aiops.safeload",
        "aiops.scenarios",
        "aiops.text",
        "aiops.workload",
    ),
    ("aiops.store",),
    ("aiops.datapath",),
    ("collectors", "aiops.profile", "aiops.sources"),
    ("guardrails", "playbooks", "bpf"),  # playbooks and bpf hold data only
    ("aiops.control",),
    ("aiops.sim",),
    (
        "aiops.detect",
        "aiops.rca",
        "aiops.playbooks",
        "aiops.plans",
        "aiops.pipeline",
        "aiops.evidence",
        "aiops.memory",
    ),
    ("aiops.runtime", "aiops.report", "aiops.integrations"),
    ("aiops.agent", "aiops.lab", "aiops.service", "aiops.fleet", "evals"),
    ("aiops.console", "aiops.mcpserver"),
    ("aiops.cli",),
)
# The analyst (detection, diagnosis, remediation, evidence) never sees the twin: no import path to it.
ANALYST = (
    "aiops.detect",
    "aiops.rca",
    "aiops.playbooks",
    "aiops.plans",
    "aiops.pipeline",
    "aiops.evidence",
    "aiops.memory",
)
TWIN = ("aiops.sim",)
# Within the pipeline layer the order is detect, rca -> playbooks -> plans -> pipeline (remediation is the
# pipeline's; a plan is the playbooks' ladder for one incident).
SAME_LAYER_ALLOWED = {
    ("aiops.playbooks", "aiops.rca"),
    ("aiops.pipeline", "aiops.detect"),
    ("aiops.pipeline", "aiops.rca"),
    ("aiops.pipeline", "aiops.playbooks"),
    ("aiops.pipeline", "aiops.plans"),
    ("aiops.plans", "aiops.playbooks"),
    (
        "aiops.plans",
        "aiops.detect",
    ),  # a step's verify window and check are the closed loop's (aiops.detect.effects)
    ("aiops.evidence", "aiops.playbooks"),  # a verdict's next steps are the playbooks' checks
    ("aiops.pipeline", "aiops.memory"),  # a remedy that did not hold on a lemon goes to RMA (aiops/memory)
    ("aiops.memory", "aiops.playbooks"),  # the lemon rule reorders a playbook's ladder (aiops/memory/rma.py)
    ("aiops.agent", "evals"),
    ("evals", "aiops.agent"),
    ("aiops.fleet", "aiops.service"),  # the fleet replays and serves what a node agent exports
    ("evals", "aiops.fleet"),  # `aiops eval --via prometheus` scores the fleet path
    ("aiops.integrations", "aiops.report"),  # a scheduled report's headline is one of the sinks' bodies
    ("aiops.runtime", "aiops.integrations"),  # open_ticket executes through the ticket sink
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    """The first-party module an imported name lives in (`aiops.store.Store` -> `aiops.store`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# First-party modules that import a module named at run time, and why that is safe. Every literal name passed
# to importlib.import_module, __import__ or importlib.util.spec_from_* is checked as an import edge.
DYNAMIC_ALLOWED = {
    "aiops.cli.main": "imports each name of COMMAND_MODULES, a tuple of literal aiops.cli.* modules "
    "(test_the_cli_commands_are_cli_modules)",
    "aiops.service.bare_package": "imports the third-party package and submodules its caller names (uvicorn's, "
    "from aiops/service/server.py), never an aiops module",
    "aiops.sim": "re-exports SimSummary, simulate, SIM_EPOCH_TS_S and World lazily (PEP 562 __getattr__) from its "
    "own runner and world modules, each imported by a literal name, so a submodule loads without the runner",
    "guardrails": "re-exports its names lazily (PEP 562 __getattr__) from _WHERE, a dict of literal guardrails.* "
    "modules, so the action model loads without the store (test_the_guardrails_names_load_from_their_modules)",
}
DYNAMIC_CALLS = {"import_module", "__import__", "spec_from_file_location", "spec_from_loader", "find_spec"}


def _relative(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name `from .x import y` (level dots) means inside `module`."""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
    return ".".join([*parts, *([node.module] if node.module else [])])


def _call_name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _dynamic(node: ast.Call, module: str, is_package: bool) -> str | None:
    """The module a dynamic import names (a literal), "" for a name known only at run time, None if the call
    is not a dynamic import."""
    if _call_name(node.func) not in DYNAMIC_CALLS:
        return None
    arg = node.args[0] if node.args else None
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return ""
    name = arg.value
    if name.startswith("."):  # import_module(".x", package="aiops.y")
        package = next((k.value for k in node.keywords if k.arg == "package"), None)
        if len(node.args) > 1:
            package = node.args[1]
        if not (isinstance(package, ast.Constant) and isinstance(package.value, str)):
            return ""
        level = len(name) - len(name.lstrip("."))
        base = package.value.split(".")
        return ".".join([*base[: len(base) - (level - 1)], name.lstrip(".")]).rstrip(".")
    if _call_name(node.func).startswith("spec_from"):
        return name if name.split(".")[0] in PACKAGES else None  # a file path is not a module name
    return name


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for an attribute chain ending in a name, else ""."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _bound(tree: ast.AST, module: str, is_package: bool) -> dict[str, str]:
    """The names `tree` binds to first-party modules by import (`import aiops.store` binds `aiops`, `import
    aiops.sim as s` binds `s`, `from aiops import detect` binds `detect`; `import sys` binds `sys`), outside
    `if TYPE_CHECKING:`: an attribute of such a name may be another module (`aiops.sim`)."""
    bound: dict[str, str] = {}
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name if alias.asname else alias.name.split(".")[0]
                if name.split(".")[0] in PACKAGES or name == "sys":
                    bound[alias.asname or name] = name
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            base = _relative(node, module, is_package) if node.level else str(node.module)
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        todo.extend(ast.iter_child_nodes(node))
    return bound


SYS_MODULES_CALLS = {"get", "pop", "setdefault", "__getitem__"}


def _reached(node: ast.AST, bound: dict[str, str]) -> str | None:
    """The module `node` reaches without an import statement: `sys.modules["x"]` (or its .get/.pop/.setdefault)
    -> x, `pkg.sub.name` or `getattr(pkg, "sub")` on a bound package -> pkg.sub; "" when the name is known only
    at run time (`sys.modules[name]`); None for anything else."""
    key: ast.expr | None = None
    if isinstance(node, ast.Subscript) and _dotted(node.value) == "sys.modules" and bound.get("sys") == "sys":
        key = node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SYS_MODULES_CALLS
        and _dotted(node.func.value) == "sys.modules"
        and bound.get("sys") == "sys"
    ):
        key = node.args[0] if node.args else None
    elif isinstance(node, ast.Attribute):
        chain = _dotted(node)
        root, _, rest = chain.partition(".")
        if root in bound and rest:
            return f"{bound[root]}.{rest}"
        return None
    elif (
        isinstance(node, ast.Call)
        and _call_name(node.func) == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id in bound
    ):
        name = node.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return f"{bound[node.args[0].id]}.{name.value}"
        return ""  # getattr(aiops, name): any module of the package
    else:
        return None
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return ""


def _imports(
    tree: ast.AST,
    module: str = "",
    is_package: bool = False,
    unresolved: list[str] | None = None,
    bound: dict[str, str] | None = None,
) -> list[str]:
    """Every module `tree` (the source of `module`) imports; names dynamic imports cannot resolve are appended
    to `unresolved` as `line N: call`."""
    if bound is None:
        bound = _bound(tree, module, is_package)
    out: list[str] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            out.extend(
                name
                for child in node.orelse
                for name in _imports(child, module, is_package, unresolved, bound)
            )
            continue
        reached = _reached(node, bound)
        if reached:
            out.append(reached)
        elif reached == "" and unresolved is not None:
            unresolved.append(f"line {getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
        if isinstance(node, ast.Attribute) and _dotted(node):
            continue  # a chain of names: its own prefixes (`aiops.sim` of `aiops.sim.twin`) add nothing
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            base = _relative(node, module, is_package) if node.level else str(node.module)
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            # `from pkg import module` is an import of that module; anything else imports `pkg` itself
            out.extend(submodules if len(submodules) == len(node.names) else [base, *submodules])
        elif isinstance(node, ast.Call):
            named = _dynamic(node, module, is_package)
            if named:
                out.append(named)
            elif named == "" and unresolved is not None:
                unresolved.append(f"line {node.lineno}: {ast.unparse(node)}")
        out.extend(_imports(node, module, is_package, unresolved, bound))
    return out


def _parse(name: str) -> ast.AST:
    return ast.parse(MODULES[name].read_text(), str(MODULES[name]))


@dataclass(frozen=True)
class Scan:
    """One pass over every first-party module's source: its import edges and the dynamic imports it cannot
    resolve (parsing and walking the ~460 modules costs about a CPU-second: once for this module)."""

    edges: dict[str, set[str]]
    unresolved: dict[str, list[str]]


def scan() -> Scan:
    edges: dict[str, set[str]] = {}
    unresolved: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        calls: list[str] = []
        imported = _imports(_parse(name), name, path.name == "__init__.py", calls)
        targets = {_resolve(i) for i in imported}
        edges[name] = {t for t in targets if t and t != name and t.split(".")[0] in PACKAGES}
        if calls:
            unresolved[name] = calls
    return Scan(edges, unresolved)


@pytest.fixture(scope="module")
def source() -> Scan:
    return scan()


def package_of(module: str) -> str:
    """The layered package a module belongs to (the longest listed prefix)."""
    listed = [p for layer in LAYERS for p in layer]
    return max((p for p in listed if module == p or module.startswith(p + ".")), key=len)


def layer_of(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_there_is_no_import_cycle(source: Scan) -> None:
    assert cycles(source.edges) == []


def upward(edges: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in edges.items():
        source = package_of(module)
        for target in targets:
            dest = package_of(target)
            if (
                source == dest
                or (source, dest) in SAME_LAYER_ALLOWED
                or layer_of(source) == layer_of(dest) == 0
            ):
                continue  # the base modules build on each other (the cycle check still holds them)
            if layer_of(dest) >= layer_of(source):
                found.append(
                    f"{module} ({source}, layer {layer_of(source)}) imports {target} (layer {layer_of(dest)})"
                )
    return found


def forbidden(edges: dict[str, set[str]]) -> list[str]:
    """Analyst modules that reach the twin through any chain of imports."""
    found = []
    for module in sorted(edges):
        if package_of(module) not in ANALYST:
            continue
        seen, todo = {module}, [module]
        while todo:
            for target in edges.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        found += [f"{module} reaches {t}" for t in sorted(seen) if package_of(t) in TWIN]
    return found


def test_no_import_goes_up_a_layer(source: Scan) -> None:
    assert upward(source.edges) == []


def test_the_analyst_cannot_import_the_twin(source: Scan) -> None:
    """Detection, diagnosis and remediation judge telemetry only: no path of imports from them to aiops.sim
    (tests/twin/test_twin_blind_analyst.py checks they never read the twin's tables either)."""
    assert forbidden(source.edges) == []


def test_dynamic_imports_are_named_or_listed(source: Scan) -> None:
    """A module named only at run time is an edge this test cannot see: allowed only where listed, with why."""
    found = source.unresolved
    assert sorted(found) == sorted(DYNAMIC_ALLOWED), found


def test_the_cli_commands_are_cli_modules() -> None:
    """What aiops.cli.main imports at run time: literal names of aiops.cli modules (the top layer)."""
    from aiops.cli.main import COMMAND_MODULES

    assert COMMAND_MODULES and all(m in MODULES and package_of(m) == "aiops.cli" for m in COMMAND_MODULES)


def test_the_checks_catch_what_they_claim_to() -> None:
    """The checker itself: a planted cycle and a planted upward import are found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of(package_of("guardrails.executor")) < layer_of(package_of("aiops.runtime.world"))
    assert package_of("aiops.datapath.maps") == "aiops.datapath"
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import aiops.cli\n"
        "def f():\n    from aiops.store import Store\n"
    )
    assert _imports(tree) == ["typing", "aiops.store"]


def test_relative_and_dynamic_imports_are_edges() -> None:
    """`from ..cli.main import main` inside a store function, `from . import x`, importlib and __import__ with
    a literal name are edges; a name known only at run time is reported."""
    planted = ast.parse(
        "import importlib\n"
        "def f():\n    from ..cli.main import main\n    from . import workspace\n"
        "    from .. import errors\n"
        "def g(name):\n    importlib.import_module('aiops.console')\n    __import__('aiops.agent.graph')\n"
        "    importlib.import_module('.report', package='aiops')\n    importlib.import_module(name)\n"
    )
    unresolved: list[str] = []
    imported = _imports(planted, "aiops.store.ingest", False, unresolved)
    assert imported == [
        "importlib",
        "aiops.cli.main",
        "aiops.store.workspace",
        "aiops.errors",
        "aiops.console",
        "aiops.agent.graph",
        "aiops.report",
    ]
    assert unresolved == ["line 10: importlib.import_module(name)"]
    assert _imports(ast.parse("from .world import World\n"), "aiops.sim", True) == ["aiops.sim.world"]
    edges = {"aiops.store.ingest": {_resolve(i) for i in imported} - {""}}
    assert sorted(upward(edges)) == [
        f"aiops.store.ingest (aiops.store, layer 1) imports {t} (layer {layer_of(package_of(t))})"
        for t in ("aiops.agent.graph", "aiops.cli.main", "aiops.console", "aiops.report")
    ]
    assert forbidden({"aiops.detect.x": {"aiops.store"}, "aiops.store": {"aiops.sim.world"}}) == [
        "aiops.detect.x reaches aiops.sim.world"
    ]


@pytest.mark.parametrize("package", ["aiops.datapath", "collectors"])
def test_readers_and_the_datapath_stay_small(source: Scan, package: str) -> None:
    """The datapath imports only aiops.errors; collectors never import control, the twin or guardrails."""
    allowed = {
        "aiops.datapath": {"aiops.errors", "aiops.safeload", "aiops"},
        # aiops.workload: the workload identity and resolver seam the workload collectors implement
        # aiops.columns: the telemetry columns' declarations the collectors' Arrow schemas derive from
        "collectors": {
            "aiops.errors",
            "aiops.safeload",
            "aiops.datapath",
            "aiops",
            "aiops.workload",
            "aiops.columns",
        },
    }
    for module, targets in source.edges.items():
        if package_of(module) != package:
            continue
        outside = {package_of(t) for t in targets} - {package} - allowed[package]
        assert not outside, f"{module} imports {sorted(outside)}"


def test_the_guardrails_names_load_from_their_modules() -> None:
    """The package's lazy names are its own modules' (a typo in _WHERE would only fail at first use)."""
    import importlib

    import guardrails

    for name, module in guardrails._WHERE.items():
        assert module.startswith("guardrails.") and hasattr(importlib.import_module(module), name), name
    assert sorted(guardrails._WHERE) == sorted(guardrails.__all__)


def test_sys_modules_and_package_attributes_are_edges() -> None:
    """A module reached without an import statement: through `sys.modules` (a literal key, or one known only at
    run time, which is reported), or as an attribute of an imported package (`import aiops` then
    `aiops.sim.twin.Twin`, an alias, `getattr(aiops, "sim")`); an attribute of an object that is no module
    (`self.sim`) and an import under `if TYPE_CHECKING:` are not."""
    planted = ast.parse(
        "import sys\n"
        "import aiops\n"
        "import aiops.store as st\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import collectors\n"
        "def f(self, name):\n"
        "    sys.modules['aiops.sim.world'].World\n"
        "    sys.modules.get('aiops.console')\n"
        "    sys.modules[name]\n"
        "    aiops.sim.twin.Twin\n"
        "    getattr(aiops, 'report')\n"
        "    st.workspace.Workspace\n"
        "    self.sim.world\n"
        "    collectors.nvml\n"
    )
    unresolved: list[str] = []
    imported = _imports(planted, "aiops.detect.x", False, unresolved)
    edges = {_resolve(i) for i in imported} - {""}
    assert {
        "aiops.sim.world",
        "aiops.console",
        "aiops.sim.twin",
        "aiops.report",
        "aiops.store.workspace",
    } <= edges
    assert "collectors.nvml" not in edges and "collectors" not in edges
    assert unresolved == ["line 10: sys.modules[name]"]
    assert forbidden({"aiops.detect.x": edges}) == [
        "aiops.detect.x reaches aiops.sim.twin",
        "aiops.detect.x reaches aiops.sim.world",
    ]
