"""Network and job rules: IB/NIC port states, NCCL/UCX completion errors, training step times -> hypotheses
(sources: rules.py)."""

from __future__ import annotations

import itertools
import re
import statistics

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.hypotheses import Hyp, Namer, anchored, by, hyp, merge

_EUI64_LINK_LOCAL = re.compile(
    r"^fe80::(?:[0-9a-f]{1,4}:)?[0-9a-f]{1,4}ff:fe[0-9a-f]{1,2}:[0-9a-f]{1,4}$", re.I
)


def _is_roce_link_local(gid: str) -> bool:
    return bool(_EUI64_LINK_LOCAL.match(gid))


def link_and_roce_config(c: Collected, n: Namer) -> list[Hyp]:
    out = anchored(
        c.of("ib_port_error"),
        n.nic,
        "nic_link_flap",
        0.75,
        "the HCA reported a port error (link went down)",
        "IB async event: port error",
    )
    active = by(c.of("ib_port_active"), lambda e: e.component or "")
    for dev, errors in by(c.of("ib_port_error"), lambda e: e.component or "").items():
        if dev and active.get(dev):
            out.append(
                hyp(
                    "nic_link_flap",
                    n.nic(errors[0]),
                    0.8,
                    f"port {dev} went down {len(errors)} time(s) and came back up: its link flaps",
                    ("IB async events: port error / port active", sorted(errors + active[dev], key=_order)),
                )
            )
    states = by(c.of("ib_port_state"), lambda e: e.component or "")
    for _comp, events in states.items():
        polling = [e for e in events if e.detail.get("physical") == "polling"]
        changes = len({(e.detail.get("state"), e.detail.get("physical")) for e in events})
        if polling:
            out.append(
                hyp(
                    "nic_link_flap",
                    n.nic(events[0]),
                    0.8 if changes > 1 else 0.7,
                    "the IB port is polling (its link lost the partner)"
                    + (" and changed state" if changes > 1 else ""),
                    ("IB port state", events),
                )
            )
    if any(e.code == 0 for e in c.of("nic_link")):
        for dev, events in by(c.of("nic_link"), lambda e: e.component or "").items():
            transitions = sum(1 for a, b in itertools.pairwise(events) if a.code != b.code)
            if any(e.detail.get("switch_port") for e in events):
                out += _switch_port_flaps(dev, events, n)
            elif any(e.code == 0 for e in events):
                out.append(
                    hyp(
                        "nic_link_flap",
                        n.nic(events[0]),
                        0.75 if transitions >= 2 else 0.6,
                        f"link of {dev} went down" + (" and up repeatedly" if transitions >= 2 else ""),
                        ("kernel link state", events),
                    )
                )
    link_downed = [e for e in c.of("ib_counter") if int(e.detail.get("LinkDownedCounter", "0") or 0) > 0]
    out += anchored(link_downed, n.nic, "nic_link_flap", 0.6, "LinkDownedCounter > 0", "IB counters")
    flaps = [e for e in c.of("carrier_changes") if (e.value or 0) > 0]
    out += anchored(
        flaps,
        n.nic,
        "nic_link_flap",
        0.4,
        "carrier changes counted (also counts planned link changes)",
        "node_exporter carrier changes",
    )
    # NCCL/UCX completion errors and QP async errors: symptoms, unless a configuration clue names the cause.
    errors = c.of("ib_completion_error") + c.of("ib_async_event")
    if errors:
        gids = [e for e in errors if _is_roce_link_local(e.detail.get("local_gid", ""))]
        if gids:
            out += anchored(
                gids,
                n.nic,
                "roce_config_error",
                0.65,
                "NCCL uses a link-local, MAC-derived RoCE GID (GID index 0/1): a routable RoCE v2 GID "
                "(NCCL_IB_GID_INDEX) and matching MTUs are the usual fix",
                "completion errors on a link-local RoCE GID",
                ("QP async errors", c.of("ib_async_event")),
            )
        elif not out:
            out += anchored(
                errors,
                n.nic,
                "nic_link_flap",
                0.35,
                "RDMA completion errors (e.g. retry exceeded) say a peer was unreachable; the cause (link, "
                "peer crash, RoCE configuration) is not in the evidence",
                "RDMA completion errors",
            )
    return merge(out)


def _order(e: LogEvent) -> tuple[str, int]:
    return e.source, e.line


def _switch_port_flaps(port: str, events: list[LogEvent], n: Namer) -> list[Hyp]:
    """A switch's port that went down more than once: the link to the device behind it may flap. A switch's log
    alone never settles it (a host rebooting, a port reconfigured give the same lines): a lean, never a
    diagnosis; one down is only a finding."""
    downs = sum(1 for e in events if e.code == 0)
    if downs < 2:
        return []
    return [
        hyp(
            "nic_link_flap",
            f"{n.node(events[0])}/switch-port@{port}",
            0.5,
            f"switch port {port} went down {downs} times: the link to the device behind it may flap (a host "
            "rebooting or the port being reconfigured gives the same lines; the host side's NIC says which)",
            ("switch port link state", events),
        )
    ]


