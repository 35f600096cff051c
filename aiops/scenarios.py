"""The scenario file contract (YAML), validated with pydantic; errors name the file, the field and the allowed
values. A scenario describes the simulated cluster, its jobs, the faults to inject and what the eval expects
(`expect`: one cause, or a list of causes with optional fault windows). Only the simulator and the eval harness
read `faults` and `expect`; the analyst never does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from aiops.errors import ScenarioError
from aiops.labels import FAULT_KINDS, TARGET_KINDS, Label, component_kind
from aiops.safeload import decode_text, parse_yaml, read_limited

SLUG = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
# The simulator's default lane policy has these rule ids; a policy fault may also name a rule it adds.
DEFAULT_RULE_IDS = ("collective-cgroup", "collective-dscp", "peer-prefix", "storage-prefix", "default")


# The twin samples every GPU once per simulated second; a run buffers a minute of rows per flush. GPUs x
# duration x rate above this would take gigabytes before the first row is written (65,536 GPUs for a day:
# 3.9 GB), so a scenario is checked against it before anything is allocated.
SAMPLE_RATE_HZ = 1.0
MAX_GPU_SAMPLES = 20_000_000  # e.g. 1,024 GPUs for 5.4 h, or 64 GPUs for a day
MAX_SEED = 2**63 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterSpec(_Strict):
    racks: int = Field(2, ge=1, le=64)
    nodes_per_rack: int = Field(4, ge=1, le=64)
    gpus_per_node: int = Field(8, ge=1, le=16)
    nics_per_node: int = Field(2, ge=1, le=16)

    @property
    def nodes(self) -> int:
        return self.racks * self.nodes_per_rack


class JobSpec(_Strict):
    name: str
    nodes: Literal["all"] | int | list[str] = "all"
    step_compute_s: float = Field(1.0, gt=0, le=600)
    allreduce_mb: float = Field(256.0, ge=0, le=1_000_000)
    checkpoint_every_s: float | None = Field(None, gt=0)
    checkpoint_gb: float = Field(20.0, ge=0, le=100_000)

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.-]+$", value):
            raise ValueError("must be letters, digits, '_', '.', '-'")
        return value


class FaultSpec(_Strict):
    kind: str
    target: str
    start_s: float = Field(0.0, ge=0)
    duration_s: float | None = Field(None, gt=0)
    severity: float = Field(0.7, gt=0, le=1)


class ChurnSpec(_Strict):
    """Benign churn (aiops/sim/churn.py): `rate` times the default event rates (jobs stopping and starting, user
    errors, evaluations, warm spots, corrected ECC, planned DCIM caps, maintenance windows); `pcie_nodes`: nodes
    whose GPUs are PCIe cards (no NVLink counters); `unused_ports`: nodes with a spare HCA port without cable."""

    rate: float = Field(1.0, ge=0, le=100)
    pcie_nodes: list[str] = []
    unused_ports: list[str] = []


class PrecursorSpec(_Strict):
    """Degradations before hard faults (aiops/sim/precursors.py): a share of the scenario's hard faults (ECC,
    off the bus, NVLink, PCIe, a flapping link, a failing fan) is preceded by its degradation counters rising
    (`share`: None takes the published share per kind), starting `lead_s` before the fault (None: drawn per fault
    from the kind's lead-time distribution); `background`: benign noise on the same counters on every component,
    and now and then a benign episode that rises like a precursor and never becomes a fault
    (`decoys_per_node_day`)."""

    share: float | None = Field(None, ge=0, le=1)
    lead_s: float | None = Field(None, gt=0, le=86_400)
    background: bool = True
    decoys_per_node_day: float = Field(0.002, ge=0, le=10)


class Expect(_Strict):
    """The single-cause form of `expect` (the original contract, still valid)."""

    root_cause: str
    component: str = ""


class Cause(_Strict):
    """One cause of the list form of `expect`; `start_s`/`end_s` (seconds into the run) bound its fault window
    when given, else the window is the matching fault's (same kind and target) or the whole run."""

    root_cause: str
    component: str
    start_s: float | None = Field(None, ge=0)
    end_s: float | None = Field(None, gt=0)


MAX_CAUSES = 16
# The union's members are told apart by shape, so an error names `expect.root_cause` or `expect[1].component`,
# never both members' failures.
_EXPECT_TAGS = ("cause", "causes")
ExpectField = Annotated[
    Annotated[Expect, Tag("cause")]
    | Annotated[list[Cause], Tag("causes"), Field(min_length=1, max_length=MAX_CAUSES)],
    Discriminator(lambda v: "causes" if isinstance(v, list) else "cause"),
]


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    duration_s: float = Field(600.0, gt=0, le=86_400)
    cluster: ClusterSpec = ClusterSpec()
    jobs: list[JobSpec] | None = None
    lanes: Literal["enabled", "disabled"] = "enabled"
    # RoCE fabric: lossy (no PFC: a full queue drops) or lossless (PFC on the collectives' priority: it pauses)
    fabric: Literal["lossy", "lossless"] = "lossy"
    faults: list[FaultSpec] = []
    churn: ChurnSpec | None = None
    precursors: PrecursorSpec | None = None  # off unless asked: degradations before hard faults
    expect: ExpectField | None = None

    @property
    def job_specs(self) -> list[JobSpec]:
        return self.jobs if self.jobs is not None else [JobSpec(name="train")]

    @property
    def expected(self) -> Expect:
        """The first (most important) expected cause; healthy when none."""
        if isinstance(self.expect, list):
            return Expect(root_cause=self.expect[0].root_cause, component=self.expect[0].component)
        if self.expect is not None:
            return self.expect
        if self.faults:
            return Expect(root_cause=self.faults[0].kind, component=self.faults[0].target)
        return Expect(root_cause=Label.HEALTHY.value, component="")

    @property
    def expected_causes(self) -> list[Cause]:
        """Every expected cause, most important first; empty for a healthy run. Windows are as written (the
        scorer resolves a missing window from the faults)."""
        if isinstance(self.expect, list):
            return list(self.expect)
        first = self.expected
        if first.root_cause == Label.HEALTHY.value:
            return []
        return [Cause(root_cause=first.root_cause, component=first.component)]

    def job_nodes(self, job: JobSpec) -> list[int]:
        """Global node indices a job runs on."""
        if job.nodes == "all":
            return list(range(self.cluster.nodes))
        if isinstance(job.nodes, int):
            return list(range(job.nodes))
        return [int(n.removeprefix("node")) for n in job.nodes]


def components(cluster: ClusterSpec) -> set[str]:
    names = {"fleet"}
    for r in range(cluster.racks):
        names.add(f"rack{r}")
    for n in range(cluster.nodes):
        names.add(f"node{n}")
        names.update(f"node{n}/gpu{g}" for g in range(cluster.gpus_per_node))
        names.update(f"node{n}/nic{k}" for k in range(cluster.nics_per_node))
    return names


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _allowed_for(loc: tuple[int | str, ...], error_type: str) -> str | None:
    last = str(loc[-1]) if loc else ""
    if error_type == "extra_forbidden" and loc[:1] == ("expect",):
        return ", ".join((Cause if len(loc) > 2 and isinstance(loc[1], int) else Expect).model_fields)
    if error_type == "extra_forbidden":
        model: Any = Scenario
        for part in loc[:-1]:
            if isinstance(part, int):
                continue
            annotation = model.model_fields[part].annotation if part in model.model_fields else None
            nested = {
                "cluster": ClusterSpec,
                "jobs": JobSpec,
                "faults": FaultSpec,
                "churn": ChurnSpec,
                "precursors": PrecursorSpec,
                "expect": Expect,
            }.get(part)
            if nested is None or annotation is None:
                break
            model = nested
        return ", ".join(model.model_fields)
    if loc == ("expect",):
        return (
            "one cause {root_cause, component}, or a list of causes {root_cause, component, start_s, end_s}"
        )
    if last == "lanes":
        return "enabled, disabled"
    if last == "fabric":
        return "lossy, lossless"
    if last == "nodes":
        return "all, a node count, or a list of node names"
    return None


def check_size(path: str, cluster: ClusterSpec, duration_s: float) -> None:
    """GPUs x duration x sample rate within `MAX_GPU_SAMPLES` (before a world is allocated)."""
    gpus = cluster.nodes * cluster.gpus_per_node
    samples = gpus * duration_s * SAMPLE_RATE_HZ
    if samples > MAX_GPU_SAMPLES:
        raise ScenarioError(
            path,
            "duration_s",
            f"{gpus:,} GPUs x {duration_s:g} s x {SAMPLE_RATE_HZ:g} sample/s = {samples:,.0f} GPU samples, "
            f"more than the limit of {MAX_GPU_SAMPLES:,}",
            f"duration_s <= {MAX_GPU_SAMPLES / (gpus * SAMPLE_RATE_HZ):,.0f} for {gpus:,} GPUs",
        )


def _check_semantics(path: str, scenario: Scenario) -> None:
    check_size(path, scenario.cluster, scenario.duration_s)
    if not SLUG.match(scenario.name):
        raise ScenarioError(
            path, "name", f"'{scenario.name}' is not a slug", "lower-case letters, digits, '_', '.', '-'"
        )
    names = components(scenario.cluster)
    nodes = scenario.cluster.nodes
    seen_jobs: set[str] = set()
    for i, job in enumerate(scenario.job_specs):
        if job.name in seen_jobs:
            raise ScenarioError(path, f"jobs[{i}].name", f"duplicate job name '{job.name}'")
        seen_jobs.add(job.name)
        if isinstance(job.nodes, int) and not 1 <= job.nodes <= nodes:
            raise ScenarioError(path, f"jobs[{i}].nodes", f"{job.nodes} nodes requested", f"1..{nodes}")
        if isinstance(job.nodes, list):
            for node in job.nodes:
                if node not in names or component_kind(node) != "node":
                    raise ScenarioError(
                        path, f"jobs[{i}].nodes", f"'{node}' is not a node", f"node0..node{nodes - 1}"
                    )
    if scenario.churn is not None:
        for key in ("pcie_nodes", "unused_ports"):
            for j, node in enumerate(getattr(scenario.churn, key)):
                if node not in names or component_kind(node) != "node":
                    raise ScenarioError(
                        path, f"churn.{key}[{j}]", f"'{node}' is not a node", f"node0..node{nodes - 1}"
                    )
    for i, fault in enumerate(scenario.faults):
        field = f"faults[{i}]"
        if fault.kind not in FAULT_KINDS:
            raise ScenarioError(path, f"{field}.kind", f"unknown kind '{fault.kind}'", FAULT_KINDS)
        kinds = TARGET_KINDS[fault.kind]
        kind = component_kind(fault.target)
        if kind not in kinds:
            raise ScenarioError(
                path,
                f"{field}.target",
                f"'{fault.target}' is not a {' or '.join(kinds)} for {fault.kind}",
                _examples(scenario, kinds),
            )
        if kind == "policy":
            pass  # a rule id the policy lacks is a rule the fault adds (a stray rule), so any id is valid
        elif fault.target not in names:
            raise ScenarioError(
                path,
                f"{field}.target",
                f"'{fault.target}' does not exist in the cluster",
                _examples(scenario, kinds),
            )
        if fault.start_s >= scenario.duration_s:
            raise ScenarioError(
                path,
                f"{field}.start_s",
                f"{fault.start_s} is not inside the run",
                f"0 <= start_s < duration_s ({scenario.duration_s:g})",
            )
    if isinstance(scenario.expect, list):
        _check_causes(path, scenario, scenario.expect)
    elif scenario.expect is not None:
        allowed = [*FAULT_KINDS, Label.HEALTHY.value]  # what the twin can inject, or nothing
        if scenario.expect.root_cause not in allowed:
            raise ScenarioError(
                path, "expect.root_cause", f"unknown label '{scenario.expect.root_cause}'", allowed
            )


def _check_causes(path: str, scenario: Scenario, causes: list[Cause]) -> None:
    """The list form: each cause a fault kind on a component of a kind it can hit, inside the run, no cause
    twice (a healthy run is the single form's `{root_cause: healthy}` or no `expect` at all)."""
    names = components(scenario.cluster)
    seen: set[tuple[str, str]] = set()
    for i, cause in enumerate(causes):
        field = f"expect[{i}]"
        if cause.root_cause not in FAULT_KINDS:
            raise ScenarioError(
                path, f"{field}.root_cause", f"unknown label '{cause.root_cause}'", FAULT_KINDS
            )
        kinds = TARGET_KINDS[cause.root_cause]
        kind = component_kind(cause.component)
        if kind not in kinds or (kind != "policy" and cause.component not in names):
            raise ScenarioError(
                path,
                f"{field}.component",
                f"'{cause.component}' is not a {' or '.join(kinds)} of this cluster for {cause.root_cause}",
                _examples(scenario, kinds),
            )
        if (cause.root_cause, cause.component) in seen:
            raise ScenarioError(
                path, field, f"{cause.root_cause} on {cause.component} is listed twice", "each cause once"
            )
        seen.add((cause.root_cause, cause.component))
        if cause.start_s is not None and cause.start_s >= scenario.duration_s:
            raise ScenarioError(
                path,
                f"{field}.start_s",
                f"{cause.start_s:g} is not inside the run",
                f"0 <= start_s < duration_s ({scenario.duration_s:g})",
            )
        start_s = cause.start_s or 0.0
        if cause.end_s is not None and not start_s < cause.end_s <= scenario.duration_s:
            raise ScenarioError(
                path,
                f"{field}.end_s",
                f"{cause.end_s:g} does not close a window that opens at {start_s:g}",
                f"start_s < end_s <= duration_s ({scenario.duration_s:g})",
            )


def _examples(scenario: Scenario, kinds: tuple[str, ...]) -> str:
    c = scenario.cluster
    shown = {
        "gpu": f"node0/gpu0..node{c.nodes - 1}/gpu{c.gpus_per_node - 1}",
        "node": f"node0..node{c.nodes - 1}",
        "nic": f"node0/nic0..node{c.nodes - 1}/nic{c.nics_per_node - 1}",
        "rack": f"rack0..rack{c.racks - 1}",
        "fleet": "fleet",
        "policy": ", ".join(f"policy:{r}" for r in DEFAULT_RULE_IDS),
    }
    return "; ".join(shown[k] for k in kinds)


def parse_scenario(data: Any, path: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(
            path, "(top level)", "must be a mapping of keys to values", ", ".join(Scenario.model_fields)
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        if loc[:1] == ("expect",) and len(loc) > 1 and loc[1] in _EXPECT_TAGS:
            loc = loc[:1] + loc[2:]  # the union member's tag is not a field
        # pydantic reports each branch of a union; keep the field path up to the union member.
        loc = tuple(
            p for p in loc if not (isinstance(p, str) and p in {"literal['all']", "int", "list[str]"})
        )
        problem = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        if error["type"] == "missing":
            problem = "is required"
        raise ScenarioError(
            path, _field_path(loc) or "(top level)", problem, _allowed_for(loc, error["type"])
        ) from exc
    _check_semantics(path, scenario)
    return scenario


def _read_text(path: str | Path) -> str:
    return decode_text(read_limited(path, ScenarioError), str(path), ScenarioError)


def load_scenario(path: str | Path) -> Scenario:
    return parse_scenario_text(_read_text(path), str(path))


def scenario_yaml(scenario: Scenario) -> str:
    """The scenario as YAML that `parse_scenario_text` reads back to an equal scenario, without `expect` (what
    a simulated workspace keeps so its twin can be rebuilt: the twin needs the world, never the answer)."""
    return yaml.safe_dump(scenario.model_dump(mode="json", exclude={"expect"}), sort_keys=True)


def parse_scenario_text(text: str, shown: str = "<scenario>") -> Scenario:
    """Parse and validate scenario YAML text; `shown` names its source in errors."""
    return parse_scenario(parse_yaml(text, shown, ScenarioError), shown)
