"""The garbage-collector policy: set by `agent-server serve`, which owns its process, and left
alone by an app embedded in someone else's process (these tests run it that way)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from server import cli, runner
from server.runner import GC_THRESHOLDS, settle_heap


@pytest.fixture
def gc_state() -> Iterator[None]:
    """Put the collector back as it was: these tests run inside pytest's process."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_settling_freezes_what_startup_built_and_collects_young_objects_less_often(gc_state):
    assert gc.get_freeze_count() == 0
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == GC_THRESHOLDS


def test_serve_runs_a_server_that_owns_its_process(gc_state, monkeypatch, tmp_path):
    made: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, config: object, **options: Any) -> None:
            made.append(options)

        def run(self, sockets: object = None) -> None:
            return None

    monkeypatch.setattr(runner, "AgentServer", Recorder)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["serve", "--port", "0"]) == 0
    assert made == [{"owns_process": True}]


async def test_an_embedded_server_leaves_the_collector_alone(gc_state, server_factory):
    thresholds = gc.get_threshold()
    async with server_factory() as running, await running.client() as c:
        await c.recv()  # started and serving
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == thresholds
