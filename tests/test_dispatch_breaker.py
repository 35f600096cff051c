"""A node's own circuit breaker on a dispatch: the scheduler's view (here a Slurm `sinfo` answer as the node's
reader gets it) counts more nodes out than the fleet knew, so the node answers 503 `breaker` without filing the
proposal, and the same dispatch (same id, same signature) runs once the view says the nodes are back."""

from __future__ import annotations

import json
from pathlib import Path

from aiops.config_breaker import BreakerConfig
from aiops.store import Store
from guardrails.actuators import RecordingActuator
from guardrails.breaker import SchedulerView
from guardrails.dispatch_request import parse_dispatch
from guardrails.dispatched import NodeDispatch
from guardrails.proposal_desk import Guardrails
from guardrails.scheduler_view import parse_sinfo
from tests.dispatch_helpers import action, body, signed
from tests.signing_helpers import make_keys

SINFO_BUSY = "gpu-a|idle\ngpu-b|drained\ngpu-c|draining\ngpu-d|idle\n"
SINFO_BACK = "gpu-a|idle\ngpu-b|idle\ngpu-c|idle\ngpu-d|idle\n"


def test_a_node_holds_a_drain_its_scheduler_view_stops_and_takes_it_later(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    guardrails = keys.guardrails.model_copy(update={"breaker": BreakerConfig(min_nodes=2)})
    answer = {"text": SINFO_BUSY}

    def view() -> SchedulerView:
        return parse_sinfo(answer["text"])

    with Store(str(tmp_path / "node.duckdb"), guardrails=guardrails) as store:
        store.conn.execute(
            "INSERT INTO topology (component, kind, parent, rack, node, idx) VALUES "
            "('rack-a', 'rack', NULL, 'rack-a', NULL, 0), ('gpu-a', 'node', 'rack-a', 'rack-a', 'gpu-a', 0)"
        )
        drain = action("P-drain-a", target="gpu-a").model_copy(
            update={"kind": "drain_node", "parameters": {}}
        )
        raw = json.dumps(body(drain, [signed(drain, keys.keys["alice"])])).encode()
        guard = Guardrails(store, actuator=RecordingActuator(), scheduler_view=view)
        held = NodeDispatch(guard, "gpu-a").accept(parse_dispatch(raw))
        assert (held.http_status, held.rule) == (503, "breaker"), held
        assert "3 of 4 nodes out of service" in held.message and "gpu-b (slurm: drained)" in held.message
        assert guard.records.proposal("P-drain-a") is None  # not filed: the fleet may send it again
        answer["text"] = SINFO_BACK
        guard = Guardrails(store, actuator=RecordingActuator(), scheduler_view=view)  # a fresh view
        ran = NodeDispatch(guard, "gpu-a").accept(parse_dispatch(raw))
        assert (ran.http_status, ran.status) == (200, "executed"), ran
        refusals = store.query("SELECT payload FROM audit_log WHERE event = 'dispatch_refused'")
        assert [json.loads(r["payload"])["rule"] for r in refusals] == ["breaker"]
