"""The fleet-wide circuit breaker: at most a fraction of the nodes (and of any rack) taken out of service in a
window, whoever took them out. A storm of drains (a detector gone wrong, a facility event seen as 20 faulty
nodes, a bad playbook) stops at the limit and waits for a person's signed override, instead of emptying the
cluster one "safe" step at a time. NVIDIA NVSentinel's fault-quarantine circuit breaker is the model (a
percentage of cordoned nodes over a sliding window, a manual reset); this one also counts per rack (a rack is
one failure domain: its PDU, its CDU, its top-of-rack switch) and across every tier and executor.

Out of service, counted (`out_of_service`):
- what this workspace's execution ledger ran in the last `window_s`: `drain_node`, `reboot_node`, a
  `migrate_job` of a node or rack (its nodes), a `restart_job` that `exclude`s a node (or a GPU of it); a later
  `resume_node` on the node puts it back. The ledger is every actor's (chat, CLI, console, DCIM rounds, the
  fleet's dispatch results, the other tier's executions as learnt: `peer` records);
- what the scheduler reports now, where one is configured (`SchedulerView`: Slurm's drained, draining, down
  and failing nodes as `sinfo` reports them; Kubernetes' cordoned nodes), whatever the window.

The limit (`BreakerPolicy`): `max(min_nodes, floor(max_nodes_fraction x nodes))` for the fleet and
`max(min(min_nodes, rack size), floor(max_rack_fraction x rack size))` for each rack, where `nodes` is every
node the topology or the scheduler knows. An action whose new nodes would take the count past a limit is
stopped with rule `breaker`: it waits (filed, approvable, not run) until the count falls or an override lifts
the limit. An override is a person's signed decision (`breaker_override` in the audit log, risk class `breaker`
in `[guardrails.approvers]`): `count` more nodes on its target (`fleet`: the fleet's limit and every rack's;
a rack: that rack's and the fleet's) until its expiry.

Pure: the validation context carries the ledger, the scheduler's view and the overrides (guardrails.policy).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from guardrails.actions import canonical_json, sha256_hex
from guardrails.topology import Topology

OUT_KINDS: tuple[str, ...] = ("drain_node", "reboot_node", "migrate_job", "restart_job")
BACK_KINDS: tuple[str, ...] = ("resume_node",)
# Slurm node state words (sinfo %T, scontrol State=) that mean the node runs no new work: slurm.conf(5) and
# sinfo(1) "NODE STATE CODES"; `*` (not responding) and `~` (powered off) suffixes are stripped first.
SLURM_OUT_STATES: frozenset[str] = frozenset(
    {"drain", "drained", "draining", "down", "fail", "failing", "maint", "reboot_issued", "reboot_requested"}
)
DEFAULT_MAX_NODES_FRACTION = 0.1
DEFAULT_MAX_RACK_FRACTION = 0.25
DEFAULT_WINDOW_S = 3600.0
DEFAULT_MIN_NODES = 4
MAX_OVERRIDE_COUNT = 1000
MAX_OVERRIDE_TTL_S = 24 * 3600.0
NAMED = 4  # nodes named in a refusal, at most


class _Record(Protocol):
    """What the breaker reads of an execution (guardrails.policy.ExecutionRecord)."""

    @property
    def kind(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def units(self) -> frozenset[str]: ...
    @property
    def ts_s(self) -> float: ...
    @property
    def proposal_id(self) -> str: ...
    @property
    def parameters(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class BreakerPolicy:
    enabled: bool = True
    max_nodes_fraction: float = DEFAULT_MAX_NODES_FRACTION
    max_rack_fraction: float = DEFAULT_MAX_RACK_FRACTION
    window_s: float = DEFAULT_WINDOW_S
    min_nodes: int = DEFAULT_MIN_NODES

    def fleet_limit(self, nodes: int) -> int:
        return max(min(self.min_nodes, nodes), math.floor(self.max_nodes_fraction * nodes + 1e-9))

    def rack_limit(self, nodes: int) -> int:
        return max(min(self.min_nodes, nodes), math.floor(self.max_rack_fraction * nodes + 1e-9))


@dataclass(frozen=True)
class SchedulerView:
    """Every node the scheduler knows, by component name, and its state word; `out` those it runs no new
    work on. `error`: the scheduler could not be read (then the breaker stops out-of-service actions: it
    cannot count what it cannot see)."""

    source: str  # slurm | kubernetes
    states: Mapping[str, str] = field(default_factory=dict)
    out: frozenset[str] = frozenset()
    error: str = ""


@dataclass(frozen=True)
class Override:
    """A person's signed lift of the limit: `count` more nodes on `target` (fleet or a rack) until expiry."""

    override_id: str
    target: str
    count: int
    approver: str
    ts_s: float
    expires_ts_s: float
    reason: str = ""

    def active(self, now_ts_s: float) -> bool:
        return self.ts_s <= now_ts_s < self.expires_ts_s


