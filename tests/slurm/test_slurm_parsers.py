"""The Slurm text the resolver and actuator parse, in the shapes slurm-wlm 22.05 prints (the real daemons are in
tests/slurm/test_slurm_real.py): cgroup paths (v1 as this machine's slurmd made them, v2 as 22.05's cgroup/v2 plugin
lays them out), `squeue -O` job rows, `scontrol show topology` with hostlist ranges, hostile values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from collectors.slurm import (
    CgroupTask,
    SlurmResolver,
    expand_hostlist,
    parse_cgroup,
    parse_job,
    parse_topology,
)
from guardrails.actuators_slurm import SlurmActuator, drain_reason
from tests import slurm_cluster
from tests.guardrails_helpers import action

V1 = (
    "6:freezer:/slurm_vm/uid_1000/job_4242/step_0\n3:cpuset:/slurm_vm/uid_1000/job_4242/step_0/task_1\n0::/\n"
)
V2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n"
JOB = "9|alice|8|3|\n"  # squeue -h -j 9 -O JobID:|,UserName:|,ArrayJobID:|,ArrayTaskID:|


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (V1, CgroupTask("4242", "0", None, 1000)),
        ("3:cpuset:/slurm/uid_0/job_5/step_extern/task_2", CgroupTask("5", "extern", 2, 0)),
        (V2, CgroupTask("77", "batch", 0)),
        ("0::/system.slice/slurmstepd.scope/job_78", CgroupTask("78")),
        ("0::/kubepods/burstable/pod1/abc\n", None),
        ("0::/slurm/uid_0/job_99999999999/step_0", None),  # 11 digits: not a job id
        ("0::/slurm/uid_0/job_1;rm/step_0", None),  # a job id ends at a separator, never mid-word
    ],
)
def test_cgroup_paths(text: str, want: CgroupTask | None) -> None:
    assert parse_cgroup(text) == want


def test_a_job_line_gives_its_user_and_array() -> None:
    job = parse_job(JOB, "9")
    assert job is not None and (job.job_id, job.user, job.array_job_id, job.array_task_id) == (
        "9",
        "alice",
        "8",
        "3",
    )
    assert parse_job("9|$(reboot)|N/A|N/A|", "9") == parse_job("9||||", "9") is not None
    assert parse_job("9|$(reboot)|N/A|N/A|", "9").user is None  # type: ignore[union-attr]
    assert parse_job("8|mallory|||\n", "9") is None  # another job's row
    assert parse_job("slurm_load_jobs error: Invalid job id specified", "9") is None
    assert parse_job("", "9") is None


class CannedScontrol(SlurmResolver):
    """The resolver with the controller's answers fixed (its subprocess path runs in test_slurm_real):
    squeue's job rows, and the pids slurmd tracks (`scontrol listpids`)."""

    def __init__(self, answers: Mapping[str, str], tracked: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        super().__init__()
        self.answers = answers
        self.pids = set(tracked)
        self.asked: list[str] = []

    def job(self, job_id: str) -> Any:
        self.asked.append(job_id)
        return parse_job(self.answers.get(job_id, ""), job_id)

    def tracked(self, pid: int, job_id: str) -> bool:
        return pid in self.pids


def test_environment_and_cgroup_resolve_one_identity() -> None:
    resolver = CannedScontrol({"4242": "4242|bob|N/A|N/A|"}, tracked={11, 12})
    env = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}
    identity = resolver.resolve(10, V1, env)
    assert identity is not None
    assert (
        identity.job,
        identity.step,
        identity.rank,
        identity.local_rank,
        identity.world_size,
        identity.user,
    ) == (
        "slurm-4242",
        "0",
        3,
        1,
        8,
        "bob",
    )
    # The cgroup is slurmd's word: an environment naming another job does not move the process.
    lying = resolver.resolve(10, V1, {**env, "SLURM_JOB_ID": "1"})
    assert lying is not None and lying.job == "slurm-4242"
    # An array task's environment names the array; hostile values are not numbers.
    array = resolver.resolve(
        11,
        "",
        {"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "8", "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_USER": "al"},
    )
    assert array is not None and array.job == "slurm-8_3" and array.user == "al"
    odd = resolver.resolve(12, "", {"SLURM_JOB_ID": "7", "SLURM_PROCID": "-1", "SLURM_JOB_USER": "a b"})
    assert odd is not None and odd.rank is None and odd.user is None
    assert resolver.resolve(13, "0::/user.slice", {"SLURM_JOB_ID": "x1"}) is None
    # SLURM_JOB_ID in a process Slurm neither put in a cgroup nor tracks: anyone can set it
    assert resolver.resolve(14, "0::/user.slice", {"SLURM_JOB_ID": "4242"}) is None


def test_hostlists_expand_with_padding_and_bounds() -> None:
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert len(expand_hostlist("n[0-99999999]", limit=50)) == 50
    assert expand_hostlist("bad[a-b],ok") == ["ok"]


def test_topology_gives_each_node_its_leaf_switch() -> None:
    text = (
        "SwitchName=rack-a Level=0 LinkSpeed=1 Nodes=gpu[01-02]\n"
        "SwitchName=rack-b Level=0 LinkSpeed=1 Nodes=gpu[03-04]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=gpu[01-04] Switches=rack-[a-b]\n"
        "SwitchName=$(x) Level=0 LinkSpeed=1 Nodes=gpu05\n"
    )
    assert parse_topology(text) == {
        "gpu01": "rack-a",
        "gpu02": "rack-a",
        "gpu03": "rack-b",
        "gpu04": "rack-b",
    }


def test_drain_commands_are_argument_lists_with_a_safe_reason() -> None:
    actuator = SlurmActuator("gpu-a100-017")
    drain = action(kind="drain_node", target="gpu-a100-017", parameters={"reason_code": "xid 79; rm -rf /"})
    assert drain_reason(drain) == "aiops P-1: xid 79- rm -rf /"
    assert actuator.commands(drain) == [
        ["scontrol", "update", "nodename=gpu-a100-017", "state=drain", "reason=aiops P-1: xid 79- rm -rf /"]
    ]
    migrate = action(kind="migrate_job", target="job:slurm-12_3", parameters={})
    assert actuator.commands(migrate) == [
        ["scontrol", "requeuehold", "12_3"],
        ["scontrol", "update", "jobid=12_3", "ExcNodeList=gpu-a100-017"],
        ["scontrol", "release", "12_3"],
    ]


def test_the_controller_is_asked_only_for_what_the_environment_lacks() -> None:
    resolver = CannedScontrol({"5": "5|carol|N/A|N/A|"}, tracked={1})
    full = {"SLURM_JOB_ID": "5", "SLURM_JOB_USER": "carol", "SLURM_PROCID": "0"}
    assert resolver.resolve(1, "", full) is not None and resolver.asked == []
    no_user = resolver.resolve(1, "", {"SLURM_JOB_ID": "5"})
    assert no_user is not None and no_user.user == "carol" and resolver.asked == ["5"]


def test_missing_slurm_fails_under_require_ebpf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda *_a, **_k: None)
    monkeypatch.setenv("AIOPS_REQUIRE_EBPF", "1")
    with pytest.raises(pytest.fail.Exception, match="Slurm binaries missing: munged"):
        slurm_cluster.require_slurm()
    monkeypatch.delenv("AIOPS_REQUIRE_EBPF")
    with pytest.raises(pytest.skip.Exception, match="Slurm binaries missing"):
        slurm_cluster.require_slurm()
