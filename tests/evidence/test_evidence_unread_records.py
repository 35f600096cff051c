"""A `healthy` verdict needs that nothing the case holds was left unread in a shape that carries measurements
(aiops/evidence/records.py, the rule in aiops/evidence/verdict.py): a table, CSV rows or `key: value` pairs that
no format's parser read can hold the fault (evals/real/unseen11-2026-12-07: an Xid 120 in `dcgmi dmon -e 230`
and a recovery action `Reset` in a `--query-gpu` CSV row, read as generic text, beside a DCGM health JSON saying
Healthy, were called healthy).

The tools' outputs here are constructed (not captures), laid out as each tool prints them, with readings of an
idle GPU: nothing in them is abnormal, so without the rule each one beside a clean `nvidia-smi -q` would be
`healthy`. The clean `nvidia-smi -q` is real, from evals/real/ (its case.yaml names the source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate
from aiops.evidence.records import RECORD_RUN, Tally, is_record

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
IDLE_NVSMI_Q = (
    REAL / "unseen7-2026-12-06" / "healthy-nvidia-smi-q-h100-535-183-gpud-fixture-2024" / "nvidia-smi-q.txt"
)

# Constructed: `dcgmi dmon -e 150,155 -c 2` (DCGM_FI_DEV_GPU_TEMP, DCGM_FI_DEV_POWER_USAGE): no XIDER column, so
# no field the dcgmi parser reads; only its header and ID lines are known.
DCGMI_DMON_TEMP_POWER = "#Entity   TMPTR        POWER\nID\n" + "".join(
    f"GPU {gpu}     {34 + gpu % 2}           {61.284 + gpu:.3f}\n" for _ in range(2) for gpu in range(4)
)
# Constructed: `nvidia-smi dmon -c 2` on two GPUs (power, temperatures, utilisations, clocks): no parser reads it.
NVSMI_DMON = (
    "# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk\n"
    "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz\n"
    + "".join(
        f"    {gpu}     {69 + gpu}     {34 + gpu}     {45 + gpu}      0      0      0      0      0      0   2619   1980\n"
        for _ in range(2)
        for gpu in range(2)
    )
)
# Constructed: `nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,power.draw,fan.speed --format=csv`: fields
# the query parser does not map (only its header is read).
QUERY_CLOCKS = (
    "index, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], fan.speed [%]\n"
    "0, 1980 MHz, 2619 MHz, 69.52 W, [N/A]\n"
    "1, 1980 MHz, 2619 MHz, 71.03 W, [N/A]\n"
)
# Constructed: `ipmitool sdr` (name | reading | status): no parser reads it.
IPMITOOL_SDR = (
    "CPU1 Temp        | 45 degrees C      | ok\n"
    "CPU2 Temp        | 47 degrees C      | ok\n"
    "Inlet Temp       | 24 degrees C      | ok\n"
    "FAN1             | 3600 RPM          | ok\n"
    "FAN2             | 3720 RPM          | ok\n"
    "PS1 Status       | 0x01              | ok\n"
    "PS2 Status       | 0x01              | ok\n"
)
# Constructed: a training job's own log, free text (a launcher's and a trainer's messages under time stamps, a
# progress bar), with a metrics line every hundred steps, as torchrun and a Hugging Face-style trainer print
# them. The metrics lines (`{'loss': 2.48, ...}`) are records, but one between messages: never most of the log,
# never a run.
_SETUP = (
    "[2026-11-30 09:12:01,481] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable "
    "for each process to be 1 in default, to avoid your system being overloaded, please further tune the "
    "variable for optimal performance in your application as needed.",
    "[2026-11-30 09:12:04,117] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda "
    "(auto detect)",
    "[2026-11-30 09:12:06,902] [INFO] [comm.py:637:init_distributed] cdb=None",
    "[2026-11-30 09:12:06,903] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed "
    "with backend nccl",
    "2026-11-30 09:12:09 - INFO - __main__ - Loading tokenizer from /models/llama-3-8b",
    "2026-11-30 09:12:11 - INFO - __main__ - Loading dataset shards from /data/pretrain/en, this may take a while",
    "Loading checkpoint shards: 100%|██████████| 4/4 [00:07<00:00,  1.86s/it]",
    "2026-11-30 09:12:19 - WARNING - __main__ - Gradient checkpointing is enabled: use_cache is set to False",
    "2026-11-30 09:12:20 - INFO - __main__ - ***** Running training *****",
    "2026-11-30 09:12:20 - INFO - __main__ - Num examples = 1200000, num epochs = 1, total steps = 2500",
    "2026-11-30 09:12:21 - INFO - __main__ - Saving a copy of the run configuration next to the checkpoints",
)


def _training_log() -> str:
    lines = list(_SETUP)
    for step in range(100, 2600, 100):
        stamp = f"2026-11-30 {9 + step // 1000:02d}:{step % 1000 // 20:02d}:00"
        lines.append(
            f"{stamp} - INFO - __main__ - Reached step {step} of 2500, the data loader kept up with the GPUs"
        )
        lines.append(
            f"{{'loss': {2.5 - step / 5000:.4f}, 'learning_rate': 2.9e-05, 'epoch': {step / 2500:.2f}}}"
        )
        if step % 500 == 0:
            lines.append(
                f"{stamp} - INFO - __main__ - Saving model checkpoint to /ckpt/run-17/checkpoint-{step}"
            )
            lines.append(f"{stamp} - INFO - __main__ - Model weights saved in /ckpt/run-17/checkpoint-{step}")
    lines.append(
        "2026-11-30 10:58:41 - INFO - __main__ - Training completed. Do not forget to share your model"
    )
    return "\n".join(lines) + "\n"


TRAINING_LOG = _training_log()


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _source(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in result["sources"] if s["file"].endswith(name))


def test_the_clean_status_output_alone_is_healthy() -> None:
    """What the files below stand beside: without them, the case is healthy."""
    assert investigate([IDLE_NVSMI_Q])["verdict"] == "healthy"


@pytest.mark.parametrize(
    ("name", "text", "records", "reason"),
    [
        ("dcgmi-dmon.txt", DCGMI_DMON_TEMP_POWER, 8, "dcgmi-dmon.txt: dcgmi, 20% of its lines read, 8 lines"),
        ("nvidia-smi-dmon.txt", NVSMI_DMON, 4, "nvidia-smi-dmon.txt: 4 lines"),
        ("query.csv", QUERY_CLOCKS, 2, "query.csv: nvidia-smi-query, 33% of its lines read, 2 lines"),
        ("ipmitool-sdr.txt", IPMITOOL_SDR, 7, "ipmitool-sdr.txt: 7 lines"),
    ],
    ids=["dcgmi-dmon-temp-power", "nvidia-smi-dmon", "query-gpu-unmapped-fields", "ipmitool-sdr"],
)
def test_records_no_reader_knows_keep_a_clean_case_from_healthy(
    tmp_path: Path, name: str, text: str, records: int, reason: str
) -> None:
    result = investigate([IDLE_NVSMI_Q, _write(tmp_path, name, text)])
    assert result["findings"] == [] and result["hypotheses"] == []  # nothing abnormal was seen ...
    assert _source(result, name)["unread_records"] == records
    assert result["verdict"] == "inconclusive"  # ... but what those records measure was not checked
    assert f"{reason} of records no reader knows" in result["verdict_reason"]


def test_a_free_text_training_log_beside_a_clean_status_output_stays_healthy(tmp_path: Path) -> None:
    log = _write(tmp_path, "train.log", TRAINING_LOG)
    lines = TRAINING_LOG.splitlines()
    assert (len(lines), sum(map(is_record, lines))) == (72, 25)  # the metrics lines
    result = investigate([IDLE_NVSMI_Q, log])
    assert "unread_records" not in _source(result, "train.log")
    assert result["verdict"] == "healthy"


def test_a_table_pasted_into_a_free_text_log_is_a_large_part_of_it(tmp_path: Path) -> None:
    """A log mostly of prose, with a run of RECORD_RUN or more table rows in it: the rows were not read."""
    table = NVSMI_DMON.splitlines()[:2] + NVSMI_DMON.splitlines()[2:] * 3  # 12 rows in a row
    lines = TRAINING_LOG.splitlines()
    pasted = "\n".join(lines[:30] + table + lines[30:]) + "\n"
    result = investigate([IDLE_NVSMI_Q, _write(tmp_path, "train.log", pasted)])
    assert _source(result, "train.log")["unread_records"] >= RECORD_RUN
    assert result["verdict"] == "inconclusive" and "train.log: " in result["verdict_reason"]


def test_records_change_no_diagnosis(tmp_path: Path) -> None:
    """The rule stands only between a clean reading and `healthy`."""
    kernel = _write(
        tmp_path,
        "kern.log",
        "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n",
    )  # constructed
    result = investigate([kernel, _write(tmp_path, "ipmitool-sdr.txt", IPMITOOL_SDR)])
    assert result["verdict"] == "diagnosed" and result["hypotheses"][0]["root_cause"] == "gpu_fell_off_bus"


@pytest.mark.parametrize(
    "line",
    [
        "GPU 1      120",  # dcgmi dmon (unseen11)
        "1, None",  # --query-gpu CSV, noheader
        "    0     69     34     45      -      0   2619   1980",
        "FAN1             | 3600 RPM          | ok",
        "Overall Health : Healthy",
        "Product Name                          : NVIDIA H100 80GB HBM3",
        '        "value" : "Healthy"',
        "{",
        '{"gpu": 0, "temperature": 34}',
        "<gpu_temp>34 C</gpu_temp>",
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-5a10e6e5"} 34',
        "step=100 loss=2.31 lr=0.0003",
        "20261207 04:00:00    0     69     34",  # nvidia-smi dmon -o DT
    ],
)
def test_a_record_line(line: str) -> None:
    assert is_record(line)


@pytest.mark.parametrize(
    "line",
    [
        "2026-11-30 09:12:09 - INFO - __main__ - Loading tokenizer from /models/llama-3-8b",
        "[2026-11-30 09:12:06,903] [INFO] done",
        "INFO: Starting training loop",
        "Epoch 3 finished in 42 s",
        "Traceback (most recent call last):",
        '  File "/opt/train/tr1-13B/pretrain_gpt.py", line 222, in <module>',
        "    iteration = train(forward_step_func,",
        "    loss = model[0].train_batch(data_iter=data_iterator)",
        "frame #12: PyDict_SetItemString + 0x4c (0x56434fcbd86c in /opt/conda/bin/python)",
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:07<00:00,  1.86s/it]",
        "ggml_cuda_compute_forward: ADD failed",
        "See https://pytorch.org/docs/stable/elastic/errors.html",
        "",
    ],
)
def test_not_a_record_line(line: str) -> None:
    assert not is_record(line)


def test_a_tally_is_mostly_records_or_a_long_run() -> None:
    half = Tally()
    for flag in (True, False) * 4:
        half.add(flag)
    assert half.unread_records() == 0  # 4 of 8: not more than half, no run
    most = Tally()
    for flag in (True, True, False):
        most.add(flag)
    assert most.unread_records() == 2
    run = Tally()
    for flag in [False] * 30 + [True] * RECORD_RUN + [False] * 30:
        run.add(flag)
    assert run.unread_records() == RECORD_RUN
