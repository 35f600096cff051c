"""Network and job rules: IB/NIC port states, NCCL/UCX completion errors, training step times -> hypotheses
(sources: rules.py)."""

from __future__ import annotations

import itertools
import re
import statistics

from aiops.evidence.collect import Collected
from aiops.evidence.hyp import Hyp, Namer, by, merge

_EUI64_LINK_LOCAL = re.compile(
    r"^fe80::(?:[0-9a-f]{1,4}:)?[0-9a-f]{1,4}ff:fe[0-9a-f]{1,2}:[0-9a-f]{1,4}$", re.I
)


def _is_roce_link_local(gid: str) -> bool:
    return bool(_EUI64_LINK_LOCAL.match(gid))


def network(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    port_errors = c.of("ib_port_error")
    if port_errors:
        h = Hyp(
            "nic_link_flap", n.nic(port_errors[0]), 0.75, "the HCA reported a port error (link went down)"
        )
        h.cite("IB async event: port error", port_errors)
        out.append(h)
    states = by(c.of("ib_port_state"), lambda e: e.component or "")
    for _comp, events in states.items():
        polling = [e for e in events if e.detail.get("physical") == "polling"]
        changes = len({(e.detail.get("state"), e.detail.get("physical")) for e in events})
        if polling:
            conf = 0.8 if changes > 1 else 0.7
            h = Hyp(
                "nic_link_flap",
                n.nic(events[0]),
                conf,
                "the IB port is polling (its link lost the partner)"
                + (" and changed state" if changes > 1 else ""),
            )
            h.cite("IB port state", events)
            out.append(h)
    downs = [e for e in c.of("nic_link") if e.code == 0]
    if downs:
        by_dev = by(c.of("nic_link"), lambda e: e.component or "")
        for dev, events in by_dev.items():
            transitions = sum(1 for a, b in itertools.pairwise(events) if a.code != b.code)
            if any(e.code == 0 for e in events):
                h = Hyp(
                    "nic_link_flap",
                    n.nic(events[0]),
                    0.75 if transitions >= 2 else 0.6,
                    f"link of {dev} went down" + (" and up repeatedly" if transitions >= 2 else ""),
                )
                h.cite("kernel link state", events)
                out.append(h)
    link_downed = [e for e in c.of("ib_counter") if int(e.detail.get("LinkDownedCounter", "0") or 0) > 0]
    if link_downed:
        h = Hyp("nic_link_flap", n.nic(link_downed[0]), 0.6, "LinkDownedCounter > 0")
        h.cite("IB counters", link_downed)
        out.append(h)
    flaps = [e for e in c.of("carrier_changes") if (e.value or 0) > 0]
    if flaps:
        h = Hyp(
            "nic_link_flap",
            n.nic(flaps[0]),
            0.4,
            "carrier changes counted (also counts planned link changes)",
        )
        h.cite("node_exporter carrier changes", flaps)
        out.append(h)
    # NCCL/UCX completion errors and QP async errors: symptoms, unless a configuration clue names the cause.
    errors = c.of("ib_completion_error") + c.of("ib_async_event")
    if errors:
        gids = [e for e in errors if _is_roce_link_local(e.detail.get("local_gid", ""))]
        if gids:
            h = Hyp(
                "roce_config_error",
                n.nic(gids[0]),
                0.65,
                "NCCL uses a link-local, MAC-derived RoCE GID (GID index 0/1): a routable RoCE v2 GID "
                "(NCCL_IB_GID_INDEX) and matching MTUs are the usual fix",
            )
            h.cite("completion errors on a link-local RoCE GID", gids)
            h.cite("QP async errors", c.of("ib_async_event"))
            out.append(h)
        elif not out:
            h = Hyp(
                "nic_link_flap",
                n.nic(errors[0]),
                0.35,
                "RDMA completion errors (e.g. retry exceeded) say a peer was unreachable; the cause (link, "
                "peer crash, RoCE configuration) is not in the evidence",
            )
            h.cite("RDMA completion errors", errors)
            out.append(h)
    return merge(out)


def input_pipeline(c: Collected, n: Namer) -> list[Hyp]:
    steps = c.of("train_step")
    if not steps:
        return []
    fractions = [float(e.detail["data_fraction"]) for e in steps]
    median = statistics.median(fractions)
    if median >= 0.5:
        conf = 0.8
    elif median >= 0.3:
        conf = 0.45
    else:
        return []
    h = Hyp(
        "input_pipeline_bottleneck",
        n.node(steps[0]),
        conf,
        f"data loading takes {median:.0%} of each step (median of {len(steps)} steps)",
    )
    h.cite("step time vs data time", steps)
    return [h]


def job_setup(c: Collected, n: Namer) -> list[Hyp]:
    """NCCL could not create its shared-memory segment: the job's container setup, not the hardware."""
    shm = c.of("nccl_shm_error")
    if not shm:
        return []
    no_space = [e for e in shm if e.detail.get("no_space") == "True"]
    h = Hyp(
        "application_error",
        n.node(shm[0]),
        0.75 if no_space else 0.5,
        "NCCL could not create its shared-memory segment"
        + (
            ": /dev/shm is full or too small (containers get 64 MB by default; raise --shm-size or mount a "
            "larger /dev/shm): the job's setup, not the hardware"
            if no_space
            else "; the reason is not in the evidence"
        ),
    )
    h.cite("NCCL shared-memory segment failed", no_space or shm)
    return [h]
