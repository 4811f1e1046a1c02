"""The Grafana dashboard (deploy/grafana/sluice-dashboard.json) and the metrics reference
(docs/metrics.md) name only metrics a real broker exports.

The static tests read the two files. The live test starts one node with metrics on, produces
to a topic, runs a consumer group that commits, scrapes /metrics and checks that every metric
the dashboard queries and every metric docs/metrics.md lists is in the scrape, with the type
and labels the reference gives it, and that the reference lists every family the scrape has. A
name missing from the scrape fails the test."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "sluice-dashboard.json"
METRICS_DOC = REPO / "docs" / "metrics.md"

# Written by Prometheus for every target, not by Sluice.
PROMETHEUS_METRICS = {"up"}
# PromQL words that look like metric names but are not.
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
                "or", "unless", "offset", "inf", "nan", "atan2"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

TOPIC = "grafana-dash"
GROUP = "grafana-dash-group"
PARTITIONS = 2
FIRST_RECORDS = 20   # consumed and committed
LATER_RECORDS = 10   # produced after the commit: the group's lag
DEADLINE_S = 60.0


# ------------------------------------------------------------------------------ PromQL

def metric_names(expr: str) -> set[str]:
    """Every metric name `expr` selects, histogram series names included as written."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)        # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)                   # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)                  # range and subquery selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", text):
        word = m.group(1)
        if word.lower() not in PROMQL_WORDS:
            names.add(word)
    return names


