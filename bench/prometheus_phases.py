"""Where `aiops analyze --prometheus`'s peak RSS comes from: the analysis against a Prometheus that already holds
the series (e.g. one `bench/prometheus_source.py` filled, or any other), with this process' RSS sampled every
50 ms (/proc/self/status VmRSS, Linux) and attributed to the phase running: import, fetch (query_range answers
staged into DuckDB), pivot (staged samples into the store's tables), detect, diagnose, remediate (and setup,
between). Prints
{"peak_rss_mb": {phase: MB}, "maxrss_mb", "wall_s": {phase: s} (fetch includes pivot), "top", "source"}; `--out FILE` writes the
analyst's JSON answer (to compare two versions' output).

    .venv/bin/python bench/prometheus_phases.py http://127.0.0.1:9090 1767225600 1767247200
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

_phase = ["import"]
_peaks_mb: dict[str, float] = {}
_wall_s: dict[str, float] = {}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _sample() -> None:
    while True:
        phase = _phase[0]
        _peaks_mb[phase] = max(_peaks_mb.get(phase, 0.0), _rss_mb())
        time.sleep(0.05)


def _timed(phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        outer, _phase[0] = _phase[0], phase
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            _wall_s[phase] = round(_wall_s.get(phase, 0.0) + time.perf_counter() - started, 1)
            _phase[0] = outer if outer not in ("setup", "between") else "between"

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("start")
    parser.add_argument("end")
    parser.add_argument("--out", default=None, help="write the analyst's JSON answer here")
    args = parser.parse_args()
    threading.Thread(target=_sample, daemon=True).start()
    import aiops.cli.analyze_prometheus as cli
    import aiops.pipeline as pipeline
    from aiops.cli.main import main as aiops_main
    from aiops.sources import mapping

    _phase[0] = (
        "setup"  # parsing, the workspace; "between": after a phase, before the next (store reopened, output)
    )
    for module, name, phase in (
        (cli, "fetch_into", "fetch"),
        (mapping.Staging, "finish", "pivot"),
        (pipeline, "detect", "detect"),
        (pipeline, "diagnose", "diagnose"),
        (pipeline, "remediate", "remediate"),
    ):
        setattr(module, name, _timed(phase, getattr(module, name)))
    captured = io.StringIO()
    with redirect_stdout(captured):
        code = aiops_main(
            ["analyze", "--prometheus", args.url, "--start", args.start, "--end", args.end, "--json"]
        )
    time.sleep(0.1)
    answer = json.loads(captured.getvalue()) if code == 0 else {}
    if args.out:
        Path(args.out).write_text(json.dumps(answer, sort_keys=True, default=str))
    top = (answer.get("hypotheses") or [{}])[0]
    print(
        json.dumps(
            {
                "code": code,
                "peak_rss_mb": {k: round(v) for k, v in _peaks_mb.items()},
                "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "wall_s": _wall_s,
                "top": [top.get("root_cause"), top.get("component")],
                "source": answer.get("source"),
            }
        )
    )
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
