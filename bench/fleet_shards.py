"""Every shard at once (bench/fleet.py `--all-at-once`, issue 40 item 4): N real `aiops fleet` processes, one per
shard of whole racks (each its own workspace, `[fleet] selector`, `shard` and the same `[fleet] shards` table, so
a condition they all see pages once between them), against the one VictoriaMetrics that holds every shard's
series, on the bench's clock paced `--pace` times slower than the wall (bench/paced.py: a 15 s step every
pace × 15 s of wall; the process's every clock and wait runs on it), with a site-wide DCIM cap in the data
(bench/fleet_cap.py) besides the one hot GPU, each shard's pages to a loopback webhook that counts them.

The shards start side by side and read their first look-back while the bench clock stands; once every one is
ready (/readyz) the clock runs, and every step of it this module samples each shard's CPU seconds and RSS and the
store's CPU seconds (/proc). A shard's cores are its CPU seconds per 15 s of the bench's clock: what it would
spend a step in real time. Then, with all of them still running: the hot GPU's incident and the bench time it
first showed on its shard's /api (the fault shard's /api is asked once a wall second until then), every
shard's decision on the cap's page and the pages the webhook got, `aiops fleet-view` across all the shards (its
CPU, wall, requests and bytes), and what the shards' asking each other costs (requests a window, bytes)."""

from __future__ import annotations

import itertools
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench import victoria
from bench.fleet_cap import document
from bench.fleet_exports import GPUS_PER_NODE, NODES_PER_RACK, build, shard_of

PACED = Path(__file__).resolve().parent / "paced.py"
REPO = Path(__file__).resolve().parents[1]
SETTLE_STEPS = 8  # bench steps after the cycles for every shard to settle the cap's page
READY_TIMEOUT_S = 3600.0  # wall: every shard's first look-back read, all at once
# the DCIM document asks for the site's cap as the bench clock starts (after the look-back read), the GPU goes hot
# `--fault-cycle` steps later and the limits come down CAP_AFTER_FAULT steps after that: the cap's incident is open
# before the hot GPU's (a cap asked while the hot GPU's incident is open joins that incident and takes its top
# hypothesis: docs/BENCHMARKS.md "Every shard at once")
CAP_AFTER_FAULT = 4


def shard_name(k: int) -> str:
    return chr(ord("a") + k)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return 0.0