def input_pipeline(c: Collected, n: Namer) -> list[Hyp]:
    # steps whose line names the data-loading time too (Megatron's iteration lines carry a step time only)
    steps = [e for e in c.of("train_step") if "data_fraction" in e.detail]
    if not steps:
        return []
    fractions = [float(e.detail["data_fraction"]) for e in steps]
    median = statistics.median(fractions)
    step_s = sum(float(e.detail["step_time_s"]) for e in steps)
    share = sum(float(e.detail["data_time_s"]) for e in steps) / step_s if step_s > 0 else 0.0
    # steps that wait on data for most of their time: a loader that stalls now and then (its workers starved,
    # a slow read) leaves most steps fast and the median low, while the stalls hold most of the wall time
    stalled = [e for e in steps if float(e.detail["data_fraction"]) >= 0.5]
    if median >= 0.5:
        conf, why, cited = (
            0.8,
            f"data loading takes {median:.0%} of each step (median of {len(steps)} steps)",
            steps,
        )
    elif share >= 0.5 and len(stalled) >= 2:
        conf, cited = 0.6, stalled
        why = (
            f"data loading takes {share:.0%} of the steps' time: {len(stalled)} of {len(steps)} steps wait on "
            "it for most of theirs (the loader stalls, then the fast steps catch up)"
        )
    elif median >= 0.3:
        conf, why, cited = (
            0.45,
            f"data loading takes {median:.0%} of each step (median of {len(steps)} steps)",
            steps,
        )
    else:
        return []
    return anchored(cited, n.node, "input_pipeline_bottleneck", conf, why, "step time vs data time")


def job_setup(c: Collected, n: Namer) -> list[Hyp]:
    """NCCL could not create its shared-memory segment: the job's container setup, not the hardware."""
    shm = c.of("nccl_shm_error")
    if not shm:
        return []
    no_space = [e for e in shm if e.detail.get("no_space") == "True"]
    summary = "NCCL could not create its shared-memory segment" + (
        ": /dev/shm is full or too small (containers get 64 MB by default; raise --shm-size or mount a "
        "larger /dev/shm): the job's setup, not the hardware"
        if no_space
        else "; the reason is not in the evidence"
    )
    cited = ("NCCL shared-memory segment failed", no_space or shm)
    return [hyp("application_error", n.node(shm[0]), 0.75 if no_space else 0.5, summary, cited)]


# Hardware evidence that an out-of-memory error may follow (an uncorrectable ECC error retires memory, a GPU lost
# fails every allocation): with any of it in the files, the job's demand is not the reading.
_HARDWARE_KINDS = ("fell_off_bus", "gpu_lost", "cuda_ecc_uncorrectable", "ecc_uncorrectable", "remap_pending")


def job_memory(c: Collected, n: Namer) -> list[Hyp]:
    """PyTorch's CUDA out-of-memory message with the allocator's figures (aiops/evidence/oom.py): the job's own
    demand when one request exceeds the GPU's whole memory, or when the failing process itself already held
    half of it or more (its batch, model or sequence size); memory held elsewhere only leans that way."""
    ooms = c.of("cuda_oom")
    hardware = [e for kind in _HARDWARE_KINDS for e in c.of(kind)] + [
        e for e in c.of("xid") if e.code in (48, 63, 64, 79, 94, 95)
    ]
    if not ooms or hardware:
        return []

    def mib(e: LogEvent, key: str) -> float | None:
        text = e.detail.get(key, "")
        return float(text) if text else None

    beyond = [e for e in ooms if (t := mib(e, "total_mib")) and (mib(e, "request_mib") or 0) > t]
    own = [e for e in ooms if (t := mib(e, "total_mib")) and (mib(e, "own_mib") or 0) >= 0.5 * t]
    if beyond:
        conf, chosen, summary = (
            0.75,
            beyond,
            "CUDA out of memory: one allocation asked for more than the GPU's whole memory: the job's demand "
            "(model, batch or sequence size), not a fault of the GPU",
        )
    elif own:
        conf, chosen, summary = (
            0.65,
            own,
            "CUDA out of memory while the failing process itself held half of the GPU's memory or more: the "
            "job's footprint (batch, model or sequence size), not a fault of the GPU",
        )
    else:
        conf, chosen, summary = (
            0.45,
            ooms,
            "CUDA out of memory with most of the GPU's memory held outside the failing process (or the figures "
            "incomplete): another process on the GPU, or the job's own demand; nvidia-smi's process list decides",
        )
    return anchored(
        chosen, n.node, "application_error", conf, summary, "CUDA out of memory (PyTorch allocator)"
    )


# CUDA's cudaErrorNoKernelImageForDevice ("no kernel image is available for execution on the device"): the
# program was built without code for this GPU's architecture (CUDA Runtime API, error types). The meaning is
# the error's own; a job's build, not the hardware.
_NO_KERNEL_IMAGE = "no kernel image is available for execution on the device"


def job_build(c: Collected, n: Namer) -> list[Hyp]:
    """The job's binary carries no kernel for the GPU (a build for other architectures)."""
    missing = [
        e
        for e in c.of("cuda_error")
        if _NO_KERNEL_IMAGE in e.detail.get("what", "") or _NO_KERNEL_IMAGE in e.raw
    ]
    return anchored(
        missing,
        n.node,
        "application_error",
        0.7,
        "CUDA found no kernel image for this GPU: the program (or a library it ships) was built without code "
        "for the GPU's architecture: the job's build, not the hardware",
        "CUDA: no kernel image for this device",
    )
