"""Which label values of the node agents' exports become names in the fleet's workspace, and which agent may
speak for which node (docs/SECURITY.md, "The fleet and its nodes").

Labels are hostile data: whoever runs a scraped target (or writes a relabelling rule, or pushes into the store)
chooses them. The fleet's rules, applied to every staged series before any pivot reads it:

- **A label becomes a name only when valid** (`aiops.labels.name_from_label`, one rule for every source): a node a
  lowercase RFC 1123 host name, a rack an RFC 1123 label, a GPU/NIC `{host}/gpu<N>` / `{host}/nic<N>`, a job the
  job alphabet; `component` a contract name, the other labels short printable ASCII. A value that fails is
  blanked (the series keeps its other labels) and counted as refused: `127.0.0.1:19999/x#` never becomes a node.
- **A GPU or NIC belongs to the host its name holds.** `node1/gpu1` is node1's, whatever its `node` label says:
  a `node` label that disagrees is refused, and the series speaks for the name's host.
- **A node belongs to the agent that declares it** (`aiops_node_info` per scrape `instance`): a series about a
  node counts only when it comes from the instance that declares that node. Another agent's series about it, and
  every series of a node two instances declare at once, are refused (`Ownership`). A series without an
  `instance` label (a bulk import, not a scrape) is judged by the name rules alone.

Refusals are counted in the cycle's report (`IngestReport.refused`) and named (at most `MAX_EXAMPLES` lines,
escaped) in `IngestReport.conflicts`, which the fleet's log shows once each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aiops.fleet import families
from aiops.labels import GPU_INDEX, HOST, JOB_NAME, LABEL_PATTERNS

MAX_EXAMPLES = 20
# Series about a job, not a part: the job's home agent (its rank 0's node) reports its ranks, steps and slowest
# rank, so their `gpu`, `nic` and `node` labels name parts of other nodes. They are references (valid names
# still), never claims: a GPU named there gains no owner, and the series counts from any agent that declares a
# node. What they can do is bias a diagnosis the way any telemetry can; where an action goes stays the name's.
REFERENCES: frozenset[str] = frozenset((*families.JOB, "aiops_job_rank_info"))
_NAME = r"[A-Za-z0-9_.-]{1,63}"
# label -> the RE2 pattern a value must match to be kept (empty values are kept: the label is absent)
RULES: dict[str, str] = {
    **{kind: LABEL_PATTERNS[kind] for kind in ("node", "rack", "gpu", "nic", "job")},
    "component": rf"^(fleet|{HOST}|{HOST}/(gpu|nic|accel){GPU_INDEX}|job:{JOB_NAME}|policy:{_NAME})$",
    "incident_id": r"^[A-Za-z0-9_.:-]{1,120}$",
    "root_cause": r"^[a-z_]{1,40}$",
    "severity": r"^[a-z]{1,16}$",
    "rule_id": rf"^{_NAME}$",
    "index": r"^[0-9]{1,9}$",
    "rank": r"^[0-9]{1,9}$",
    "port": r"^[0-9]{1,9}$",
    "xid": r"^[0-9]{1,9}$",
    "uuid": r"^[A-Za-z0-9-]{1,80}$",
    "dev": r"^[A-Za-z0-9_.:@-]{1,32}$",
    "device": r"^[A-Za-z0-9_.:@-]{1,64}$",
    # what a node's executed actions set (aiops_intended_state*: guardrails/intended.py)
    "property": rf"^[a-z_]{{1,40}}(:[a-z]{{1,16}}|:{HOST})?$",  # lane_rate_fraction:<lane>, excluded:<host>
    "proposal_id": r"^[A-Za-z0-9_.:-]{1,80}$",
    "kind": r"^[a-z_]{1,40}$",
    "action_hash": r"^[0-9a-f]{64}$",
}
TEXT = r"^[\x20-\x7e]{1,256}$"  # every other label: printable ASCII, bounded
# names the contract reserves: never a host (`fleet`, `rack<N>`), never a rack (`fleet`, `node<N>`)
_RESERVED_HOST = r"^(fleet|rack[0-9]+)(/|$)"
_RESERVED_RACK = r"^(fleet|node[0-9]+)$"


@dataclass
class Refusals:
    """What a cycle refused: counts per reason, and the first lines naming them (escaped, bounded)."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, reason: str, count: int, example: str) -> None:
        if count <= 0:
            return
        self.counts[reason] = self.counts.get(reason, 0) + count
        line = f"{reason}: {example}"
        if len(self.examples) < MAX_EXAMPLES and line not in self.examples:
            self.examples.append(line)


