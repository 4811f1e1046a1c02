"""A small, strict parser of the Prometheus text exposition format 0.0.4, for test_metrics.py.

Strict on purpose: a line that does not parse, a bad escape, a float Python would accept but the
format does not (`1_000`, `infinity`), a duplicate series, a family split into two groups, a
TYPE line after its samples, a histogram whose buckets decrease or whose `+Inf` bucket differs
from `_count`, or a missing final line feed, all raise `FormatError` naming the line. Parsing
a scrape is thereby a test of the broker's format too.

    expo = parse(text)
    expo.value("kafka_server_replicamanager_leadercount")          # exact label set (none here)
    expo.total("kafka_log_log_logendoffset", topic="orders")       # sum over series with these labels
    expo.series("kafka_network_requestmetrics_totaltimems_bucket", request="Produce")
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Go's strconv.ParseFloat as the format uses it, minus Go's hex floats and underscores.
FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|Inf|inf)|NaN|nan")
TIMESTAMP = re.compile(r"-?[0-9]+")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SUMMARY_SUFFIXES = ("_sum", "_count")


class FormatError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]  # sorted (name, value) pairs
    value: float
    line_no: int
    line: str

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass
class Exposition:
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # family name -> type
    helps: dict[str, str] = field(default_factory=dict)

    def series(self, name: str, **labels: str) -> list[Sample]:
        """Samples named `name` whose labels include `labels` (other labels may be present)."""
        want = {k: str(v) for k, v in labels.items()}
        return [s for s in self.samples if s.name == name and all(s.label_dict.get(k) == v for k, v in want.items())]

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the one series named `name` with exactly `labels`, or None if absent."""
        key = tuple(sorted((k, str(v)) for k, v in labels.items()))
        for s in self.samples:
            if s.name == name and s.labels == key:
                return s.value
        return None

    def total(self, name: str, **labels: str) -> float:
        """Sum over `series(name, **labels)` (0 when there is none)."""
        return sum(s.value for s in self.series(name, **labels))

    def lines(self, prefix: str) -> list[str]:
        """The raw sample lines whose name starts with `prefix` (for failure messages)."""
        return [s.line for s in self.samples if s.name.startswith(prefix)]