def _get(url: str, timeout_s: float = 30.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return int(reply.status), reply.read()
    except OSError:
        return 0, b""


class PageSink:
    """A loopback webhook (`[[notify.webhooks]] kind = "json"`): every POST's body, by the path it came to."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with suppress(ValueError), lock:
                    received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> PageSink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def pages(self) -> list[dict[str, Any]]:
        """One row per incident that paged: its shard, id, first event and its newest top hypothesis."""
        out: dict[str, dict[str, Any]] = {}
        for path, body in list(self.received):
            incident = body.get("incident") or {}
            top = body.get("top_hypothesis") or {}
            row = out.setdefault(
                str(incident.get("id")),
                {"shard": path.rsplit("/", 1)[-1], "incident": incident.get("id"), "events": []},
            )
            row["events"].append(body.get("event"))
            if top:
                row["cause"] = [top.get("root_cause"), top.get("component")]
        return list(out.values())


def _config(home: Path, name: str, ports: dict[str, int], dcim: Path, sink: str) -> Path:
    shards = ", ".join(f'{n} = "http://127.0.0.1:{p}"' for n, p in ports.items())
    path = home / "aiops.toml"
    path.write_text(
        f'[fleet]\nshard = "{name}"\nshards = {{{shards}}}\n[facility]\ndcim = "{dcim}"\n'
        f'[[notify.webhooks]]\nkind = "json"\nurl = "{sink}/hook/{name}"\n'
        '[notify.severity]\npage_from = "info"\n'  # every incident pages: the count is the point
    )
    return path


@contextmanager
def shard_processes(
    work: Path, url: str, plan: dict[str, Any], sink: str
) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], int, Path]]]:
    """Every shard's `aiops fleet` on the paced clock (name -> process, port, home), stopped after (SIGTERM,
    then SIGKILL), each by its PID."""
    names = [shard_name(k) for k in range(int(plan["shards"]))]
    ports = {name: victoria.free_port() for name in names}
    dcim = work / "dcim.json"
    dcim.write_text("{}")  # no cap asked yet: `_cycles` writes the document when the DCIM asks
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
    try:
        for k, name in enumerate(names):
            home = work / f"shard-{name}"
            home.mkdir()
            config = _config(home, name, ports, dcim, sink)
            command = [
                *(
                    sys.executable,
                    str(PACED),
                    "--start-s",
                    repr(plan["clock0_s"]),
                    "--pace",
                    str(plan["pace"]),
                ),
                *("--go", str(work / "go"), "--", "fleet", "--config", str(config)),
                *("--db", str(home / "fleet.duckdb")),
                *("--listen", f"127.0.0.1:{ports[name]}", "--prometheus", url, "--selector", f'shard="{k}"'),
                *("--step", f"{plan['step_s']:g}s", "--delay", f"{plan['delay_s']:g}s"),
                *("--lookback", f"{plan['lookback_s']:g}s"),
            ]
            with (home / "fleet.log").open("ab") as log:
                procs[name] = (
                    subprocess.Popen(
                        command,
                        stdout=log,
                        stderr=log,
                        cwd=REPO,
                        env={**env, "HOME": str(home)},
                        preexec_fn=victoria._die_with_parent,
                    ),
                    ports[name],
                    home,
                )
        yield procs
    finally:
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _, _ in procs.values():
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _incidents(port: int) -> list[dict[str, Any]]:
    status, body = _get(f"http://127.0.0.1:{port}/api/incidents")
    if status != 200:
        return []
    found = json.loads(body).get("incidents")
    return found if isinstance(found, list) else []


def _top(incident: dict[str, Any]) -> tuple[str, str] | None:
    top = incident.get("top_hypothesis") or {}
    return (str(top.get("root_cause")), str(top.get("component"))) if top else None


def _wait_ready(procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]]) -> float:
    started = time.monotonic()
    waiting = set(procs)
    while waiting:
        if time.monotonic() - started > READY_TIMEOUT_S:
            raise RuntimeError(f"shards {sorted(waiting)} not ready in {READY_TIMEOUT_S:g} s")
        for name in sorted(waiting):
            proc, port, home = procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"shard {name} exited: {(home / 'fleet.log').read_text()[-3000:]}")
            if _get(f"http://127.0.0.1:{port}/readyz", 5.0)[0] == 200:
                waiting.discard(name)
        time.sleep(1.0)
    return time.monotonic() - started


def run_at_once(gpus: int, args: Any, start_s: float, clock_past_s: float) -> dict[str, Any]:
    """All `args.shards` shards of `gpus` GPUs at once (module doc); one JSON-able dict."""
    from bench.fleet import import_exports

    step_s, pace, shards = float(args.step_s), float(args.pace), int(args.shards)
    clock0_s = start_s + step_s + args.lookback_s + args.delay_s + clock_past_s
    first_end_s = (clock0_s - args.delay_s) // step_s * step_s
    fault_ts_s = first_end_s + args.fault_cycle * step_s
    cap_ts_s = fault_ts_s + CAP_AFTER_FAULT * step_s
    last_s = first_end_s + (args.cycles + SETTLE_STEPS + 4) * step_s  # data past the last settle step
    exports = build(gpus, step_s, start_s, fault_ts_s, shards=shards, cap_ts_s=cap_ts_s)
    nodes_per_shard = exports.nodes // shards
    fault_node = int(exports.fault_gpu.split("/")[0].rsplit("-", 1)[1]) - 1
    fault_shard = shard_name(shard_of(fault_node, nodes_per_shard))
    scrapes = round((last_s - start_s) / step_s) + 1
    plan = {
        "shards": shards,
        "clock0_s": clock0_s,
        "pace": pace,
        "step_s": step_s,
        "delay_s": args.delay_s,
        "lookback_s": args.lookback_s,
        "dcim": document(exports.nodes // NODES_PER_RACK, NODES_PER_RACK, GPUS_PER_NODE),
    }
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aiops-bench-shards-")))
        url, vm = stack.enter_context(victoria.serving(work))
        import_s, generate_s = import_exports(url, exports, scrapes)
        sink = stack.enter_context(PageSink())
        procs = stack.enter_context(shard_processes(work, url, plan, sink.url))
        vm0 = _cpu_s(vm.pid)
        ready_wall_s = _wait_ready(procs)
        start = {name: _cpu_s(p.pid) for name, (p, _, _) in procs.items()}
        vm_start_cpu_s = _cpu_s(vm.pid) - vm0
        go_wall_s = time.time()
        (work / "go").write_text(repr(go_wall_s))

        def bench_s() -> float:
            return clock0_s + (time.time() - go_wall_s) / pace

        announce = (work / "dcim.json", plan["dcim"], clock0_s)
        steps = _cycles(procs, vm.pid, args, go_wall_s, (fault_shard, exports.fault_gpu), announce, bench_s)
        settle = _settle(procs, SETTLE_STEPS * step_s * pace)
        view = _view(procs)
        peers = _peer_cost(procs, steps)
        pages = sink.pages()
        rss_end = {name: _status_mb(p.pid, "VmRSS:") for name, (p, _, _) in procs.items()}
        hwm = {name: _status_mb(p.pid, "VmHWM:") for name, (p, _, _) in procs.items()}
        vm_hwm_mb = _status_mb(vm.pid, "VmHWM:")
        bench_end_s = bench_s()
    return _figures(
        gpus,
        exports,
        shards,
        steps,
        start,
        vm_start_cpu_s,
        ready_wall_s,
        hwm,
        rss_end,
        vm_hwm_mb,
        settle,
        view,
        peers,
        pages,
        fault_ts_s,
        cap_ts_s,
        fault_shard,
        clock0_s,
        bench_end_s,
        import_s,
        generate_s,
        args,
    )


def _cycles(
    procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]],
    vm_pid: int,
    args: Any,
    go_wall_s: float,
    fault: tuple[str, str],
    announce: tuple[Path, dict[str, Any], float],
    bench_s: Callable[[], float],
) -> dict[str, Any]:
    """Each bench step's CPU seconds of every shard and of the store, the RSS of each and summed, the load;
    and when the hot GPU's incident first showed (and was diagnosed) on its shard's /api, on the bench clock."""
    cpu = {name: [_cpu_s(p.pid)] for name, (p, _, _) in procs.items()}
    vm = [_cpu_s(vm_pid)]
    rss_sum: list[float] = []
    load: list[float] = []
    late: list[float] = []  # how late each sample was taken (the bench's own lag)
    unready = dict.fromkeys(
        procs, 0
    )  # samples at which a shard's /readyz said no (blind, or behind the clock)
    seen: dict[str, Any] = {}
    fault_shard, fault_gpu = fault
    cycles, step_s, pace = int(args.cycles), float(args.step_s), float(args.pace)
    port = procs[fault_shard][1]
    dcim, asked, ask_at_s = announce
    for j in range(cycles):
        # sampled half a step after the reads' phase: each interval holds one read
        until = go_wall_s + (j + 0.5) * step_s * pace
        while until - time.time() > 0:
            if bench_s() >= ask_at_s and "dcim_asked_bench_s" not in seen:
                dcim.write_text(json.dumps(asked))  # what the shards read at the end of their next cycle
                seen["dcim_asked_bench_s"] = round(bench_s(), 1)
            if "diagnosed_bench_s" not in seen:
                _watch_fault(port, fault_gpu, seen, bench_s)
            time.sleep(min(1.0, max(0.0, until - time.time())))
        for name, (p, _, home) in procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"shard {name} exited: {(home / 'fleet.log').read_text()[-3000:]}")
            cpu[name].append(_cpu_s(p.pid))
        for name, (_, shard_port, _) in procs.items():
            unready[name] += _get(f"http://127.0.0.1:{shard_port}/readyz", 5.0)[0] != 200
        vm.append(_cpu_s(vm_pid))
        rss_sum.append(sum(_status_mb(p.pid, "VmRSS:") for p, _, _ in procs.values()))
        load.append(os.getloadavg()[0])
        late.append(time.time() - until)
        progress = {  # one line a step on stderr: what a run stopped early still leaves
            "step": j,
            "utc": time.strftime("%H:%M:%S", time.gmtime()),
            "bench_s": round(bench_s(), 1),
            "cpu_s": {name: round(series[-1], 1) for name, series in cpu.items()},
            "vm_cpu_s": round(vm[-1], 1),
            "hwm_mb": {name: round(_status_mb(p.pid, "VmHWM:"), 1) for name, (p, _, _) in procs.items()},
            "load": round(load[-1], 2),
            "unready": unready,
            "fault": seen,
        }
        print(json.dumps(progress), file=sys.stderr, flush=True)
    return {
        "cpu": cpu,
        "vm": vm,
        "rss_sum": rss_sum,
        "load": load,
        "fault": seen,
        "step_wall_s": step_s * pace,
        "sample_late_s_max": round(max(late), 2) if late else None,
        "unready": unready,
    }


def _watch_fault(port: int, fault_gpu: str, seen: dict[str, Any], bench_s: Callable[[], float]) -> None:
    for incident in _incidents(port):
        if (
            fault_gpu not in (incident.get("components") or [])
            and (_top(incident) or ("", ""))[1] != fault_gpu
        ):
            continue
        seen.setdefault("shown_bench_s", bench_s())
        seen.setdefault("incident", incident.get("incident_id"))
        seen.setdefault("opened_ts_s", incident.get("opened_ts_s"))
        if _top(incident):
            seen["diagnosed_bench_s"] = bench_s()
            seen["top"] = list(_top(incident) or ())


def _settle(procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]], limit_s: float) -> dict[str, Any]:
    """Every shard's open incident of the site's cap once each settled its page (paged, or `elsewhere`)."""
    started = time.monotonic()
    decisions: dict[str, Any] = {}
    while time.monotonic() - started < limit_s:
        decisions = {}
        for name, (_, port, _) in procs.items():
            for incident in _incidents(port):
                if _top(incident) == ("facility_power_cap", "fleet") and incident.get("status") == "open":
                    decisions[name] = {
                        "incident": incident.get("incident_id"),
                        "paging": incident.get("paging"),
                    }
        settled = [
            d
            for d in decisions.values()
            if (d["paging"] or {}).get("paged_ts_s") is not None
            or (d["paging"] or {}).get("reason") == "elsewhere"
        ]
        if len(decisions) == len(procs) and len(settled) == len(procs):
            break
        time.sleep(5.0)
    return {"wall_s": round(time.monotonic() - started, 1), "cap": decisions}


def _view(procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]]) -> dict[str, Any]:
    """`aiops fleet-view --json` across every shard: what it shows and what it cost."""
    given = [
        a for name, (_, port, _) in procs.items() for a in ("--shard", f"{name}=http://127.0.0.1:{port}")
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    home = next(iter(procs.values()))[2]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    shards_cpu0 = sum(_cpu_s(p.pid) for p, _, _ in procs.values())
    (home / "view.toml").write_text("")
    t0 = time.monotonic()
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiops.cli.main",
            "fleet-view",
            "--config",
            str(home / "view.toml"),
            "--json",
            *given,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
        env={**env, "HOME": str(home)},
    )
    wall_s = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shards_cpu_s = sum(_cpu_s(p.pid) for p, _, _ in procs.values()) - shards_cpu0
    if shown.returncode != 0:
        raise RuntimeError(f"fleet-view failed: {shown.stderr[-3000:]}")
    view = json.loads(shown.stdout)
    answers = {
        name: [len(_get(f"http://127.0.0.1:{port}/api/{what}")[1]) for what in ("incidents", "proposals")]
        for name, (_, port, _) in procs.items()
    }
    return {
        "view": view,
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "wall_s": round(wall_s, 2),
        "shards_cpu_s_meanwhile": round(shards_cpu_s, 2),
        "requests": 2 * len(procs),
        "bytes": sum(sum(sizes) for sizes in answers.values()),
        "answer_bytes": answers,
    }


def _peer_cost(
    procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]], steps: dict[str, Any]
) -> dict[str, Any]:
    """What the shards' asking each other costs: each asks every other's /api/incidents once a window. Bytes
    from the answers' sizes now; a shard's CPU to answer one from ten answers in a row, less what it spends
    meanwhile anyway (its mean rate over the run); the asking side's from parsing the answers here. Asked as
    the shards ask (`PEER_QUERY`: the open ones); each answer's wall time, and how many came from a shard's last
    read while its flush kept the workspace (`stale`)."""
    from aiops.fleet.peer_pages import PEER_QUERY, peer_incidents

    sizes: dict[str, int] = {}
    answer_cpu: dict[str, float] = {}
    answer_wall: dict[str, list[float]] = {}
    stale: dict[str, int] = {}
    parse_cpu_s = 0.0
    for name, (proc, port, _) in procs.items():
        series = steps["cpu"][name]
        per_wall_s = (series[-1] - series[1]) / max(1, len(series) - 2) / steps["step_wall_s"]
        cpu0, t0 = _cpu_s(proc.pid), time.monotonic()
        bodies = []
        for _ in range(10):
            asked = time.monotonic()
            bodies.append(_get(f"http://127.0.0.1:{port}/api/incidents?{PEER_QUERY}")[1])
            answer_wall.setdefault(name, []).append(time.monotonic() - asked)
        stale[name] = sum(1 for b in bodies if b and json.loads(b).get("stale") is True)
        spent = _cpu_s(proc.pid) - cpu0
        sizes[name] = len(bodies[-1])
        answer_cpu[name] = max(0.0, spent - per_wall_s * (time.monotonic() - t0)) / 10
        c0 = time.process_time()
        peer_incidents(name, json.loads(bodies[-1]))
        parse_cpu_s += time.process_time() - c0
    n = len(procs)
    return {
        "requests_per_window": n * (n - 1),
        "bytes_per_window": sum(sizes[m] * (n - 1) for m in sizes),
        "answer_bytes": sizes,
        "answer_cpu_s": {k: round(v, 4) for k, v in answer_cpu.items()},
        "answer_wall_s_max": {k: round(max(v), 3) for k, v in answer_wall.items()},
        "answers_stale": stale,
        "ask_parse_cpu_s_per_window": round(parse_cpu_s * (n - 1), 4),
    }


def _per_step(series: list[float]) -> list[float]:
    """CPU seconds in each whole step (the first interval, from the go to the first sample, is half a step)."""
    return [round(b - a, 3) for a, b in itertools.pairwise(series[1:])]


def _figures(
    gpus: int,
    exports: Any,
    shards: int,
    steps: dict[str, Any],
    start: dict[str, float],
    vm_start_cpu_s: float,
    ready_wall_s: float,
    hwm: dict[str, float],
    rss_end: dict[str, float],
    vm_hwm_mb: float,
    settle: dict[str, Any],
    view: dict[str, Any],
    peers: dict[str, Any],
    pages: list[dict[str, Any]],
    fault_ts_s: float,
    cap_ts_s: float,
    fault_shard: str,
    clock0_s: float,
    bench_end_s: float,
    import_s: float,
    generate_s: float,
    args: Any,
) -> dict[str, Any]:
    from bench.fleet import TARGET_CORES, TARGET_RSS_MB

    step_s = float(args.step_s)
    rows = []
    for name in sorted(steps["cpu"]):
        per = _per_step(steps["cpu"][name])
        rows.append(
            {
                "shard": name,
                "cores": round(statistics.fmean(per) / step_s, 3) if per else None,
                "cpu_s_per_step": {"median": statistics.median(per), "max": max(per)} if per else None,
                "start_cpu_s": round(start[name], 1),  # start-up and the first look-back read
                "peak_rss_mb": round(hwm[name], 1),
                "rss_end_mb": round(rss_end[name], 1),
                "unready_samples": steps["unready"][name],
            }
        )
    vm_per = _per_step(steps["vm"])
    fault = steps["fault"]
    shown = fault.get("shown_bench_s")
    listed = view["view"].get("incidents") or []
    caps = [i for i in listed if _top(i) == ("facility_power_cap", "fleet")]
    hot = [i for i in listed if exports.fault_gpu in (_top(i) or ("", ""))[1]]
    others = [
        [i.get("incident_id"), i.get("title"), list(_top(i) or ())]
        for i in listed
        if i not in caps and i not in hot
    ]
    cap_pages = [p for p in pages if p.get("cause") == ["facility_power_cap", "fleet"]]
    hot_pages = [p for p in pages if exports.fault_gpu in (p.get("cause") or ["", ""])[1]]
    cores = [r["cores"] for r in rows if r["cores"] is not None]
    latency_s = None if shown is None else round(float(shown) - fault_ts_s, 1)
    return {
        "gpus": gpus,
        "nodes": exports.nodes,
        "series": exports.series,
        "shards": shards,
        "pace": args.pace,
        "generate_s": round(generate_s, 1),
        "import_s": round(import_s, 1),
        "ready_wall_s": round(ready_wall_s, 1),
        "store_start_cpu_s": round(vm_start_cpu_s, 1),
        "bench_clock": {"start_s": clock0_s, "end_s": round(bench_end_s, 1), "steps": len(vm_per)},
        "per_shard": rows,
        "cores_max": max(cores) if cores else None,
        "cores_sum": round(sum(cores), 3),
        "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rows),
        "peak_rss_mb_sum": round(sum(r["peak_rss_mb"] for r in rows), 1),
        "rss_sum_mb_peak_sampled": round(max(steps["rss_sum"]), 1) if steps["rss_sum"] else None,
        "store": {
            "cores": round(statistics.fmean(vm_per) / step_s, 3) if vm_per else None,
            "cpu_s_per_step": {"median": statistics.median(vm_per), "max": max(vm_per)} if vm_per else None,
            "peak_rss_mb": round(vm_hwm_mb, 1),
        },
        "load_average": {"max": round(max(steps["load"]), 2), "end": round(steps["load"][-1], 2)}
        if steps["load"]
        else None,
        "sample_late_s_max": steps["sample_late_s_max"],
        "fault": {
            "gpu": exports.fault_gpu,
            "shard": fault_shard,
            "ts_s": fault_ts_s,
            **fault,
            "latency_s": latency_s,
            "data_latency_s": None
            if fault.get("opened_ts_s") is None
            else round(float(fault["opened_ts_s"]) - fault_ts_s, 1),
        },
        "cap": {"ts_s": cap_ts_s, "settle": settle},
        "view": {
            "shards_ok": [s.get("ok") for s in view["view"].get("shards") or []],
            "incidents": len(listed),
            "caps_shown": len(caps),
            "cap_seen_by": sorted(str(s.get("shard")) for s in caps[0].get("seen_by") or []) if caps else [],
            "hot_gpu_shown": len(hot),
            "other_incidents": others,
            "cpu_s": view["cpu_s"],
            "wall_s": view["wall_s"],
            "shards_cpu_s_meanwhile": view["shards_cpu_s_meanwhile"],
            "requests": view["requests"],
            "bytes": view["bytes"],
        },
        "pages": {
            "sent": len(pages),
            "cap": len(cap_pages),
            "hot_gpu": len(hot_pages),
            "by_incident": pages,
        },
        "peers": peers,
        "targets": {
            "cores_each": bool(cores) and max(cores) <= TARGET_CORES,
            "peak_rss_each": max(r["peak_rss_mb"] for r in rows) <= TARGET_RSS_MB,
            "latency_scrape_plus_20s": latency_s is not None and latency_s <= step_s + 20.0,
            "hot_gpu_shown_once": len(hot) == 1,
            "cap_shown_once_seen_by_all": len(caps) == 1 and len(caps[0].get("seen_by") or []) == shards,
            "cap_paged_once": len(cap_pages) == 1,
            "hot_gpu_paged_once": len(hot_pages) == 1,
            "nothing_else": not others and len(pages) == len(cap_pages) + len(hot_pages),
            "every_shard_kept_up": not any(steps["unready"].values()),
        },
    }
