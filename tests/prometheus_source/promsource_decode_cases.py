"""query_range answers, as the bytes a server sends, that the Prometheus source's decode and staging must read
exactly as the path before the columnar one did (tests/prometheus_source/test_promsource_decode.py; the rows that
path gave are promsource_fixtures/decode_golden.json, written by `python -m
tests.prometheus_source.promsource_decode_cases` at the commit before the change).

What they hold: integer and fractional timestamps, NaN (a stale marker's value), +Inf and -Inf, DCGM's blank
values, a counter that resets, an XID that changes, virtual and real NICs, and hostile labels: terminal escapes,
a megabyte host, a non-digit `gpu`, a label whose value spells `"values":[[...]]`, escaped characters in keys and
values, and samples whose values are not Prometheus' spelling (`1_000`, ` 7 `, `0x10`, `1e3`, `inf`, a number
instead of a string, null); two UUIDs for one GPU at the same times, a GPU with none, a series with no samples."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from aiops.sources.names import XID

GOLDEN = Path(__file__).parent / "promsource_fixtures" / "decode_golden.json"
TABLES = ("topology", "gpu_samples", "gpu_events", "nic_samples")


def _go(value: float) -> str:
    """A value as Prometheus writes it (NaN, +Inf, -Inf, else the shortest decimal)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _gpu(host: str, gpu: str, uuid: str, **extra: str) -> dict[str, str]:
    return {"Hostname": host, "gpu": gpu, "UUID": uuid, "modelName": "NVIDIA H100 80GB HBM3", **extra}


def _steps(values: list[Any], start: float = 1_767_225_600, step: float = 15) -> list[list[Any]]:
    return [[start + step * i if i % 3 else int(start + step * i), v] for i, v in enumerate(values)]


def answers() -> list[tuple[str, bytes]]:
    """(metric name, the answer's body) in the order a fetch asks them."""
    temp = [_go(v) for v in (61.5, 62.0, math.nan, 63.25, math.inf, 64.0, -math.inf, 65.125)]
    series: dict[str, list[dict[str, Any]]] = {
        "DCGM_FI_DEV_GPU_TEMP": [
            {"metric": _gpu("gpu-a", "0", "GPU-aaaa-0"), "values": _steps(temp)},
            {"metric": _gpu("gpu-a", "1", "GPU-aaaa-1"), "values": _steps([_go(70.0 + i) for i in range(8)])},
            {"metric": _gpu("10.0.0.7", "0", "GPU-ip-0"), "values": _steps([_go(50.5)] * 8)},
            # hostile: terminal escapes in the host, a non-digit gpu, a megabyte host, a label spelling values
            {"metric": _gpu("\x1b[2J../node9", "2", "GPU-esc"), "values": _steps(["71"] * 4)},
            {"metric": _gpu("gpu-a", "\u00b2", "GPU-sq"), "values": _steps(["72"] * 4)},
            {"metric": _gpu("h" * (1 << 20), "0", "GPU-huge"), "values": _steps(["73"] * 4)},
            {
                "metric": _gpu("gpu-b", "0", 'GPU-"values":[[1,"2"]]', note='"values":[[1,"999"]]'),
                "values": _steps(["74", "75", "76"]),
            },
            {"metric": {**_gpu("gpu-b", "1", "GPU-bbbb-1"), 'v\u00e9\\"': "\t\u2028"}, "values": []},
        ],
        "DCGM_FI_DEV_POWER_USAGE": [
            {"metric": _gpu("gpu-a", "0", "GPU-aaaa-0"), "values": _steps(["300.5", "1_000", " 7 ", "0x10"])},
            {"metric": _gpu("gpu-a", "1", "GPU-aaaa-1"), "values": _steps(["1e3", "inf", "-0", "2.5E-3"])},
            {"metric": _gpu("gpu-b", "0", "GPU-bbbb-0"), "values": _steps([310, None, "nan", "312"])},
        ],
        "DCGM_FI_DEV_MEMORY_TEMP": [
            # DCGM's blanks (dcgm_structs.h): int64 and int32 not-supported, fp64 blank
            {
                "metric": _gpu("gpu-a", "0", "GPU-aaaa-0"),
                "values": _steps(["9223372036854775794", "2147483632", "140737488355328", "45"]),
            },
            # a second UUID for a GPU at the same times (the row keeps the largest), a GPU without one
            {"metric": _gpu("gpu-a", "1", "GPU-0000-1"), "values": _steps(["40", "41"])},
            {"metric": {"Hostname": "gpu-b", "gpu": "1"}, "values": _steps(["42", "43"])},
        ],
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": [
            {"metric": _gpu("gpu-a", "0", "GPU-aaaa-0"), "values": _steps(["0", "64", "64", "0"])},
        ],
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": [
            {"metric": _gpu("gpu-a", "0", "GPU-aaaa-0"), "values": _steps(["8", "8", "0", "0"])},
            {"metric": _gpu("gpu-a", "1", "GPU-aaaa-1"), "values": _steps(["0", "1", "0", "1"])},
        ],
        XID: [
            {
                "metric": _gpu("gpu-a", "1", "GPU-aaaa-1"),
                "values": _steps(["0", "0", "79", "79", "13", "NaN"]),
            },
        ],
        "node_network_transmit_bytes_total": [
            {
                "metric": {"instance": "gpu-a:9100", "device": "eth0"},
                "values": _steps(["100", "250", "50", "90"]),
            },
            {"metric": {"instance": "gpu-a:9100", "device": "veth12"}, "values": _steps(["1", "2"])},
            {"metric": {"instance": "[fe80::1]:9100", "device": "ib0"}, "values": _steps(["0", "NaN", "5"])},
            {"metric": {"instance": "gpu-b:9100", "device": "d" * 70}, "values": _steps(["1"])},
        ],
        "node_network_up": [
            {"metric": {"instance": "gpu-a:9100", "device": "eth0"}, "values": _steps(["1", "1", "0", "1"])},
        ],
    }
    out = []
    for name, result in series.items():
        for one in result:
            one["metric"] = {"__name__": name, **one["metric"]}
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        out.append((name, json.dumps(body, separators=(",", ":")).encode()))
    return out


def staged_tables(store: Any) -> dict[str, Any]:
    """Each answer decoded by PrometheusClient's decode and staged, then pivoted: what each add returned and
    every row of the analyst's tables (NaN as the text 'nan', so the comparison sees it)."""
    from aiops.sources.mapping import Staging
    from aiops.sources.prometheus import decoded_matrix

    staging = Staging(store)
    added = [staging.add(name, decoded_matrix(body)) for name, body in answers()]
    rows = staging.finish({})
    out: dict[str, Any] = {"added": added, "rows": rows}
    for table in TABLES:
        found = store.conn.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
        out[table] = [[_plain(v) for v in row] for row in found]
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return repr(value)
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


if __name__ == "__main__":
    from aiops.store import Store

    with Store(":memory:") as memory:
        GOLDEN.write_text(json.dumps(staged_tables(memory), indent=0, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