def override_terms_hash(target: str, count: int, reason: str) -> str:
    """What an override's signature binds to, besides its id and window: sha256 of the canonical terms."""
    return sha256_hex(canonical_json(["breaker_override", target, int(count), reason]))


def node_of(component: str) -> str:
    """The node of a node, GPU or NIC component name (`{host}/gpu{g}` -> `{host}`)."""
    return component.split("/", 1)[0]


def nodes_taken_out(
    kind: str, target: str, units: Iterable[str], parameters: Mapping[str, Any], topology: Topology
) -> frozenset[str]:
    """The nodes an action of `kind` on `target` takes out of service (none for any other kind)."""
    if kind in ("drain_node", "reboot_node"):
        return frozenset({target}) if target in topology.node_gpus else frozenset()
    if kind == "migrate_job" and not target.startswith("job:"):
        scope = topology.expand(target)
        if scope is not None and scope.kind in ("node", "rack"):
            return frozenset(scope.nodes)
        return frozenset(node_of(u) for u in units if node_of(u) in topology.node_gpus)
    if kind == "restart_job":
        exclude = parameters.get("exclude")
        if isinstance(exclude, str) and exclude:
            node = node_of(exclude)
            return frozenset({node}) if node in topology.node_gpus else frozenset()
    return frozenset()


def out_of_service(
    history: Sequence[_Record],
    view: SchedulerView | None,
    topology: Topology,
    now_ts_s: float,
    window_s: float,
) -> dict[str, str]:
    """node -> why it counts as out of service now (the newest reason), oldest first."""
    since = now_ts_s - window_s
    out: dict[str, str] = {}
    for record in sorted(history, key=lambda r: r.ts_s):
        if record.ts_s > now_ts_s:
            continue
        if record.kind in BACK_KINDS:
            out.pop(record.target, None)
            continue
        if record.ts_s <= since or record.kind not in OUT_KINDS:
            continue
        for node in nodes_taken_out(record.kind, record.target, record.units, record.parameters, topology):
            out.pop(node, None)
            out[node] = f"{record.kind} {record.proposal_id}"
    if view is not None:
        for node in sorted(view.out):
            out.setdefault(node, f"{view.source}: {view.states.get(node, 'out')}")
    return out


def nodes_known(topology: Topology, view: SchedulerView | None) -> int:
    """Every node the topology or the scheduler knows (the fleet's limit is a share of them)."""
    return len(set(topology.node_gpus) | set(view.states if view is not None else ()))


def _lift(overrides: Sequence[Override], now_ts_s: float, target: str) -> tuple[int, list[str]]:
    """How many more nodes active overrides allow on `target`: on a rack, its own and the fleet's; on the
    fleet, every override (a rack's lifts the fleet's limit too). With their ids."""
    count, ids = 0, []
    for o in overrides:
        if o.active(now_ts_s) and (target == "fleet" or o.target in (target, "fleet")):
            count += o.count
            ids.append(o.override_id)
    return count, ids


