"""The first-party import graph, built from the source (every import statement, inside functions too; only
`if TYPE_CHECKING:` blocks, which never run, are left out): no cycle between modules, and no import from a
lower layer up to a higher one. docs/ARCHITECTURE.md draws the same layers.

Layers, lowest first; a package may import its own layer's package and anything below, nothing above and no
other package of its own layer (except the base modules, and the order inside the pipeline layer below):

  0 base        aiops (the package), aiops.causal, aiops.errors, .labels, .nvml_bits, .models, .safeload, .scenarios, .text
  1 store       aiops.store (workspace, migrations, ingest, readings)
  2 datapath    aiops.datapath (the only code that writes the kernel's datapath; imports aiops.errors alone)
  3 collectors  collectors (read-only telemetry sources), aiops.profile (eBPF uprobes on CUDA/NCCL: AI flame graphs)
  4 guardrails  guardrails (actions, validation, approvals, audit, executor, actuator backends)
  5 control     aiops.control (laws, allocator, thermal manager, DCIM rounds, the readings port)
  6 sim         aiops.sim (the twin: a world behind the same seams)
  7 pipeline    aiops.detect, aiops.rca, aiops.playbooks, aiops.pipeline
  8 runtime     aiops.runtime (a workspace put to work: its world, analysis with filing, approvals, DCIM)
  9 apps        aiops.agent, aiops.lab, aiops.service (the node service, its notifier), evals
 10 console     aiops.console (the web console: reads the pipeline's results, decides through the runtime,
                chats through the agent; `aiops run` mounts its app on the service's one listener)
 11 cli         aiops.cli
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("aiops", "collectors", "guardrails", "evals", "playbooks", "bpf")
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "aiops",
        "aiops.causal",
        "aiops.errors",
        "aiops.labels",
        "aiops.nvml_bits",
        "aiops.models",
        "aiops.safeload",
        "aiops.scenarios",
        "aiops.text",
    ),
    ("aiops.store",),
    ("aiops.datapath",),
    ("collectors", "aiops.profile", "aiops.sources"),
    ("guardrails", "playbooks", "bpf"),  # playbooks and bpf hold data only
    ("aiops.control",),
    ("aiops.sim",),
    ("aiops.detect", "aiops.rca", "aiops.playbooks", "aiops.pipeline", "aiops.evidence"),
    ("aiops.runtime", "aiops.report"),
    ("aiops.agent", "aiops.lab", "aiops.service", "evals"),
    ("aiops.console",),
    ("aiops.cli",),
)
# Within the pipeline layer the order is detect, rca -> playbooks -> pipeline (remediation is the pipeline's).
SAME_LAYER_ALLOWED = {
    ("aiops.playbooks", "aiops.rca"),
    ("aiops.pipeline", "aiops.detect"),
    ("aiops.pipeline", "aiops.rca"),
    ("aiops.pipeline", "aiops.playbooks"),
    ("aiops.agent", "evals"),
    ("evals", "aiops.agent"),
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


def _imports(tree: ast.AST) -> list[str]:
    out: list[str] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            out.extend(name for child in node.orelse for name in _imports(child))
            continue
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            submodules = [
                f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES
            ]
            # `from pkg import module` is an import of that module; anything else imports `pkg` itself
            out.extend(submodules if len(submodules) == len(node.names) else [node.module, *submodules])
        out.extend(_imports(node))
    return out


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = {_resolve(imported) for imported in _imports(ast.parse(path.read_text(), str(path)))}
        edges[name] = {t for t in targets if t and t != name and t.split(".")[0] in PACKAGES}
    return edges


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


def test_there_is_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_no_import_goes_up_a_layer() -> None:
    upward = []
    for module, targets in graph().items():
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
                upward.append(
                    f"{module} ({source}, layer {layer_of(source)}) imports {target} (layer {layer_of(dest)})"
                )
    assert upward == []


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


@pytest.mark.parametrize("package", ["aiops.datapath", "collectors"])
def test_readers_and_the_datapath_stay_small(package: str) -> None:
    """The datapath imports only aiops.errors; collectors never import control, the twin or guardrails."""
    allowed = {
        "aiops.datapath": {"aiops.errors", "aiops.safeload", "aiops"},
        "collectors": {"aiops.errors", "aiops.safeload", "aiops.datapath", "aiops"},
    }
    for module, targets in graph().items():
        if package_of(module) != package:
            continue
        outside = {package_of(t) for t in targets} - {package} - allowed[package]
        assert not outside, f"{module} imports {sorted(outside)}"
