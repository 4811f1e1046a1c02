"""pytest fixtures: each test gets its own real sluice broker (see sluice_node.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sluice_node import SluiceNode, start_cluster  # noqa: E402


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


def stop_nodes(request, nodes: list[SluiceNode]) -> None:
    """Kills `nodes`; keeps their work dirs and prints their log tails if the test failed."""
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for node in nodes:
        node.kill()
        if failed:
            print(f"\n[sluice harness] kept {node.work_dir} (log {node.log_path})\n{node.log_tail()}")
        else:
            shutil.rmtree(node.work_dir, ignore_errors=True)


@pytest.fixture
def start_node(request):
    """Factory: start_node({"num.partitions": "3"}) -> a ready SluiceNode, stopped after the test.
    On failure the work dir is kept and the broker log tail is printed."""
    nodes: list[SluiceNode] = []

    def start(settings: dict[str, str] | None = None, metrics: bool = False) -> SluiceNode:
        node = SluiceNode(settings, metrics=metrics)
        nodes.append(node)
        return node.start()

    yield start
    stop_nodes(request, nodes)


@pytest.fixture
def node(start_node) -> SluiceNode:
    return start_node()


@pytest.fixture
def cluster(request):
    """Factory: cluster({"broker.session.timeout.ms": "3000"}) -> three ready SluiceNodes (ids
    1-3, every one a quorum voter; `size=5` for five), stopped after the test; on failure their
    logs are kept."""
    started: list[SluiceNode] = []

    def start(settings: dict[str, str] | None = None, size: int = 3,
              metrics: bool = False) -> list[SluiceNode]:
        nodes = start_cluster(size, settings, metrics=metrics)
        started.extend(nodes)
        return nodes

    yield start
    stop_nodes(request, started)
