"""Each NIC as an RDMA HCA reports itself (an mlx5 port's counters/ and hw_counters/, what
collectors/infiniband.py reads from /sys/class/infiniband): cumulative counters, the port's state.

Transport retries (IBTA RC transport; NCCL sets the QP's timeout and retry count). A QP whose packets are not
acked retransmits after 4.096 us x 2^NCCL_IB_TIMEOUT and gives up after NCCL_IB_RETRY_CNT retries. A link down
for less than that window is absorbed: the job stalls, the ack timers of the QPs on the link expire (mlx5
`local_ack_timeout_err`, on the NIC and on the ring peer that sends to it), `link_downed` and
`link_error_recovery` rise, nothing errors. A longer outage exhausts the retries: `req_transport_retries_exceeded`
rises, the rank's NCCL logs `NET/IB : Got completion from peer ... with status=12 ... vendor err 129`
(IBV_WC_RETRY_EXC_ERR) and aborts; torchrun tears the job down and restarts it, as for a CUDA error.

RoCE congestion (DCQCN): the switch marks CE on the queue towards a receiver; the receiving HCA counts the marks
(`np_ecn_marked_roce_packets`) and answers with CNPs (`np_cnp_sent`); the sender's HCA handles them
(`rp_cnp_handled`) and slows down. A switch port without ECN marks nothing: no marks, no CNPs; on a lossy
fabric its queue overflows and the receiver sees the gaps (`out_of_sequence`); on a lossless one (PFC on the
collectives' priority) nothing is lost: the switch pauses the ports that feed the queue, so the senders' NICs
count pause frames received (ethtool `rx_prio<N>_pause`, netdev_samples.rx_pause_frames) and wait to transmit.
The host's netdev statistics (`netdev_rows`) see only kernel traffic (RDMA bypasses the kernel): bulk and other
bytes, carrier changes, the PHY's pause frames. The congestion itself (marks,
drops, queueing) is the fabric model's (fabric.py `_nic_rows`); this module only books it on the HCAs. It draws
from its own random stream, so adding it changed nothing else the twin emits. Sources: docs/SIMULATOR.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from aiops.sim.network import TRAFFIC_CLASSES
from aiops.sim.topology import F64, I64, Bools, Layout, all_true

if TYPE_CHECKING:
    from aiops.sim.world import World

# NCCL's defaults (src/transport/net_ib.cc: NCCL_PARAM IbTimeout 20 in current releases, 18 and 14 in older ones;
# IbRetryCnt 7; docs: NCCL env.html NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT)
NCCL_IB_TIMEOUT = 20
NCCL_IB_RETRY_CNT = 7
ACK_TIMEOUT_S = 4.096e-6 * 2**NCCL_IB_TIMEOUT  # 4.29 s: the QP's local ack timeout (IBTA C9-140)
RETRY_WINDOW_S = ACK_TIMEOUT_S * (NCCL_IB_RETRY_CNT + 1)  # 34.4 s: the first try and 7 retries
QPS_PER_PEER = 2  # NCCL_IB_QPS_PER_CONNECTION 1, two channels per ring neighbour
CNP_PER_MARK = 0.5  # the NP sends at most one CNP per QP per interval (mlx5 min_time_between_cnps): fewer
BYTES_PER_WORD = 4  # port_xmit_data / port_rcv_data count 4-octet words (IBA PortXmitData)
RATE_GBPS = 200.0
XMIT_WAIT_TICKS_PER_MS = 1000  # port_xmit_wait ticks while the queue holds data
PAUSES_PER_OVERFLOW = 2  # PFC pause frames (XOFF, refreshed while the queue stays above its threshold) per
# packet a lossy queue would have dropped
XMIT_WAIT_TICKS_PER_PAUSE = 500  # a paused port waits to transmit (pause quanta)
NETDEV_BYTES_PER_PACKET = 4096
NETDEV_SPEED_MBPS = 200_000
SCALAR_DRAWS_MAX = 8  # NICs up to which a step's binomial draws are scalar calls (`_binomial`)
COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_xmit_wait",
    "port_rcv_data",
    "port_xmit_data",
    "np_cnp_sent",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
    "out_of_sequence",
    "local_ack_timeout_err",
    "req_transport_retries_exceeded",
)
C = {name: i for i, name in enumerate(COUNTERS)}
NODE_SUBNET = "198.18.0."  # the job's peers (network.PEER_PREFIX): node n is .n+1
NCCL_PORT_BASE = 40000
# (ts_s, node index, text): a line of a rank's NCCL log (NCCL_DEBUG=WARN), as a log shipper stores it
NcclLine = tuple[float, int, str]


@dataclass
class Hca:
    """Per NIC: the HCA's cumulative counters and what the transport knows of the current outage."""

    counters: I64  # [nic, len(COUNTERS)]
    was_up: Bools
    down_since_s: F64  # elapsed second the link went down (-1 while up)
    exhausted: Bools  # this outage's retries are used up (the QPs errored)
    rng: np.random.Generator
    netdev: I64  # [nic, 4]: kernel tx bytes, kernel rx bytes, pause frames received, pause frames sent
    log: list[NcclLine] = field(default_factory=list)
    # `senders` for the layout's placement_version it was computed for (placement changes only with a move)
    senders_of: tuple[int, I64] | None = None
    senders_distinct: bool = (
        False  # no NIC sends to two (a ring's senders): `step` adds at them without np.add.at
    )

    @classmethod
    def of(cls, layout: Layout, seed: int) -> Hca:
        k = layout.nic_count
        return cls(
            np.zeros((k, len(COUNTERS)), dtype=np.int64),
            np.ones(k, dtype=bool),
            np.full(k, -1.0),
            np.zeros(k, dtype=bool),
            np.random.default_rng([seed, 4]),
            np.zeros((k, 4), dtype=np.int64),
        )


