"""The twin's stored run as the timestamped text a TSDB's bulk import reads (`write_history`, built by DuckDB one
text per GPU or NIC): every stored sample of every series comes back from the text with its value and time, each
series in time order, the GPUs in order, and the count it returns is the number of lines. Both spellings:
OpenMetrics (seconds, `# EOF`) and Prometheus text (milliseconds)."""

from __future__ import annotations

import io
import math
import re
from collections import defaultdict

import pytest

from aiops.sources.exposition import write_history
from aiops.sources.names import DCGM_FIELDS, NETDEV_SERIES, XID
from aiops.store import Store
from tests.simkit import run

LINE = re.compile(r"^(\w+)\{(.*)\} (\S+) (\S+)$")


@pytest.fixture(scope="module")
def stored() -> Store:
    return run([{"kind": "gpu_ecc_error", "target": "node0/gpu1", "start_s": 20, "severity": 0.6}])


@pytest.mark.parametrize("openmetrics", [True, False], ids=["openmetrics", "prometheus"])
def test_every_stored_sample_comes_back_from_the_text(stored: Store, openmetrics: bool) -> None:
    out = io.StringIO()
    written = write_history(stored, out, openmetrics=openmetrics)
    lines = out.getvalue().splitlines()
    if openmetrics:
        assert lines.pop() == "# EOF"
    assert written == len(lines) > 0
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    order: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        match = LINE.match(line)
        assert match, line
        name, labels, value, stamp = match.groups()
        ts_s = float(stamp) if openmetrics else int(stamp) / 1000
        series[(name, labels)].append((ts_s, float(value)))
        if not order[name] or order[name][-1] != labels:
            order[name].append(labels)
    for field in DCGM_FIELDS:
        rows = stored.conn.execute(
            f"SELECT gpu, ts_s, {field.column} FROM gpu_samples WHERE {field.column} IS NOT NULL "
            "AND nvml_error IS NULL ORDER BY gpu, ts_s"
        ).fetchall()
        by_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for gpu, ts_s, value in rows:
            by_gpu[gpu].append((ts_s, float(value)))
        got = [series[(field.name, labels)] for labels in order[field.name]]
        assert len(got) == len(by_gpu), field.name
        assert len(set(order[field.name])) == len(order[field.name]), f"{field.name}: a GPU twice"
        for gpu_index, (gpu, want) in enumerate(sorted(by_gpu.items())):
            assert f'device="nvidia{gpu.rsplit("gpu", 1)[1]}"' in order[field.name][gpu_index]
            assert len(got[gpu_index]) == len(want), (field.name, gpu)
            for (ts_got, v_got), (ts_want, v_want) in zip(got[gpu_index], want, strict=True):
                assert v_got == v_want, (field.name, gpu, ts_want)
                assert math.isclose(ts_got, ts_want, abs_tol=0.0 if openmetrics else 0.0005)
    assert any(v > 0 for (name, _), samples in series.items() if name == XID for _, v in samples)
    nics = stored.scalar("SELECT count(*) FROM (SELECT DISTINCT nic, ts_s FROM nic_samples)")
    for netdev in NETDEV_SERIES:
        assert sum(len(s) for (name, _), s in series.items() if name == netdev.name) == nics, netdev.name