def _unescape(text: str, allowed: dict[str, str], line_no: int, what: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise FormatError(f"line {line_no}: bad escape in {what}: {text[i:i + 2]!r}")
            out.append(allowed[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_float(text: str, line_no: int) -> float:
    if not FLOAT.fullmatch(text):
        raise FormatError(f"line {line_no}: not a sample value: {text!r}")
    return float(text)


def _parse_labels(line: str, pos: int, line_no: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Parses `{a="x",b="y"}` starting at line[pos] == "{"; returns (sorted labels, position after "}")."""
    assert line[pos] == "{"
    pos += 1
    labels: dict[str, str] = {}
    while True:
        if pos < len(line) and line[pos] == "}":
            return tuple(sorted(labels.items())), pos + 1
        m = LABEL_NAME.match(line, pos)
        if not m:
            raise FormatError(f"line {line_no}: expected a label name at column {pos + 1}: {line!r}")
        name = m.group(0)
        pos = m.end()
        if line[pos:pos + 2] != '="':
            raise FormatError(f"line {line_no}: expected =\" after label {name!r}: {line!r}")
        pos += 2
        start = pos
        while pos < len(line) and line[pos] != '"':
            pos += 2 if line[pos] == "\\" else 1
        if pos >= len(line):
            raise FormatError(f"line {line_no}: unterminated value of label {name!r}: {line!r}")
        value = _unescape(line[start:pos], {"\\": "\\", '"': '"', "n": "\n"}, line_no, f"label {name!r}")
        pos += 1
        if name in labels:
            raise FormatError(f"line {line_no}: label {name!r} twice: {line!r}")
        labels[name] = value
        if pos < len(line) and line[pos] == ",":
            pos += 1
        elif pos < len(line) and line[pos] == "}":
            continue
        else:
            raise FormatError(f"line {line_no}: expected , or }} after label {name!r}: {line!r}")


def family_of(name: str, types: dict[str, str]) -> str:
    """The metric family a sample name belongs to, by the TYPE lines seen so far."""
    if name in types:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) == "histogram":
            return base
        if name.endswith(suffix) and suffix in SUMMARY_SUFFIXES and types.get(base) == "summary":
            return base
    if name.endswith("_total") and types.get(name[: -len("_total")]) == "counter":
        return name[: -len("_total")]
    return name


def parse(text: str) -> Exposition:
    if text and not text.endswith("\n"):
        raise FormatError("the last line does not end with a line feed")
    expo = Exposition()
    seen_families: set[str] = set()  # families whose samples already started
    closed: set[str] = set()  # families whose group of lines has ended
    current: str | None = None
    keys: set[tuple[str, tuple]] = set()
    for line_no, line in enumerate(text.split("\n")[:-1] if text else [], start=1):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE"):
                kind, name = parts[1], parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise FormatError(f"line {line_no}: bad metric name in {kind}: {line!r}")
                rest = parts[3] if len(parts) == 4 else ""
                if kind == "HELP":
                    if name in expo.helps:
                        raise FormatError(f"line {line_no}: second HELP for {name}")
                    expo.helps[name] = _unescape(rest, {"\\": "\\", "n": "\n"}, line_no, "HELP")
                else:
                    if rest not in TYPES:
                        raise FormatError(f"line {line_no}: unknown type {rest!r}: {line!r}")
                    if name in expo.types:
                        raise FormatError(f"line {line_no}: second TYPE for {name}")
                    if name in seen_families:
                        raise FormatError(f"line {line_no}: TYPE for {name} after its samples")
                    expo.types[name] = rest
                continue
            if line.startswith("# ") or line == "#":
                continue  # a plain comment
            raise FormatError(f"line {line_no}: a comment must start with '# ': {line!r}")
        m = METRIC_NAME.match(line)
        if not m:
            raise FormatError(f"line {line_no}: does not start with a metric name: {line!r}")
        name = m.group(0)
        pos = m.end()
        labels: tuple[tuple[str, str], ...] = ()
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos, line_no)
        rest = line[pos:]
        if not rest or rest[0] not in " \t":
            raise FormatError(f"line {line_no}: expected whitespace before the value: {line!r}")
        fields = re.split(r"[ \t]+", rest.strip(" \t"))  # not str.split: a \r must fail
        if len(fields) not in (1, 2):
            raise FormatError(f"line {line_no}: expected a value and an optional timestamp: {line!r}")
        value = _parse_float(fields[0], line_no)
        if len(fields) == 2 and not TIMESTAMP.fullmatch(fields[1]):
            raise FormatError(f"line {line_no}: bad timestamp {fields[1]!r}")
        family = family_of(name, expo.types)
        if family != current:
            if family in closed:
                raise FormatError(f"line {line_no}: family {family} resumes after other families (one group per family): {line!r}")
            if current is not None:
                closed.add(current)
            current = family
        seen_families.add(family)
        key = (name, labels)
        if key in keys:
            raise FormatError(f"line {line_no}: duplicate series: {line!r}")
        keys.add(key)
        kind = expo.types.get(family, "untyped")
        if kind == "counter" and (value < 0 or math.isnan(value)):
            raise FormatError(f"line {line_no}: counter with value {value}: {line!r}")
        if kind == "histogram" and name == family:
            raise FormatError(f"line {line_no}: a histogram sample must be _bucket, _sum or _count: {line!r}")
        if kind == "histogram" and name.endswith("_bucket") and "le" not in dict(labels):
            raise FormatError(f"line {line_no}: a histogram bucket without le: {line!r}")
        expo.samples.append(Sample(name, labels, value, line_no, line))
    _check_histograms(expo)
    return expo


def _check_histograms(expo: Exposition) -> None:
    for family, kind in expo.types.items():
        if kind != "histogram":
            continue
        groups: dict[tuple, list[tuple[float, Sample]]] = {}
        for s in expo.samples:
            if s.name == family + "_bucket":
                rest = tuple(kv for kv in s.labels if kv[0] != "le")
                le = s.label_dict["le"]
                if not FLOAT.fullmatch(le):
                    raise FormatError(f"line {s.line_no}: le is not a number: {s.line!r}")
                groups.setdefault(rest, []).append((float(le), s))
        for rest, buckets in groups.items():
            ordered = sorted(buckets, key=lambda b: b[0])
            if len({b[0] for b in ordered}) != len(ordered):
                raise FormatError(f"{family}{dict(rest)}: two buckets with one le")
            for (_, a), (_, b) in zip(ordered, ordered[1:]):
                if b.value < a.value:
                    raise FormatError(f"{family}{dict(rest)}: buckets decrease: {a.line!r} then {b.line!r}")
            if ordered[-1][0] != math.inf:
                raise FormatError(f"{family}{dict(rest)}: no le=\"+Inf\" bucket")
            count = expo.value(family + "_count", **dict(rest))
            if count is None or expo.value(family + "_sum", **dict(rest)) is None:
                raise FormatError(f"{family}{dict(rest)}: buckets without _count or _sum")
            if count != ordered[-1][1].value:
                raise FormatError(f"{family}{dict(rest)}: +Inf bucket {ordered[-1][1].value} != _count {count}")


def _self_check() -> None:
    """Canned expositions: good ones parse to the expected figures, each bad one is refused."""
    good = (
        '# HELP kafka_server_brokertopicmetrics_messagesin_total Records appended as leader.\n'
        '# TYPE kafka_server_brokertopicmetrics_messagesin_total counter\n'
        'kafka_server_brokertopicmetrics_messagesin_total 12\n'
        'kafka_server_brokertopicmetrics_messagesin_total{topic="a"} 5\n'
        'kafka_server_brokertopicmetrics_messagesin_total{topic="b\\"q\\\\\\n",} 7e0\n'
        '\n'
        '# TYPE kafka_network_requestmetrics_totaltimems histogram\n'
        'kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="1"} 2\n'
        'kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="10.0"} 3\n'
        'kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="+Inf"} 4\n'
        'kafka_network_requestmetrics_totaltimems_sum{request="Produce"} 31.5\n'
        'kafka_network_requestmetrics_totaltimems_count{request="Produce"} 4\n'
        '# TYPE up gauge\n'
        'up{} -1 1700000000000\n'
        'nan_gauge NaN\n'
        '# a plain comment\n'
    )
    e = parse(good)
    assert e.value("kafka_server_brokertopicmetrics_messagesin_total") == 12
    assert e.value("kafka_server_brokertopicmetrics_messagesin_total", topic='b"q\\\n') == 7
    assert e.total("kafka_server_brokertopicmetrics_messagesin_total", topic="a") == 5
    assert e.total("kafka_server_brokertopicmetrics_messagesin_total") == 24
    assert e.value("kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == 4
    assert len(e.series("kafka_network_requestmetrics_totaltimems_bucket", request="Produce")) == 3
    assert e.value("up") == -1 and math.isnan(e.value("nan_gauge"))
    assert e.types["kafka_network_requestmetrics_totaltimems"] == "histogram"
    # The counter's TYPE may name the family without _total.
    e = parse("# TYPE x counter\nx_total 1\n")
    assert e.value("x_total") == 1
    assert parse("") == Exposition()

    bad = {
        "no final line feed": "a 1",
        "CRLF": "a 1\r\n",
        "no value": "a\n",
        "no space": "a{b=\"c\"}1\n",
        "underscore float": "a 1_000\n",
        "infinity": "a infinity\n",
        "bad escape": 'a{b="\\t"} 1\n',
        "unterminated": 'a{b="c} 1\n',
        "unquoted label": "a{b=c} 1\n",
        "label twice": 'a{b="1",b="2"} 1\n',
        "bad label name": 'a{1b="1"} 1\n',
        "three fields": "a 1 2 3\n",
        "bad timestamp": "a 1 1.5\n",
        "duplicate": 'a{b="1"} 1\na{b="1"} 2\n',
        "split family": "a 1\nb 1\na{x=\"y\"} 1\n",
        "type after samples": "a 1\n# TYPE a gauge\n",
        "unknown type": "# TYPE a meter\na 1\n",
        "two types": "# TYPE a gauge\n# TYPE a gauge\na 1\n",
        "comment without space": "#x\n",
        "negative counter": "# TYPE a_total counter\na_total -1\n",
        "decreasing buckets": '# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n',
        "inf != count": '# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n',
        "no +Inf": '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n',
        "no count": '# TYPE h histogram\nh_bucket{le="+Inf"} 1\nh_sum 1\n',
        "bucket without le": '# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n',
        "bare histogram sample": '# TYPE h histogram\nh 1\n',
        "garbage": "<html>\n",
    }
    for what, text in bad.items():
        try:
            parse(text)
        except FormatError:
            continue
        raise AssertionError(f"the parser accepted {what}: {text!r}")


_self_check()