def shown(value: Any, limit: int = 80) -> str:
    """A hostile value as one printable ASCII line."""
    text = str(value)[:limit]
    return text.encode("unicode_escape").decode("ascii")


def _valid_values(label: str, values: pa.Array) -> pa.Array:
    """Whether each value may stand as `label` (an empty value is an absent label: kept)."""
    ok = pc.match_substring_regex(values, RULES.get(label, TEXT))
    if label in ("node", "gpu", "nic"):
        ok = pc.and_(ok, pc.invert(pc.match_substring_regex(values, _RESERVED_HOST)))
        ok = pc.and_(ok, pc.less_equal(pc.utf8_length(values), 253 + 12))
    if label == "rack":
        twin = pc.match_substring_regex(values, r"^rack[0-9]+$")
        ok = pc.or_(twin, pc.and_(ok, pc.invert(pc.match_substring_regex(values, _RESERVED_RACK))))
    return pc.or_(ok, pc.equal(values, ""))


# label -> values found valid before (a pure function of the two): a steady read's labels repeat every step, so
# only a value not seen yet is matched; bounded (emptied when full: hostile labels may be endless)
_VALID: dict[str, set[str]] = {}
VALID_MEMO = 100_000


def _remember(label: str, values: list[Any]) -> None:
    known = _VALID.setdefault(label, set())
    if len(known) + len(values) > VALID_MEMO:
        known.clear()
    known.update(v for v in values if isinstance(v, str))


def _host_of(values: pa.Array) -> pa.Array:
    return pc.if_else(
        pc.equal(values, ""), "", pc.list_element(pc.split_pattern(values, "/", max_splits=1), 0)
    )


def check_labels(
    name: str, columns: dict[str, pa.Array], instances: pa.Array, refusals: Refusals
) -> dict[str, pa.Array]:
    """`columns` (label -> string column, "" where absent) with every invalid value blanked and a GPU's or NIC's
    `node` set to the host its name holds; each refusal counted and named in `refusals`. Each label is checked
    once per distinct value (labels repeat: a GPU's name in every one of its series)."""
    out = dict(columns)
    for label, column in columns.items():
        encoded = pc.dictionary_encode(column)
        values = encoded.dictionary
        texts = values.to_pylist()
        known = _VALID.get(label, set())
        if all(v == "" or v in known for v in texts):
            continue  # absent from every series, or every value valid when seen before
        ok_values = _valid_values(label, values)
        if pc.all(ok_values).as_py():
            _remember(label, texts)
            continue
        ok = pc.take(ok_values, encoded.indices)
        bad = pc.invert(ok)
        first = pc.index(bad, True).as_py()
        refusals.add(
            f"{label} label not a valid name",
            int(pc.sum(bad).as_py() or 0),
            f"{name}{{{label}={shown(column[first].as_py())!r}}} from {shown(instances[first].as_py())!r}",
        )
        out[label] = pc.if_else(ok, column, "")
    for part in ("gpu", "nic"):  # the name's host is the node; a `node` label that says otherwise is refused
        if part not in out or "node" not in out or name in families.JOB:
            continue  # a job's series: its node is its reporter's, its GPU a reference
        encoded = pc.dictionary_encode(out[part])
        if len(encoded.dictionary) == 1 and encoded.dictionary[0].as_py() == "":
            continue
        host = pc.take(_host_of(encoded.dictionary), encoded.indices)
        differs = pc.and_(pc.not_equal(host, ""), pc.not_equal(out["node"], host))
        if not pc.any(differs).as_py():
            continue
        claims = pc.and_(differs, pc.not_equal(out["node"], ""))
        count = int(pc.sum(claims).as_py() or 0)
        if count:
            first = pc.index(claims, True).as_py()
            refusals.add(
                f"node label disagrees with the {part}'s name",
                count,
                f"{name}{{{part}={shown(out[part][first].as_py())!r}, node={shown(out['node'][first].as_py())!r}}}",
            )
        out["node"] = pc.if_else(differs, host, out["node"])
    return out