def senders(w: World) -> I64:
    """Per NIC: the NIC whose ring traffic it receives (the previous node of its job on the same rail); itself
    for a NIC that no multi-node job uses."""
    lay = w.layout
    out = np.arange(lay.nic_count, dtype=np.int64)
    for job in lay.jobs:
        if len(job.nodes) < 2:
            continue
        for position, node in enumerate(job.nodes):
            previous = job.nodes[position - 1]
            for rail in range(lay.nics_per_node):
                out[node * lay.nics_per_node + rail] = previous * lay.nics_per_node + rail
    return out


def running_nics(w: World) -> Bools:
    """NICs whose job is running (its QPs exist): not relaunching, not torn down."""
    lay, t = w.layout, w.elapsed_s
    out = np.zeros(lay.nic_count, dtype=bool)
    for job in lay.jobs:
        if len(job.nodes) > 1 and w.restart_until_s[job.index] < t and not w.torn_down[job.index]:
            out[job.nics] = True
    return out


def step(w: World) -> None:
    """Book this second's fabric output (w.out) and link state on the HCAs."""
    h, n = w.hca, w.layout.nic_count
    tx, ce, drops, queue_ms, collective, other = _per_nic(w)
    placement = w.layout.placement_version
    if h.senders_of is None or h.senders_of[0] != placement:
        h.senders_of = (placement, senders(w))
        h.senders_distinct = np.unique(h.senders_of[1]).size == n
    send_from = h.senders_of[1]
    up = w.link_up
    c = h.counters
    # this second's increments, a column per counter, added in one call (whole numbers: the same totals as
    # column by column, where each `+=` on a column costs numpy a view, an add and a write back)
    add = np.zeros(c.shape, dtype=np.int64)
    add[:, C["port_xmit_data"]] = (tx // BYTES_PER_WORD).astype(np.int64)
    add[:, C["port_rcv_data"]] = ((collective[send_from] + other) // BYTES_PER_WORD).astype(np.int64)
    add[:, C["port_xmit_wait"]] = (queue_ms * XMIT_WAIT_TICKS_PER_MS).astype(np.int64)
    add[:, C["np_ecn_marked_roce_packets"]] = ce
    cnps = _binomial(h.rng, ce, CNP_PER_MARK)
    add[:, C["np_cnp_sent"]] = cnps
    # the receiver sees the sequence gaps of lost packets; a port that is down discards what it would send
    add[:, C["out_of_sequence"]] = np.where(up, drops, 0)
    add[:, C["port_xmit_discards"]] = np.where(up, 0, drops)
    c += add
    # the CNP goes back to the marked traffic's sender (distinct senders: a fancy-indexed add is np.add.at)
    if h.senders_distinct:
        c[send_from, C["rp_cnp_handled"]] += cnps
    else:
        np.add.at(c[:, C["rp_cnp_handled"]], send_from, cnps)
    # lossless: the full queue towards a NIC pauses the port that feeds it (its ring sender); a list of zeros (a
    # lossy fabric's, or no full queue) adds nothing
    if any(w.out.pauses):
        pause_frames = np.asarray(w.out.pauses, dtype=np.int64) * PAUSES_PER_OVERFLOW
        np.add.at(h.netdev[:, 2], send_from, pause_frames)
        np.add.at(c[:, C["port_xmit_wait"]], send_from, pause_frames * XMIT_WAIT_TICKS_PER_PAUSE)
    h.netdev[:, 0] += np.maximum(tx - collective.astype(np.int64), 0)  # the kernel path: not the RDMA traffic
    h.netdev[:, 1] += other.astype(np.int64)
    _links(w, send_from, n)
    h.was_up = up.copy()


def _binomial(rng: np.random.Generator, counts: I64, p: float) -> I64:
    """`rng.binomial(counts, p)`. For a few NICs one scalar draw each, in order: the same numbers (numpy draws an
    array's elements one by one with the scalar's routine), without numpy's checks of an array argument, which
    cost as much as a handful of draws."""
    if counts.size > SCALAR_DRAWS_MAX:
        return rng.binomial(counts, p)
    return np.array([rng.binomial(count, p) for count in counts.tolist()], dtype=np.int64)


def _per_nic(w: World) -> tuple[I64, I64, I64, F64, F64, F64]:
    n = w.layout.nic_count
    lanes = w.out.lanes
    if lanes is not None:  # the NIC rows as arrays (fabric.NicLanes): summed lane by lane, as row by row
        tx = np.zeros(n)
        for slot in range(4):
            tx += lanes.tx[:, slot]
        # np.add.reduce and np.maximum.reduce: what ndarray.sum and .max call, without their Python wrappers
        drops, ce = np.add.reduce(lanes.drops, axis=1), np.add.reduce(lanes.ce, axis=1)
        queue_ms = np.maximum(np.maximum.reduce(lanes.queue_ms, axis=1), 0.0)
    else:
        tx, ce, drops, queue_ms = (
            np.zeros(n),
            np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=np.int64),
            np.zeros(n),
        )
        for row in w.out.nics:
            i = row[0]
            tx[i] += row[2]
            drops[i] += row[3]
            ce[i] += row[4]
            queue_ms[i] = max(queue_ms[i], row[6])
    if (
        w.out.class_bytes is not None
    ):  # the flow rows as an array: one row per NIC and class, so the same sums
        collective = w.out.class_bytes[:, TRAFFIC_CLASSES.index("collective")].copy()
        other = w.out.class_bytes[:, TRAFFIC_CLASSES.index("other")].copy()
    else:
        collective, other = np.zeros(n), np.zeros(n)
        for flow in w.out.flows:
            if flow[1] == "collective":
                collective[flow[0]] += flow[4]
            elif flow[1] == "other":
                other[flow[0]] += flow[4]
    return tx.astype(np.int64), ce, drops, queue_ms, collective, other


def _links(w: World, send_from: I64, n: int) -> None:
    """Link transitions and the transport's retries over an outage."""
    h, t, c = w.hca, w.elapsed_s, w.hca.counters
    # a link up now and a second ago has nothing to book: only the others are walked, in NIC order (the draws too)
    steady = w.link_up[:n] & h.was_up[:n]
    if all_true(steady):  # every link up now and a second ago (the common case)
        return
    changing = np.flatnonzero(~steady).tolist()
    if not changing:
        return
    running = running_nics(w)
    for i in changing:
        up, was_up = bool(w.link_up[i]), bool(h.was_up[i])
        if was_up and not up:  # the PHY tried to recover, then the port went down
            c[i, C["link_error_recovery"]] += 1 + int(h.rng.poisson(1.0))
            c[i, C["link_downed"]] += 1
            c[i, C["symbol_error"]] += int(h.rng.poisson(20.0))
            h.down_since_s[i] = t
            h.exhausted[i] = False
        elif not up and running[i] and not h.exhausted[i] and t - h.down_since_s[i] >= RETRY_WINDOW_S:
            _exhausted(w, i, int(send_from[i]))
        elif up and not was_up:
            if (
                running[i] and not h.exhausted[i]
            ):  # every un-acked QP on the link timed out, retried, got through
                retries = min(NCCL_IB_RETRY_CNT, math.ceil((t - h.down_since_s[i]) / ACK_TIMEOUT_S))
                _ack_timeouts(c, i, int(send_from[i]), retries)
            h.down_since_s[i] = -1.0


def _ack_timeouts(c: I64, nic: int, sender: int, retries: int) -> None:
    c[nic, C["local_ack_timeout_err"]] += QPS_PER_PEER * retries
    if sender != nic:  # the peer sending to the NIC waits for its acks too
        c[sender, C["local_ack_timeout_err"]] += QPS_PER_PEER * retries


def _exhausted(w: World, nic: int, sender: int) -> None:
    """The retry limit is reached: the QPs error (status 12), the rank's NCCL aborts, torchrun restarts the job."""
    h, lay = w.hca, w.layout
    h.exhausted[nic] = True
    _ack_timeouts(h.counters, nic, sender, NCCL_IB_RETRY_CNT)
    h.counters[nic, C["req_transport_retries_exceeded"]] += QPS_PER_PEER
    node = int(lay.nic_node[nic])
    ranks = np.flatnonzero((lay.gpu_nic == nic) & lay.in_job)
    if ranks.size == 0:
        return
    w.crashed[ranks] = True  # the rank's NCCL async error aborts the communicator: fabric._job_down restarts
    peer = int(lay.nic_node[sender])
    h.log.append(
        (w.now_ts_s, node, nccl_retry_exceeded_line(h.rng, lay, node, peer, int(lay.gpu_local[ranks[0]])))
    )


def nccl_retry_exceeded_line(
    rng: np.random.Generator, lay: Layout, node: int, peer: int, cuda_dev: int
) -> str:
    """What NCCL >= 2.19 prints when a work request completes with IBV_WC_RETRY_EXC_ERR (as in
    evals/real/nccl-error12-vendor129-ipv6-gid-unresolved-2024/nccl.log; RoCE GIDs are IPv4-mapped)."""
    pid = 1000 + int(rng.integers(0, 60000))
    tid = pid + 1 + int(rng.integers(0, 400))
    port = NCCL_PORT_BASE + int(rng.integers(0, 20000))
    here, there = f"{NODE_SUBNET}{node + 1}", f"{NODE_SUBNET}{peer + 1}"
    return (
        f"{lay.node_names[node]}:{pid}:{tid} [{cuda_dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
        f"from peer {there}<{port}> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{here} "
        f"remoteGids::ffff:{there}"
    )


def netdev_rows(w: World, now_ts_s: float) -> list[tuple[object, ...]]:
    """netdev_samples rows (collectors/net.py with the ethtool pause reader), one per NIC: its RoCE netdev."""
    lay, h = w.layout, w.hca
    kernel = h.netdev.tolist()
    discards = h.counters[:, C["port_xmit_discards"]].tolist()
    nic_node = lay.nic_node.tolist()
    rows: list[tuple[object, ...]] = []
    for i, (nic, up, changes) in enumerate(
        zip(lay.nic_names, w.link_up.tolist(), w.carrier_changes.tolist(), strict=True)
    ):
        node = lay.node_names[nic_node[i]]
        tx_bytes, rx_bytes, rx_pause, tx_pause = kernel[i]
        rows.append(
            (
                now_ts_s,
                node,
                f"ens{i % lay.nics_per_node + 1}f0np0",
                nic,
                rx_bytes,
                tx_bytes,
                rx_bytes // NETDEV_BYTES_PER_PACKET,
                tx_bytes // NETDEV_BYTES_PER_PACKET,
                0,
                0,
                0,
                discards[i],
                changes,
                up,
                NETDEV_SPEED_MBPS if up else None,
                rx_pause,
                tx_pause,
            )
        )
    return rows


def port_rows(w: World, now_ts_s: float) -> list[tuple[object, ...]]:
    """ib_port_samples rows (collectors/schema.py order), one per NIC: device mlx5_<k> port 1 on its node; and a
    node's spare port (`churn.unused_ports`), down because nothing is plugged in."""
    lay, h = w.layout, w.hca
    counters = h.counters.tolist()
    nic_node = lay.nic_node.tolist()
    rows: list[tuple[object, ...]] = []
    for i, (nic, up) in enumerate(zip(lay.nic_names, w.link_up.tolist(), strict=True)):
        node = lay.node_names[nic_node[i]]
        state, phys = ("ACTIVE", "LinkUp") if up else ("DOWN", "Polling")
        device = f"mlx5_{i % lay.nics_per_node}"
        rows.append((now_ts_s, node, device, 1, nic, state, phys, RATE_GBPS, *counters[i]))
    spare = w.churn.unused_port_nodes if w.churn is not None else frozenset()
    zeros = [0] * len(counters[0]) if counters else []
    for n in sorted(spare):  # a spare HCA port with no cable: DOWN and Disabled since boot, every counter 0
        device = f"mlx5_{lay.nics_per_node}"
        rows.append((now_ts_s, lay.node_names[n], device, 1, None, "DOWN", "Disabled", RATE_GBPS, *zeros))
    return rows
