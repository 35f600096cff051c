"""Lines in the shape of structured records, and texts holding records that no reader understood.

A tool that reports a state prints records: columns of numbers (`nvidia-smi dmon`, `dcgmi dmon`), CSV rows
(`nvidia-smi --query-gpu=... --format=csv`), `key: value` or `key=value` pairs, JSON or XML. When no format's
parser read such lines, what they measure was never checked: the generic reader only looks for failure words,
and `1, Reset` or a column holding `120` under a field id has none (evals/real/unseen11-2026-12-07: an Xid 120 in
`dcgmi dmon -e 230` and a recovery action `Reset` in a CSV row sat in files read as generic text, and a DCGM
health JSON saying Healthy made the verdict `healthy`). The verdict (aiops/evidence/verdict.py) does not call a
case healthy while such a text is in it.

`is_record(line)` is deliberately simple; a line is a record when, stripped of blanks and of a leading time
stamp (`2026-12-07 04:00:00,123`, `[2026-12-07T04:00:00Z]`, `04:00:00`), it is one of:
- JSON, XML or a metric: a brace or bracket alone (`{`, `],`), a member (`"key" : ...`), a quoted string alone,
  a line that parses as a JSON object or array, an XML element (`<gpu_temp>45 C</gpu_temp>`) or declaration, a
  Prometheus sample (`DCGM_FI_DEV_GPU_TEMP{gpu="0"} 34`);
- `key: value` / `key=value`: a key of at most five words (starting with a letter; the colon followed by a
  blank, so that `12:00:00` and `https://` are no pairs) and a short value (one to four tokens, at most
  one of them a word of letters, or two beside a number: `Healthy`, `NVIDIA H100 80GB HBM3`, `535.104.05`,
  `45 degrees C`; `ADD failed` is a message), not a statement of code (a value cut after `,` or `(`, or a call
  assigned with `=`);
- a row of delimited fields (`|`, tab, `,` or `;`): two fields or more, one of them at least a number (up to
  three tokens, one a number: `0`, `45 degrees C`), and more than half of them a number or one plain token
  (`None`, `ok`, `Reset`; not `f(x`, `"a.py"`);
- a row of blank-separated columns: more than half of its tokens numbers with at most a short unit (`69`,
  `2619`, `50%`, `100G`, `-`, `N/A`, `0x1f`).

Free text is not: a program's messages carry words (`Epoch 3 finished in 42 s`, `INFO: Starting training
loop`), and the time stamp in front of them is set aside before the line is judged. A progress bar (tqdm's
`100%|████| 5/5`) is a record of progress, not of the hardware: not counted.

A text holds records no reader knows (`unread_records`) when the lines its format's parser did not read (every
line, for a text read by the generic reader) include record lines that are more than `RECORD_SHARE` of its
non-blank lines (the file is mostly records), or a run of at least `RECORD_RUN` record lines in a row (a large
part of it: a table pasted into a log)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# More than this share of a text's non-blank lines unread records: the text is mostly records.
RECORD_SHARE = 0.5
# This many unread record lines in a row (blank lines between them neither count nor break the run): a table or
# a dump inside a text that is otherwise something else.
RECORD_RUN = 8

_MAX_KEY_WORDS = 5
_MAX_VALUE_TOKENS = 4
_MAX_VALUE_WORDS = 2  # words of letters in a pair's value beside a number: more is a sentence
_MAX_FIELD_TOKENS = 3

_JSON_PUNCT = frozenset({"{", "}", "[", "]", "{},", "[],", "},", "],", "{}", "[]"})
_JSON_MEMBER = re.compile(r'^"[^"]{1,120}"\s*:')
_JSON_STRING = re.compile(r'^"[^"]{0,200}",?$')
# A Prometheus exposition sample: `DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-..."} 34`, a time stamp after it or not
_SAMPLE = re.compile(
    r"^[A-Za-z_:][\w:]{0,200}(?:\{[^{}]{0,2000}\})?\s+[-+]?(?:\d[\d.eE+-]*|NaN|Inf)(?:\s+\d{1,20})?$"
)
_XML = re.compile(r"^<(?:\?xml\b|/?[A-Za-z_][\w.:-]{0,60}(?:\s[^<>]{0,200})?/?>)")
_PAIR = re.compile(r"^(?P<key>[A-Za-z_][\w .()/#%'-]{0,60}?)\s*(?P<sep>:(?=\s|$)|=)\s*(?P<value>.*)$")
_CONTINUED = (",", "(", "[", "{", "\\")  # a value cut there goes on in the next line: code, not a reading
_TOKEN = re.compile(r"^[\w.%/+:\[\]-]+$")  # a one-token field: a name or a state (`None`, `ok`, `Reset`)
_WORD = re.compile(r"^[A-Za-z][a-z]+[.,;!?]?$|^[a-z]{2,}[.,;!?]?$|^[A-Z]{2,}[a-z]*[.,;!?]?$")
_VALUE = re.compile(
    r"^[-+]?(?:\d[\d.,:/]*|\.\d+)(?:[eE][-+]?\d{1,3})?[A-Za-z%/]{0,4}$|^-$|^N/A$|^0x[0-9a-fA-F]+$"
)
_BRACKETS = "{}[]()\"',;"  # around a value in a JSON or Python literal: `{'loss': 2.31,`, `0.04}`
_STAMP = re.compile(
    r"^\[?(?:\d{4}[-/.]?\d{2}[-/.]?\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d{1,9})?)?"
    r"|\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?)(?:Z|[+-]\d{2}:?\d{2})?\]?\s+"
)
_PROGRESS = re.compile(r"[█▏▎▍▌▋▊▉#]{3,}\|")
_DELIMITERS = ("|", "\t", ",", ";")


def is_record(line: str) -> bool:
    """The line (a non-blank one) is in one of the shapes of a structured record (module docstring)."""
    text = _STAMP.sub("", line.strip(), count=1)
    if not text or _PROGRESS.search(text):
        return False
    return _structured(text) or _pair(text) or _delimited(text) or _columns(text)


def _structured(text: str) -> bool:
    """JSON, XML or a Prometheus sample (each told first by its first character, the cheap test)."""
    first = text[0]
    if first == '"':
        return _JSON_MEMBER.match(text) is not None or _JSON_STRING.match(text) is not None
    if first == "<":
        return _XML.match(text) is not None
    if first in "{[]}":
        if text in _JSON_PUNCT:
            return True
        try:
            return text[-1] in "}]" and isinstance(json.loads(text), (dict, list))
        except (ValueError, RecursionError):  # a line of 30,000 nested arrays: not a record, text
            return False
    return _SAMPLE.match(text) is not None


def _words(tokens: list[str]) -> int:
    return sum(1 for token in tokens if _WORD.match(token))


def _pair(text: str) -> bool:
    match = _PAIR.match(text)
    if match is None or len(match.group("key").split()) > _MAX_KEY_WORDS:
        return False
    value = match.group("value")
    if value.endswith(_CONTINUED) or ("(" in value and match.group("sep") == "="):
        return False  # a statement of code (`loss = model(batch)`, `x = f(a,`), not a reading
    tokens = value.split()
    if not 0 < len(tokens) <= _MAX_VALUE_TOKENS:
        return False
    words = _words(tokens)
    return words <= 1 or (words <= _MAX_VALUE_WORDS and any(_number(token) for token in tokens))


def _delimited(text: str) -> bool:
    delimiter = next((d for d in _DELIMITERS if d in text), None)
    if delimiter is None:
        return False
    fields = [f.split() for f in text.strip("|").split(delimiter)]
    fields = [f for f in fields if f]
    numeric = [f for f in fields if len(f) <= _MAX_FIELD_TOKENS and any(_number(t) for t in f)]
    tokens = [f for f in fields if len(f) == 1 and _TOKEN.match(f[0]) and f not in numeric]
    return len(fields) >= 2 and bool(numeric) and (len(numeric) + len(tokens)) * 2 > len(fields)


def _number(token: str) -> bool:
    return _VALUE.match(token.strip(_BRACKETS)) is not None


def _columns(text: str) -> bool:
    tokens = text.split()
    others = 0  # tokens that are no number: half of them and it is no row of numbers
    for token in tokens:
        if not _number(token):
            others += 1
            if others * 2 >= len(tokens):
                return False
    return bool(tokens)


@dataclass
class Tally:
    """A text's non-blank lines, in order, and which of them were unread records (blank lines are not added:
    they neither count nor break a run)."""

    non_blank: int = 0
    records: int = 0
    run: int = 0
    longest_run: int = 0

    def add(self, unread_record: bool) -> None:
        self.non_blank += 1
        if not unread_record:
            self.run = 0
            return
        self.records += 1
        self.run += 1
        self.longest_run = max(self.longest_run, self.run)

    def unread_records(self) -> int:
        """The unread record lines when they make a large part of the text (module docstring), else 0."""
        if self.records and (self.records > RECORD_SHARE * self.non_blank or self.longest_run >= RECORD_RUN):
            return self.records
        return 0
