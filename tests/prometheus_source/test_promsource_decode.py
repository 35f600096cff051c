"""The Prometheus source's decode and staging give, on answers with NaN, infinities, DCGM blanks, odd spellings
and hostile labels (tests/prometheus_source/promsource_decode_cases.py), exactly the rows the path before the
columnar staging gave (promsource_fixtures/decode_golden.json, written by that path)."""

from __future__ import annotations

import gc
import json

import pytest

from aiops.sources.prometheus import decoded
from aiops.store import Store
from tests.prometheus_source.promsource_decode_cases import GOLDEN, staged_tables


def test_decoded_and_staged_answers_give_the_rows_the_former_path_gave() -> None:
    with Store(":memory:") as store:
        got = staged_tables(store)
        assert not store.query(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'prom_%'"
        )
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert got["added"] == expected["added"] and got["rows"] == expected["rows"]
    for table in ("topology", "gpu_samples", "gpu_events", "nic_samples"):
        assert got[table] == expected[table], table


def test_the_decode_gives_the_collector_back_as_it_found_it() -> None:
    """The decode holds the cyclic collector off while it parses (aiops/sources/prometheus.py `decoded`): it is
    on again after an answer and after a body that is no JSON, and left off where the caller had turned it off."""
    assert gc.isenabled()
    assert decoded(b'{"status":"success","data":{"result":[]}}')["status"] == "success"
    assert gc.isenabled()
    with pytest.raises(ValueError):
        decoded(b"<html>")
    assert gc.isenabled()
    gc.disable()
    try:
        decoded(b"[1]")
        assert not gc.isenabled()
    finally:
        gc.enable()
