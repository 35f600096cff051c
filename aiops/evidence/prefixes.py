"""Prefixes a launcher, a log collector or a paste adds to every line, removed before a file is recognised and
parsed (the event's `raw` keeps the line as read; the host and time a prefix names are kept with the line):

- Open MPI's `mpirun --tag-output` (`[1,0]<stdout>:`), Slurm's `srun --label` (`0: `) and line numbers from
  `cat -n` (`     12\\t`) or an editor paste (`12 | `);
- a host in front of each line, as pdsh/clush/`kubectl logs --prefix`/Talos print it (`node7: `,
  `10.10.10.10: `);
- times: `dmesg` (`[ 1843.308145]`), `dmesg -T` (`[Sun Jan 11 09:52:01 2026]`), `dmesg -H` / `--reltime`
  (`[  +0.000844]`, `[Jan21 10:00]`), ISO and slashed stamps with or without zone, brackets or a trailing
  colon (`2025-11-25T13:58:49Z`, `[2026-06-23 15:45:07]`, `2025/11/25 13:58:49`), a facility and level
  (`kern  :warn  : `, `kern: warning: `), and syslog/journal stamps in any locale with their host
  (`Sep 18 03:19:01 node7 `, `11月 15 14:15:47 node7 `), and the program tag after them (`prog[pid]: `);
- containerd's and CRI-O's CRI log lines, as the kubelet keeps them under /var/log/pods (`<RFC3339Nano>
  stdout|stderr F|P `: the stream, then F for a full line or P for a partial one).

A prefix class is removed from a file's lines only when most of its first lines carry it (so a `Reason: ...`
line of one output is never read as a host), and repeatedly, in any order (`10.10.10.10: kern: warning:
[2026-04-22T21:27:51Z]: NVRM: ...` loses three).

A prefix of no known class (an unknown logging framework's `INFO - INFO - `, a wrapper's `[worker-3] `) is
removed too, as a literal, when most of the first lines carry the same text (at most `MAX_LITERAL` characters,
ending in a separator such as `-`, `]`, `|` or `:` and blanks) right before a time or a launcher's tag
(`_AFTER_LITERAL`: a kernel uptime stamp, a `dmesg -T`, ISO or syslog stamp, a facility, an mpirun or CRI tag):
`INFO - INFO - [ 6166.009184] mlxsw_spectrum ...` is read as the dmesg line it carries (a kernel line's own stamp
is left to the kernel-log parser, which knows the line by it). What follows a literal is never a host or a line
number, so the text that starts every line of a tool's own output (ibstat's indented `Rate: `, nvidia-smi's
table borders `|`) stays."""

from __future__ import annotations

import functools
import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

