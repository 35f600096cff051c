"""ECN on RoCE, from the HCAs' own counters. On RoCE the switch marks CE on a congested queue; the receiving HCA
counts the marks (np_ecn_marked_roce_packets) and answers with CNPs (np_cnp_sent) that the sender's HCA handles
(rp_cnp_handled, DCQCN). A switch port with ECN off marks nothing, so its NIC sends no CNPs while its peers do,
and what the full queue drops reaches the receiver as sequence gaps (out_of_sequence); on a lossless (PFC)
fabric nothing is dropped: the switch pauses the ports that feed the queue (pause frames received by the
senders, netdev_samples.rx_pause_frames), so a silent NIC that carries its share of traffic while pauses rise
elsewhere is the same fault. RDMA bypasses the
kernel, so where a NIC has ib_port_samples rows this rule, not the host's CE marks (fabric_scorers.nics_and_lanes),
speaks for its ECN.
"""

from __future__ import annotations

from typing import Any

from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts

SILENT_SHARE = 0.3  # a NIC sending fewer CNPs than this share of its peers' median sends none to speak of
LOSS_OVER_REFERENCE = 3.0
LOSS_OVER_PEERS = 10.0
MIN_LOSS_PER_S = 1.0
MIN_PEERS = 4  # NICs of one job (itself included) to compare a NIC with; fewer: every NIC


def hca_nics(facts: Facts) -> set[str]:
    """NICs whose ECN the HCA counters describe (rows in the incident window)."""
    return {str(r["nic"]) for r in facts.hca_congestion()}


def roce_ecn(facts: Facts) -> list[Candidate]:
    rows = facts.hca_congestion()
    if not rows:
        return []
    paused = [r for r in rows if _pausing(r)]
    out: list[Candidate] = []
    for r in rows:
        # under the same load: the NICs its job's ranks send through (another job's traffic congests its own
        # queues at its own rate), or all of them where the job has too few NICs to compare
        mates = [o for o in rows if r["job"] is not None and o["job"] == r["job"]]
        peers = mates if len(mates) >= MIN_PEERS else rows
        peer_cnp = _median([_num(o["cnp_sent_per_s"]) for o in peers])
        peer_oos = _median([_num(o["oos_per_s"]) for o in peers])
        peer_rcv = _median([_num(o["rcv_words_per_s"]) for o in peers])
        sending = [o for o in peers if _num(o["cnp_sent_per_s"]) > SILENT_SHARE * peer_cnp]
        oos, cnp = _num(r["oos_per_s"]), _num(r["cnp_sent_per_s"])
        lossy = oos > max(LOSS_OVER_REFERENCE * _num(r["ref_oos_per_s"]), MIN_LOSS_PER_S) or oos > max(
            LOSS_OVER_PEERS * peer_oos, MIN_LOSS_PER_S
        )
        carrying = _num(r["rcv_words_per_s"]) >= SILENT_SHARE * peer_rcv > 0
        if not (peer_cnp > 0 and cnp < SILENT_SHARE * peer_cnp and sending) or not (
            lossy or (paused and carrying)
        ):
            continue
        how = (
            f"{oos:.1f} packets/s out of sequence"
            if lossy
            else f"pause frames rising on {', '.join(str(p['nic']) for p in paused[:3])} (a lossless fabric)"
        )
        out.append(
            Candidate(
                "ecn_misconfig",
                str(r["nic"]),
                0.86,
                f"{r['nic']}: {how} but {cnp:.1f} CNPs/s sent while {len(sending)} other NICs send "
                f"{peer_cnp:.1f}/s under the same load: the switch marks no CE towards it",
                [
                    facts.cite(
                        "hca_congestion", "CE marks, CNPs, out-of-sequence packets and pause frames per HCA"
                    )
                ],
            )
        )
    return out


def _pausing(row: dict[str, Any]) -> bool:
    pauses = _num(row["pause_rx_per_s"])
    return pauses > max(LOSS_OVER_REFERENCE * _num(row["ref_pause_rx_per_s"]), MIN_LOSS_PER_S)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def _num(value: Any) -> float:
    return 0.0 if value is None else float(value)