def _named(nodes: Iterable[str], out: Mapping[str, str]) -> str:
    items = sorted(nodes)
    shown = ", ".join(f"{n} ({out[n]})" for n in items[:NAMED] if n in out)
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def check(
    kind: str,
    target: str,
    units: Iterable[str],
    parameters: Mapping[str, Any],
    *,
    topology: Topology,
    history: Sequence[_Record],
    view: SchedulerView | None,
    overrides: Sequence[Override],
    policy: BreakerPolicy,
    now_ts_s: float,
    proposal_id: str = "",
) -> str | None:
    """Why the action would trip the breaker, or None. Only kinds that take nodes out are counted."""
    if not policy.enabled or kind not in OUT_KINDS:
        return None
    taking = nodes_taken_out(kind, target, units, parameters, topology)
    if not taking:
        return None
    if view is not None and view.error:
        return (
            f"the {view.source} view of out-of-service nodes is unreadable ({view.error[:120]}): "
            "the breaker cannot count, so nothing more is taken out"
        )
    own = [r for r in history if r.proposal_id != proposal_id or not proposal_id]
    out = out_of_service(own, view, topology, now_ts_s, policy.window_s)
    new = taking - set(out)
    if not new:
        return None  # every node it touches is out already: nothing more leaves service
    after = set(out) | new
    total = max(nodes_known(topology, view), 1)
    lift, ids = _lift(overrides, now_ts_s, "fleet")
    limit = policy.fleet_limit(total) + lift
    window = f"{policy.window_s:g} s"
    suffix = f" (overrides {', '.join(ids)} add {lift})" if ids else ""
    if len(after) > limit:
        return (
            f"taking {', '.join(sorted(new)[:NAMED])} out would make {len(after)} of {total} nodes out of "
            f"service, over the limit of {limit}{suffix} (max {policy.max_nodes_fraction:.0%} of the fleet, "
            f"at least {policy.min_nodes}; window {window}); out now: {_named(out, out) or 'none'}. "
            "It waits: for nodes to return, or for a signed override (aiops actions override)"
        )
    for rack, members in sorted(topology.rack_nodes.items()):
        if not new & set(members):
            continue
        rack_after = after & set(members)
        lift, ids = _lift(overrides, now_ts_s, rack)
        limit = policy.rack_limit(len(members)) + lift
        if len(rack_after) > limit:
            suffix = f" (overrides {', '.join(ids)} add {lift})" if ids else ""
            return (
                f"taking {', '.join(sorted(new & set(members))[:NAMED])} out would make {len(rack_after)} of "
                f"{len(members)} nodes of {rack} out of service, over the rack limit of {limit}{suffix} "
                f"(max {policy.max_rack_fraction:.0%} of a rack, at least {min(policy.min_nodes, len(members))}; "
                f"window {window}); out now in {rack}: {_named(set(out) & set(members), out) or 'none'}. "
                "It waits: for nodes to return, or for a signed override (aiops actions override)"
            )
    return None


@dataclass(frozen=True)
class RackCount:
    rack: str
    nodes: int
    out: int
    limit: int


@dataclass(frozen=True)
class Snapshot:
    """The breaker as people read it (console, `aiops actions breaker`, /metrics, MCP): what is out and why,
    the limits with the active overrides added, per rack."""

    enabled: bool
    nodes: int
    out: Mapping[str, str]  # node -> why
    limit: int
    racks: tuple[RackCount, ...]
    overrides: tuple[Override, ...]
    view_source: str = ""  # the scheduler whose view counts ("" none)
    view_error: str = ""

    @property
    def at_limit(self) -> bool:
        """No further node may go out (fleet-wide, or in some rack): what trips the next drain."""
        return len(self.out) >= self.limit or any(r.out >= r.limit for r in self.racks)


def snapshot(
    *,
    topology: Topology,
    history: Sequence[_Record],
    view: SchedulerView | None,
    overrides: Sequence[Override],
    policy: BreakerPolicy,
    now_ts_s: float,
) -> Snapshot:
    out = out_of_service(history, view, topology, now_ts_s, policy.window_s)
    total = nodes_known(topology, view)
    active = tuple(o for o in overrides if o.active(now_ts_s))
    racks = tuple(
        RackCount(
            rack,
            len(members),
            len(set(out) & set(members)),
            policy.rack_limit(len(members)) + _lift(active, now_ts_s, rack)[0],
        )
        for rack, members in sorted(topology.rack_nodes.items())
    )
    return Snapshot(
        policy.enabled,
        total,
        out,
        policy.fleet_limit(total) + _lift(active, now_ts_s, "fleet")[0],
        racks,
        active,
        view.source if view is not None else "",
        view.error if view is not None else "",
    )