_MONTH = r"(?:[A-Z][a-z]{2}|\w{1,5}\.?|\d{1,2}\s?月)"
CLASSES: dict[str, re.Pattern[str]] = {
    "mpirun": re.compile(r"^\[\d{1,6},\d{1,7}\]<(?:stdout|stderr|stddiag)>:\s?"),
    "facility": re.compile(
        r"^(?:kern|user|daemon|syslog|auth|authpriv|local[0-7])\s{0,8}:\s{0,8}"
        r"(?:emerg|alert|crit|err|warning|warn|notice|info|debug)\s{0,8}:\s?"
    ),
    # containerd / CRI-O (the kubelet's CRI logging, kubernetes/community design-proposals/node/
    # kubelet-cri-logging.md): `2023-01-02T10:00:00.123456789Z stdout F ` (CRI-O writes a zone offset instead)
    "cri": re.compile(
        r"^(?P<stamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})) (?:stdout|stderr) [FP] "
    ),
    "iso": re.compile(
        r"^\[?(?P<stamp>\d{4}[-/.]\d{2}[-/.]\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
        r"(?:\s?(?:Z|UTC|[+-]\d{2}:?\d{2}))?)\]?:?\s+"
    ),
    "wall": re.compile(
        r"^\[(?P<stamp>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]\s?"
    ),
    "uptime": re.compile(r"^\[\s{0,12}(?P<uptime>\d{1,10}\.\d{1,9})\]\s?"),
    # `dmesg -H` / `dmesg --reltime`: `[Jan21 10:00]` on a line that starts a minute, `[  +0.000844]` after it
    "reltime": re.compile(r"^\[(?:\s{0,8}\+\s{0,4}\d{1,10}\.\d{1,9}|[A-Z][a-z]{2}\d{1,2} \d{2}:\d{2})\]\s?"),
    # syslog / `journalctl` short: `Sep 18 03:19:01 host ` (any locale's month), the program tag kept
    "syslog": re.compile(
        rf"^(?P<stamp>{_MONTH}\s{{1,2}}\d{{1,2}}\s\d{{2}}:\d{{2}}:\d{{2}})\s+(?P<host>[^\s\[\]]{{1,253}}?):?\s+"
    ),
    # a program tag after a syslog stamp (`nv-fabricmanager[4177]: `, `app[42]: `): what wrote the line
    "tag": re.compile(r"^(?P<prog>[A-Za-z][\w./@-]{0,63})\[\d{1,9}\]:\s?"),
    # a host name's labels are letters, digits and hyphens (RFC 1123; Kubernetes node names too): `node7: `, never
    # a key with an underscore (`established_by: `, `data_time: ` of a YAML or log line)
    "host": re.compile(
        r"^(?P<host>\d{1,3}(?:\.\d{1,3}){3}|[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9][A-Za-z0-9-]{0,62}){0,8}):\s"
    ),
    "numbered": re.compile(r"^\s{0,8}\d{1,7}(?:\t|\s?\|\s?|: )"),
}
# Words that start many lines as `Word: ...` and are never a host.
_NOT_HOSTS = frozenset(
    {
        "nvrm",
        "kernel",
        "nccl",
        "error",
        "err",
        "warn",
        "warning",
        "info",
        "debug",
        "note",
        "message",
        "reason",
        "state",
        "status",
        "gpu",
        "nvidia",
        "http",
        "https",
        "caused",
        "fatal",
        "critical",
        "trace",
        "summary",
        "total",
        "name",
        "type",
        "events",
        "hint",
        "exception",
        "runtimeerror",
        "traceback",
        "file",
        "cuda",
        "ucx",
        "slurmstepd",
        "slurmctld",
        "slurmd",
        # a training loop's progress lines (`Epoch: [1][0/25]\tTime ...`, `Train: 3 [ 100/5004]`)
        "epoch",
        "iter",
        "iteration",
        "step",
        "train",
        "training",
        "test",
        "val",
        "validation",
        "eval",
        "loss",
        "batch",
    }
)
# The classes a literal prefix may stand before: times and a launcher's tags, never a host, a program tag or a
# line number (a table's `| ` or ibstat's indent stands before text that reads as those)
_AFTER_LITERAL = ("mpirun", "cri", "facility", "iso", "wall", "uptime", "reltime", "syslog")
MAX_LITERAL = 40  # characters of a literal prefix at most
_LITERAL_QUOTE = '"'  # a literal prefix's name in a style is its text quoted: `"INFO - INFO - "`
# A kernel line's own stamps, left after a literal: the kernel-log parser reads them and knows the line by them
# (aiops/evidence/kernel.py), while `mlxsw_spectrum 0000:01:00.0 swp1: link down` alone reads as nothing
_KERNEL_STAMPS = ("uptime", "wall")
# A literal ends as a tag does, in a separator and blanks (`INFO - `, `[worker-3] `, `app | `): words that run
# into the stamp (`Kill task failed root 2024-01-25T15:12:23 node1` of `sinfo -R`) are the line's content
_SEPARATED = re.compile(r"[^\w\s]\s*$")
MAX_TOKENS = 6  # prefixes removed from one line at most
MAX_HOSTS = 16  # a host prefix names a few hosts, not one per line
KEEP_ORIGINALS = 4096  # lines whose original text is kept to restore `raw` (parsers cite the line just read)


@dataclass(frozen=True)
class Meta:
    """What a line's prefixes said: the host, the time as written, seconds since boot."""

    host: str | None = None
    stamp: str | None = None
    uptime_s: float | None = None


# `00: ff ff ...` (a hex dump's offsets) and `12: ` are no hosts
_OFFSET = re.compile(r"^[0-9a-fA-F]{1,4}$")


def _literal_name(text: str) -> str:
    """The style name of a literal prefix: its text quoted."""
    return f"{_LITERAL_QUOTE}{text}{_LITERAL_QUOTE}"


@functools.lru_cache(maxsize=64)
def _pattern(name: str) -> re.Pattern[str]:
    if name in CLASSES:
        return CLASSES[name]
    return re.compile(re.escape(name[len(_LITERAL_QUOTE) : -len(_LITERAL_QUOTE)]))  # a literal's name


def _match(name: str, text: str) -> re.Match[str] | None:
    match = _pattern(name).match(text)
    if match is None or name != "host":
        return match
    host = match.group("host")
    return None if host.lower() in _NOT_HOSTS or _OFFSET.match(host) or _is_tag(host) else match


def _is_tag(word: str) -> bool:
    """A word in capitals alone (`PULSE: `, `NOTICE: `, `WARN: `) is a program's tag or level before its message,
    not a host: host names are written in lower case or carry a digit, a hyphen or a dot (`node7`, `DGX-A100-01`)."""
    return word.isalpha() and word.isupper()