# -- ownership: which instance speaks for which node ---------------------------------------------------------
_REFERENCES = ", ".join(f"'{n}'" for n in sorted(REFERENCES))
_SERIES_NODE = (  # the node a series is about (its GPU's or NIC's host: check_labels made `node` agree); a job's: none
    f"CASE WHEN s.name IN ({_REFERENCES}) THEN '' "
    "WHEN s.gpu <> '' THEN split_part(s.gpu, '/', 1) WHEN s.nic <> '' THEN split_part(s.nic, '/', 1) "
    "ELSE s.node END"
)
# each node and the instances that declare it in this piece
_OWNERS = (
    "SELECT node, min(instance) AS instance, count(DISTINCT instance) AS instances FROM fleet_series "
    "WHERE name = 'aiops_node_info' AND node <> '' AND instance <> '' GROUP BY node"
)
# the series that count: no instance (a bulk import), or from the one instance that declares their node; a series
# about no node (a job's) from an instance that declares some node alone (a join on the series' own node, not a
# subquery per series: the same rows, a third of the cost). One statement, the owners a subquery of it: a table of
# them made apart cost a steady read's piece a statement more (~4 ms of DuckDB's fixed cost, for a few rows).
OWNERSHIP_SQL = f"""CREATE OR REPLACE TEMP TABLE fleet_ok AS
WITH s AS (SELECT sid, instance, ({_SERIES_NODE}) AS about FROM fleet_series s),
     sole AS MATERIALIZED (SELECT node, instance FROM ({_OWNERS}) WHERE instances = 1)
SELECT s.sid FROM s WHERE s.instance = ''
UNION ALL SELECT s.sid FROM s JOIN sole o ON o.instance = s.instance AND o.node = s.about WHERE s.instance <> ''
UNION ALL SELECT s.sid FROM s WHERE s.instance <> '' AND s.about = '' AND s.instance IN (SELECT instance FROM sole)"""
REFUSED_SQL = f"""
SELECT s.instance, ({_SERIES_NODE}) AS node, min(s.name) AS name, count(*) AS series,
       max(o.instances) AS claimants, max(o.instance) AS owner
FROM fleet_series s LEFT JOIN ({_OWNERS}) o ON o.node = ({_SERIES_NODE})
WHERE s.sid NOT IN (SELECT sid FROM fleet_ok)
GROUP BY ALL ORDER BY series DESC LIMIT {MAX_EXAMPLES}
"""
OWNERSHIP_DROP = ("DROP TABLE IF EXISTS temp.main.fleet_ok",)


def record_ownership(rows: Sequence[Mapping[str, Any]], refusals: Refusals) -> None:
    """The refused series (REFUSED_SQL's rows) into `refusals`, each with why."""
    for row in rows:
        instance, node, series = shown(row["instance"]), shown(row["node"]), int(row["series"])
        if row["claimants"] is None:
            reason = "series about a node its instance does not declare (aiops_node_info)"
            refusals.add(reason, series, f"{node or '(no node)'} from {instance!r}")
        elif int(row["claimants"]) > 1:
            refusals.add(
                "node declared by several instances", series, f"{node} (from {instance!r} and others)"
            )
        else:
            refusals.add(
                "series about another instance's node",
                series,
                f"{node} from {instance!r}; {shown(row['owner'])!r} declares it",
            )