def family(name: str, histograms: set[str]) -> str:
    """`x_bucket` -> `x`; `x_sum` and `x_count` -> `x` when `x` is a histogram (so a gauge
    such as kafka_consumergroup_lag_sum keeps its name)."""
    if name.endswith("_bucket"):
        return name[: -len("_bucket")]
    for suffix in ("_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)]
    return name


def dashboard_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    exprs = []
    for panel in all_panels(dashboard):
        for t in panel.get("targets", []):
            exprs.append((f"panel {panel.get('title')!r} target {t.get('refId')}", t.get("expr", "")))
    for var in dashboard["templating"]["list"]:
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
        assert m, f"variable {var['name']}: expected label_values(metric, label), got {query!r}"
        exprs.append((f"variable {var['name']}", m.group(1)))
    return exprs


def all_panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return out


def dashboard_metrics(dashboard: dict, histograms: set[str]) -> dict[str, list[str]]:
    """Metric family -> where the dashboard uses it."""
    raw: dict[str, list[str]] = {}
    for where, expr in dashboard_exprs(dashboard):
        for name in metric_names(expr):
            raw.setdefault(name, []).append(where)
    histograms = histograms | {n[: -len("_bucket")] for n in raw if n.endswith("_bucket")}
    used: dict[str, list[str]] = {}
    for name, wheres in raw.items():
        if name not in PROMETHEUS_METRICS:
            used.setdefault(family(name, histograms), []).extend(wheres)
    return used


# ------------------------------------------------------------------------------ docs/metrics.md

def documented_metrics() -> dict[str, dict]:
    """Rows of docs/metrics.md's tables whose first header cell is `Metric`:
    name -> {"type": ..., "label_sets": [set of labels, ...]}. The Labels cell lists the
    alternatives separated by ` or `; `none` is a series without labels."""
    rows: dict[str, dict] = {}
    header = None
    for line in METRICS_DOC.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: "):
            continue
        if header[0] != "metric":
            continue
        assert len(cells) == len(header), f"docs/metrics.md: {len(header)} columns expected: {line!r}"
        name = re.fullmatch(r"`([A-Za-z_:][A-Za-z0-9_:]*)`", cells[0])
        assert name, f"docs/metrics.md: a Metric cell must be one `name`, got {cells[0]!r}"
        kind = cells[header.index("type")].lower()
        label_sets = []
        for alt in cells[header.index("labels")].split(" or "):
            label_sets.append(set() if alt.strip() == "none" else set(re.findall(r"`(\w+)`", alt)))
        rows[name.group(1)] = {"type": kind, "label_sets": label_sets}
    return rows


# ------------------------------------------------------------------------------ the scrape

SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Scrape:
    def __init__(self, text: str):
        self.text = text
        self.types: dict[str, str] = {}
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                self.types[name] = kind.strip()
            elif line and not line.startswith("#"):
                m = SAMPLE.match(line)
                assert m, f"unparseable exposition line: {line!r}"
                labels = dict(LABEL.findall(m.group(2) or ""))
                self.samples.append((m.group(1), labels, float(m.group(3))))
        self.names = {s[0] for s in self.samples}

    def has(self, fam: str, histograms: set[str]) -> bool:
        if fam in histograms:
            return all(fam + s in self.names for s in HISTOGRAM_SUFFIXES)
        return fam in self.names

    def type_of(self, fam: str) -> str | None:
        """The # TYPE of a family; a counter's TYPE line may name it with or without _total."""
        if fam in self.types:
            return self.types[fam]
        if fam.endswith("_total"):
            return self.types.get(fam[: -len("_total")])
        return None

    def label_sets(self, name: str) -> list[set[str]]:
        return [set(labels) for n, labels, _ in self.samples if n == name]

    def value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples of `name` carrying `labels`; None when there are none."""
        hits = [v for n, ls, v in self.samples
                if n == name and all(ls.get(k) == want for k, want in labels.items())]
        return sum(hits) if hits else None


def scrape(node) -> Scrape:
    with urllib.request.urlopen(f"{node.metrics_url}/metrics", timeout=10) as resp:
        return Scrape(resp.read().decode())


# ------------------------------------------------------------------------------ tests

def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def histogram_families(docs: dict[str, dict]) -> set[str]:
    return {name for name, row in docs.items() if row["type"] == "histogram"}


def test_dashboard_is_importable_json_whose_panels_all_query_prometheus():
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 36
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "topic"):
        assert variables[name]["type"] == "query", name
        assert variables[name]["datasource"]["uid"] == "${datasource}", name
    panels = all_panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    queried = [p for p in panels if p["type"] != "row"]
    assert len(queried) >= 20
    for panel in queried:
        title = panel.get("title")
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        assert panel.get("targets"), f"panel {title!r} has no targets"
        for t in panel["targets"]:
            assert t.get("expr", "").strip(), f"panel {title!r} target {t.get('refId')} has no expr"
            assert t["datasource"]["uid"] == "${datasource}", title
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), title
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == ["Overview", "Throughput", "Requests", "Replication", "Log", "Consumer groups",
                    "Network and memory"]


def test_metric_names_are_extracted_from_promql():
    expr = ('histogram_quantile(0.99, sum by (request, le) (rate('
            'kafka_network_requestmetrics_totaltimems_bucket{instance=~"$instance"}[$__rate_interval])))'
            ' / on (instance) group_left kafka_consumergroup_lag_sum + up')
    assert metric_names(expr) == {"kafka_network_requestmetrics_totaltimems_bucket",
                                  "kafka_consumergroup_lag_sum", "up"}
    hist = {"kafka_network_requestmetrics_totaltimems"}
    assert family("kafka_network_requestmetrics_totaltimems_count", hist) == \
        "kafka_network_requestmetrics_totaltimems"
    assert family("kafka_consumergroup_lag_sum", hist) == "kafka_consumergroup_lag_sum"


def test_dashboard_uses_only_metrics_the_reference_documents():
    docs = documented_metrics()
    used = dashboard_metrics(load_dashboard(), histogram_families(docs))
    undocumented = {name: wheres for name, wheres in used.items() if name not in docs}
    assert not undocumented, f"the dashboard queries metrics docs/metrics.md does not list: {undocumented}"


def wait_until(what: str, condition, deadline_s: float = DEADLINE_S, interval_s: float = 0.2):
    """Polls `condition` until it returns a truthy value; fails with `what` at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(interval_s)


def produce(node, count: int, start: int) -> None:
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5,
                  "log_level": 3})
    errors = []
    for i in range(start, start + count):
        p.produce(TOPIC, key=str(i).encode(), value=f"record-{i}".encode(),
                  on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(30) == 0, "records left undelivered"
    assert not errors, errors


def consume_and_commit(node, count: int) -> Consumer:
    """Joins GROUP, reads `count` records, commits them; returns the consumer (still a member)."""
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": GROUP,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3})
    c.subscribe([TOPIC])
    seen = []

    def read_all():
        msg = c.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            seen.append(msg)
        return len(seen) >= count

    wait_until(f"{count} records consumed by {GROUP}", read_all)
    c.commit(asynchronous=False)
    return c


def test_every_metric_the_dashboard_and_reference_name_is_exported(start_node):
    node = start_node(metrics=True)
    admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=15)[TOPIC].result(timeout=20)
    produce(node, FIRST_RECORDS, 0)
    consumer = consume_and_commit(node, FIRST_RECORDS)
    try:
        produce(node, LATER_RECORDS, FIRST_RECORDS)
        docs = documented_metrics()
        histograms = histogram_families(docs)
        used = dashboard_metrics(load_dashboard(), histograms)
        wanted = set(used) | set(docs)

        def settled():
            s = scrape(node)
            ready = (all(s.has(name, histograms) for name in wanted)
                     and s.value("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC)
                     == FIRST_RECORDS + LATER_RECORDS
                     and s.value("kafka_consumergroup_lag", consumergroup=GROUP, topic=TOPIC)
                     == LATER_RECORDS)
            return s if ready else None

        try:
            s = wait_until("every metric, the topic's records and the group's lag in /metrics", settled)
        except AssertionError:
            s = scrape(node)  # report what is missing from the last scrape
        missing_dash = {n: w for n, w in sorted(used.items()) if not s.has(n, histograms)}
        missing_docs = sorted(n for n in docs if not s.has(n, histograms))
        assert not missing_dash and not missing_docs, (
            f"not in the scrape of {node.metrics_url}/metrics:\n"
            f"  used by the dashboard: {json.dumps(missing_dash, indent=2)}\n"
            f"  listed in docs/metrics.md: {missing_docs}")

        problems = []
        for name, row in sorted(docs.items()):
            kind = s.type_of(name)
            if kind != row["type"]:
                problems.append(f"{name}: docs say {row['type']}, # TYPE says {kind}")
            series = name + "_bucket" if row["type"] == "histogram" else name
            extra = {"le"} if row["type"] == "histogram" else set()
            present = s.label_sets(series)
            for labels in row["label_sets"]:
                if labels | extra not in present:
                    problems.append(f"{series}: no series labelled exactly {sorted(labels | extra)} "
                                    f"(scraped label sets: {sorted(map(sorted, present))[:3]})")
        scraped = {family(n, histograms) for n in s.names}
        for name in sorted(scraped - set(docs)):
            problems.append(f"{name}: exported but not listed in docs/metrics.md")
        assert not problems, "docs/metrics.md disagrees with the scrape:\n  " + "\n  ".join(problems)

        assert s.value("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == \
            FIRST_RECORDS + LATER_RECORDS
        assert s.value("kafka_consumergroup_lag", consumergroup=GROUP, topic=TOPIC) == LATER_RECORDS
        assert s.value("kafka_consumergroup_lag_sum", consumergroup=GROUP, topic=TOPIC) == LATER_RECORDS
        assert s.value("kafka_consumergroup_members", consumergroup=GROUP) == 1
    finally:
        consumer.close()