def split(text: str, classes: Iterable[str]) -> tuple[str, Meta, list[str]]:
    """`text` without the prefixes of `classes` at its start (repeatedly), what they said, and which were
    removed, in order."""
    allowed = tuple(classes)
    host: str | None = None
    stamp: str | None = None
    uptime: float | None = None
    found: list[str] = []
    if text[:1].isspace():  # a paste indented as a whole (`    [Sun Jan 11 ...] NVRM: ...`): not a host
        lead = text.lstrip()
        if any(_match(n, lead) is not None for n in allowed if n not in ("host", "numbered")):
            text = lead
    for _ in range(MAX_TOKENS):
        for name in allowed:
            match = _match(name, text) if name not in found else None  # each class once per line
            if match is None or not match.group(0):
                continue
            groups = match.groupdict()
            host = host or groups.get("host")
            stamp = stamp or groups.get("stamp")
            if groups.get("uptime") is not None and uptime is None:
                uptime = float(groups["uptime"])
            found.append(name)
            text = text[match.end() :]
            break
        else:
            break
        if found[-1].startswith(_LITERAL_QUOTE) and any(CLASSES[n].match(text) for n in _KERNEL_STAMPS):
            break  # the kernel line behind a literal, as the kernel wrote it
    return text, Meta(host.rstrip(":") if host else None, stamp, uptime), found


def style_of(head: Sequence[str], *, numbered: bool = False) -> tuple[str, ...]:
    """The prefix classes most non-empty lines of `head` carry (at least half of them); `numbered` only when
    asked (`   1 | ...` is also how `ipmitool sel list` starts its lines). A host prefix must name few hosts."""
    texts = [t for t in head if t.strip()]
    if not texts:
        return ()
    names = [n for n in CLASSES if numbered or n != "numbered"]
    literal = _repeated_literal(texts, names)
    if literal is not None:
        names.insert(0, literal)
    counts: Counter[str] = Counter()
    hosts: set[str] = set()
    for text in texts:
        _rest, meta, found = split(text, names)
        counts.update(set(found))
        if "host" in found and meta.host:
            hosts.add(meta.host)
    chosen = tuple(n for n in names if counts[n] * 2 >= len(texts))
    if "host" in chosen and len(hosts) > MAX_HOSTS:
        chosen = tuple(n for n in chosen if n != "host")
    return chosen


def _after_literal(text: str) -> bool:
    return any(CLASSES[name].match(text) for name in _AFTER_LITERAL)


def _literal_before_class(text: str) -> str | None:
    """The text in front of the first time or tag class (`_AFTER_LITERAL`) in `text`, when it is short and ends
    in a separator (`INFO - `, `[worker-3] `); None when `text` starts with such a class (a second stamp's `[` is
    no literal). A class starts at a word's start (`xJan 12 ...` is no syslog stamp after `x`)."""
    if _after_literal(text):
        return None
    for start in range(1, min(len(text) - 1, MAX_LITERAL) + 1):
        if text[start - 1].isalnum() and text[start].isalnum():
            continue
        if _after_literal(text[start:]):
            literal = text[:start]
            return literal if _SEPARATED.search(literal) else None
    return None


def _repeated_literal(texts: Sequence[str], names: Sequence[str]) -> str | None:
    """The name of the literal that most of `texts` carry, after their known prefixes, before a time or tag
    class; None when no literal is that common."""
    literals: Counter[str] = Counter()
    for text in texts:
        rest = split(text, names)[0]
        literal = _literal_before_class(rest)
        if literal is not None:
            literals[literal] += 1
    if not literals:
        return None
    literal, count = literals.most_common(1)[0]
    return _literal_name(literal) if count * 2 >= len(texts) else None


def strip(text: str, style: Sequence[str]) -> str:
    return split(text, style)[0] if style else text


class Stripper:
    """Strips a style's prefixes from numbered lines and remembers, for the recent lines, the original text
    and what the prefixes said (parsers cite the line just read)."""

    def __init__(self, style: Sequence[str]) -> None:
        self.style = tuple(style)
        self._originals: OrderedDict[int, tuple[str, Meta]] = OrderedDict()

    def lines(self, numbered: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        if not self.style:
            yield from numbered
            return
        for number, text in numbered:
            body, meta, _found = split(text, self.style)
            self._originals[number] = (text, meta)
            if len(self._originals) > KEEP_ORIGINALS:
                self._originals.popitem(last=False)
            yield number, body

    def original(self, number: int, fallback: str) -> str:
        kept = self._originals.get(number)
        return fallback if kept is None else kept[0]

    def meta(self, number: int) -> Meta:
        kept = self._originals.get(number)
        return Meta() if kept is None else kept[1]
