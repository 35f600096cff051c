"""Real dcgm-exporter output, verbatim (tests/prometheus_source/promsource_fixtures/SOURCE.md: NVIDIA/dcgm-exporter's README,
commit 00d6d344ea4a39112b211b9ff5af3d97e0bb51c2), through the two readers of Prometheus text the project has:
`aiops investigate`'s parser (aiops.evidence.exposition_sysfs.parse_prometheus) and the Prometheus source's label mapping
(aiops.sources.mapping.Staging, fed the query_range answer a Prometheus that scraped this exposition gives).

What the real text has that the twin's exposition does not: a space after `gpu="0",`, no `Hostname` label (older
releases; the host is then the scrape target's `instance`), the pod-attribution labels, and DCGM's blank value
9223372036854775794 (DCGM_INT64_NOT_SUPPORTED) for a sensor the GPU lacks, which must become no reading."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aiops.evidence.exposition_sysfs import parse_prometheus
from aiops.pipeline import analyze_store
from aiops.sources.mapping import Staging
from aiops.store import Store

FIXTURES = Path(__file__).parent / "promsource_fixtures"
FILES = ("dcgm-exporter-readme.prom", "dcgm-exporter-readme-k8s.prom")
UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
TARGET = {"instance": "gpu-node-7:9400", "job": "dcgm"}  # the labels Prometheus attaches to a scraped series
SCRAPED_S = (1_767_225_600.0, 1_767_225_615.0, 1_767_225_630.0)


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _go_float(value: float) -> str:
    """A sample value as Prometheus' API writes it (Go strconv.FormatFloat(v, 'f', -1, 64))."""
    return format(Decimal(repr(value)), "f")


def _query_range_answers(text: str) -> dict[str, list[dict[str, Any]]]:
    """Per metric, the `result` of a query_range over three scrapes of this exposition (parsed by
    prometheus_client's parser, an implementation independent of ours; values stored as float64)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            metric = {"__name__": sample.name, **sample.labels, **TARGET}
            values = [[ts, _go_float(float(sample.value))] for ts in SCRAPED_S]
            out.setdefault(sample.name, []).append({"metric": metric, "values": values})
    return out


@pytest.mark.parametrize("name", FILES)
def test_investigate_parser_reads_the_real_exposition(name: str) -> None:
    text = _text(name)
    events = list(parse_prometheus(name, enumerate(text.splitlines(), start=1)))
    assert None not in events  # every line recognised
    samples = [e for e in events if e is not None and e.kind != "prom_meta"]
    assert [(e.detail["metric"], e.component, e.value, e.host) for e in samples] == [
        ("DCGM_FI_DEV_SM_CLOCK", "GPU0", 139.0, None),
        ("DCGM_FI_DEV_MEM_CLOCK", "GPU0", 405.0, None),
        ("DCGM_FI_DEV_MEMORY_TEMP", "GPU0", None, None),  # DCGM's "not supported": no reading
    ]
    assert [e.line for e in samples] == [7, 8, 9] and all(e.raw in text for e in samples)
    assert sum(1 for e in events if e is not None and e.kind == "prom_meta") == 6


@pytest.mark.parametrize("name", FILES)
def test_prometheus_source_maps_the_real_exposition(name: str, tmp_path: Path) -> None:
    answers = _query_range_answers(_text(name))
    assert answers["DCGM_FI_DEV_MEMORY_TEMP"][0]["values"][0][1] == "9223372036854776000"
    with Store(tmp_path / "w.duckdb") as store:
        staging = Staging(store)
        staged = sum(staging.add(metric, result) for metric, result in answers.items())
        rows = staging.finish({})
        topology = store.query(
            "SELECT component, kind, node FROM topology WHERE kind IN ('node', 'gpu') ORDER BY 1"
        )
        samples = store.query(
            "SELECT ts_s, gpu, node, uuid, sm_clock_mhz, mem_clock_mhz, mem_temp_c FROM gpu_samples ORDER BY ts_s"
        )
        result = analyze_store(store)
    assert staged == 9 and rows["gpu_samples"] == 3
    # the host is the scrape target without its port (no Hostname label in this release): a host keeps its own
    # name (issue 25: components are named after the host); the GPU is its `gpu` label
    assert topology == [
        {"component": "gpu-node-7", "kind": "node", "node": "gpu-node-7"},
        {"component": "gpu-node-7/gpu0", "kind": "gpu", "node": "gpu-node-7"},
    ]
    assert samples == [
        {
            "ts_s": ts,
            "gpu": "gpu-node-7/gpu0",
            "node": "gpu-node-7",
            "uuid": UUID,
            "sm_clock_mhz": 139.0,
            "mem_clock_mhz": 405.0,
            "mem_temp_c": None,
        }
        for ts in SCRAPED_S
    ]
    assert result.incidents == []  # idle clocks and a missing sensor are not a fault


def test_a_blank_counter_is_no_reading_not_an_overflow(tmp_path: Path) -> None:
    """The same blank on a counter column (an ECC counter on a GPU without ECC) was cast to BIGINT: overflow."""
    text = _text(FILES[0]).replace("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    with Store(tmp_path / "w.duckdb") as store:
        staging = Staging(store)
        for metric, result in _query_range_answers(text).items():
            staging.add(metric, result)
        staging.finish({})
        assert store.query("SELECT DISTINCT ecc_dbe_total, sm_clock_mhz FROM gpu_samples") == [
            {"ecc_dbe_total": None, "sm_clock_mhz": 139.0}
        ]
