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


def stop_nodes(request, nodes: list[SluiceNode], failed: bool | None = None) -> None:
    """Kills `nodes`; keeps their work dirs and prints their log tails if the test failed."""
    if failed is None:
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
    Keyword arguments go to SluiceNode (`listeners`, `client_security`, `env`, ...).
    On failure the work dir is kept and the broker log tail is printed."""
    nodes: list[SluiceNode] = []

    def start(settings: dict[str, str] | None = None, metrics: bool = False, **kwargs) -> SluiceNode:
        node = SluiceNode(settings, metrics=metrics, **kwargs)
        nodes.append(node)
        return node.start()

    yield start
    stop_nodes(request, nodes)


@pytest.fixture(scope="module")
def start_module_node(request):
    """Factory like `start_node` for a broker shared by the tests of one module, stopped after
    the last; if any test of the module failed, its work dir is kept and its log tail printed."""
    nodes: list[SluiceNode] = []
    failed_before = request.session.testsfailed

    def start(settings: dict[str, str] | None = None, **kwargs) -> SluiceNode:
        node = SluiceNode(settings, **kwargs)
        nodes.append(node)
        return node.start()

    yield start
    stop_nodes(request, nodes, failed=request.session.testsfailed > failed_before)


@pytest.fixture
def node(start_node) -> SluiceNode:
    return start_node()


@pytest.fixture
def cluster(request):
    """Factory: cluster({"broker.session.timeout.ms": "3000"}) -> three ready SluiceNodes (ids
    1-3, every one a quorum voter; `size=5` for five; `per_node(id)`: settings of node `id`
    alone), stopped after the test; on failure their logs are kept."""
    started: list[SluiceNode] = []

    def start(settings: dict[str, str] | None = None, size: int = 3,
              metrics: bool = False, per_node=None) -> list[SluiceNode]:
        nodes = start_cluster(size, settings, metrics=metrics, per_node=per_node)
        started.extend(nodes)
        return nodes

    yield start
    stop_nodes(request, started)
