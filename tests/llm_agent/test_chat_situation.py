"""Issue 38, item 4, the parts a twin run does not produce: on the fleet, a node agent's own open incident (read
from its exports) is listed with the fleet incident covering it, and one nobody covers on its own; a condition
(a node agent lost) is an open incident touching its node and rack, said as the product's sight, not a fault;
a resolved incident is no longer open. Asked as people ask, through the analyst, over a hand-made workspace
whose every row is known."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from aiops.agent.analyst import Analyst
from aiops.pipeline import stored_diagnoses
from aiops.store import Store
from aiops.store.conditions import condition_incident

NOW_S = 1_800_000_000.0


def _incident(store: Store, incident_id: str, components: list[str], severity: str, **extra: object) -> None:
    store.conn.execute(
        "INSERT INTO incidents (incident_id, opened_ts_s, last_ts_s, title, severity, components, symptoms, "
        "resolved_ts_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            incident_id,
            NOW_S - 600,
            NOW_S,
            str(extra.get("title", f"trouble on {components[0]}")),
            severity,
            components,
            str(extra.get("symptoms", "[]")),
            extra.get("resolved_ts_s"),
        ],
    )


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(":memory:") as s:
        s.conn.execute(
            "INSERT INTO topology (component, kind, parent, rack, node) VALUES ('fleet', 'fleet', NULL, NULL, NULL),"
            "('rack0', 'rack', 'fleet', 'rack0', NULL), ('rack1', 'rack', 'fleet', 'rack1', NULL),"
            "('gpu-a', 'node', 'rack0', 'rack0', 'gpu-a'), ('gpu-b', 'node', 'rack1', 'rack1', 'gpu-b'),"
            "('gpu-c', 'node', 'rack1', 'rack1', 'gpu-c'), ('gpu-b/gpu0', 'gpu', 'gpu-b', 'rack1', 'gpu-b'),"
            "('gpu-c/gpu3', 'gpu', 'gpu-c', 'rack1', 'gpu-c')"
        )
        s.conn.execute(
            "INSERT INTO gpu_samples (ts_s, gpu, node, temp_c) VALUES (?, 'gpu-b/gpu0', 'gpu-b', 80)", [NOW_S]
        )
        s.conn.execute(
            "INSERT INTO hypotheses VALUES ('INC-fleet-0001', 1, 'thermal_throttle', 'gpu-b/gpu0', 0.9, 'hot', '[]')"
        )
        _incident(s, "INC-fleet-0001", ["gpu-b/gpu0"], "warning")
        _incident(s, "INC-fleet-0002", ["gpu-a"], "critical", resolved_ts_s=NOW_S - 60)  # resolved: not open
        lost = condition_incident(
            "INC-fleet-0003",
            "node_agent_lost",
            "gpu-c",
            since_ts_s=NOW_S - 120,
            opened_ts_s=NOW_S - 90,
            title="node agent lost on gpu-c",
            severity="warning",
            detail={},
        )
        symptoms = json.dumps([x.model_dump(mode="json") for x in lost.symptoms])
        _incident(s, "INC-fleet-0003", ["gpu-c"], "warning", title=lost.title, symptoms=symptoms)
        for node, incident, component in (
            ("gpu-b", "INC-gpu-b-0007", "gpu-b/gpu0"),
            ("gpu-c", "INC-gpu-c-0002", "gpu-c/gpu3"),
        ):
            s.conn.execute(
                "INSERT INTO node_incident_samples VALUES (?, ?, ?, ?, 'thermal_throttle', 'warning')",
                [NOW_S - 30, node, incident, component],
            )
        s.conn.execute(  # the fleet covers gpu-b's own incident (one page per problem)
            "INSERT INTO incident_pages VALUES ('gpu-b', 'INC-gpu-b-0007', ?, false, 'covered', 'INC-fleet-0001', "
            "NULL, ?, NULL)",
            [NOW_S - 30, NOW_S - 30],
        )
        yield s


def _analyst(store: Store) -> Analyst:
    analyst = Analyst(stored_diagnoses(store))

    class _Read:
        def __enter__(self) -> Store:
            return store

        def __exit__(self, *exc: object) -> None:
            return None

    analyst.read = _Read
    return analyst


def test_a_rack_lists_the_node_agents_incidents_and_conditions_on_its_nodes(store: Store) -> None:
    answer = _analyst(store).answer("is rack1 ok?")
    lines = answer.text.splitlines()
    assert lines[0] == "rack1: NOT OK: 4 open incidents touch it, most urgent first:", answer.text
    said = "\n".join(lines[1:5])
    assert "INC-fleet-0001 (warning) on gpu-b/gpu0" in said
    assert (
        "INC-gpu-b-0007 (warning, gpu-b's own) on gpu-b/gpu0" in said and "covered by INC-fleet-0001" in said
    )
    assert "INC-gpu-c-0002 (warning, gpu-c's own) on gpu-c/gpu3" in said  # nobody covers it: its own word
    assert "INC-fleet-0003 (warning) on gpu-c" in said and "node_agent_lost: the product's own sight" in said
    assert "INC-fleet-0002" not in answer.text  # resolved before the newest telemetry
    first = answer.text.index("INC-fleet-0001 (warning) on")
    assert (
        first < answer.text.index("INC-gpu-b-0007") < answer.text.index("INC-gpu-c-0002")
    )  # covered under its cover
    assert "rack0: OK" in _analyst(store).answer("is rack0 ok").text.splitlines()[0]


def test_whats_wrong_ranks_them_all(store: Store) -> None:
    text = _analyst(store).answer("what's wrong").text
    assert text.startswith("4 open incidents (4 warning), most urgent first:"), text
    assert "INC-fleet-0002" not in text.split("The most urgent")[0]
