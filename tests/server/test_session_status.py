"""A session's status moves only as `server.live.MOVES` allows; other moves are logged, not
raised (the store has them already), and nothing else changes the status (fast, no sockets)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import logging
from typing import Any, cast

import orjson
import pytest

import server.live
from agent.control import PendingQuestion, RunControl
from agent.events import InputRequested
from server.events import Event
from server.live import MOVES, ActiveRun, LiveSession, allowed_move
from server.storage.base import SessionRecord, SessionStatus, Store

_ALL = tuple(SessionStatus)
_REFUSED = {
    (SessionStatus.IDLE, SessionStatus.AWAITING_INPUT),
    (SessionStatus.IDLE, SessionStatus.AWAITING_APPROVAL),
}


class _Store:
    """Takes every batch: what `_apply` needs of a store, no more."""

    shared = False

    async def store_batch(self, *args: Any, **kwargs: Any) -> list[bytes]:
        return []


def _live(status: SessionStatus) -> LiveSession:
    record = SessionRecord("s1", "t", "u", status, "", 0, 0, 0)
    return LiveSession(record, cast(Store, _Store()), write_window_s=0)


def test_the_table_allows_every_protocol_move_and_refuses_a_wait_without_a_run() -> None:
    for old in _ALL:
        for new in _ALL:
            assert allowed_move(old, new) is ((old, new) not in _REFUSED), (old, new)
    assert set(MOVES) == set(_ALL)


def test_an_own_run_moves_through_its_statuses_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = _live(SessionStatus.IDLE)
    run_ = ActiveRun("r1", RunControl())
    live.claim_run(run_)
    question = {"question": "Which city?", "tool_call_id": "c1", "step": 1, "expires_at": 9}

    async def run() -> None:
        await live.publish([], status=SessionStatus.RUNNING, run_id="r1")
        run_.control.pose(PendingQuestion(**question))
        await live.publish(
            [], status=SessionStatus.AWAITING_INPUT, pending_input=question, run_id="r1"
        )
        assert (live.status, live.pending_input) == ("awaiting_input", question)
        assert run_.control.answer("Paris")
        await live.publish([], status=SessionStatus.RUNNING, run_id="r1")
        assert live.pending_input is None
        await live.publish([], status=SessionStatus.IDLE)

    with caplog.at_level(logging.DEBUG, logger="server.live"):
        asyncio.run(run())
    assert live.status == "idle"
    assert "unexpected status move" not in caplog.text


def test_a_refused_move_is_logged_and_made(caplog: pytest.LogCaptureFixture) -> None:
    live = _live(SessionStatus.IDLE)

    async def run() -> None:
        await live.publish([], status=SessionStatus.AWAITING_APPROVAL)

    with caplog.at_level(logging.WARNING, logger="server.live"):
        asyncio.run(run())
    assert live.status == "awaiting_approval"
    assert "unexpected status move idle -> awaiting_approval" in caplog.text


def test_a_followed_event_may_jump_and_is_only_noted(caplog: pytest.LogCaptureFixture) -> None:
    live = _live(SessionStatus.IDLE)  # its run's start was counted by `caught_up`, not read
    asked = InputRequested(1, "Which city?", "c1", 9_000)
    with caplog.at_level(logging.WARNING, logger="server.live"):
        live.settle(Event(asked, "s1", "r1"))
    assert live.status == "awaiting_input"
    assert live.pending_input is not None and live.pending_input["question"] == "Which city?"
    assert not caplog.records


def test_an_answer_elsewhere_moves_a_waiting_session_only() -> None:
    waiting = _live(SessionStatus.AWAITING_INPUT)
    waiting.answered_elsewhere()
    assert (waiting.status, waiting.pending_input) == ("running", None)
    ended = _live(SessionStatus.IDLE)  # the run's end was followed before the answer was taken
    ended.answered_elsewhere()
    assert ended.status == "idle"


def test_only_the_move_assigns_the_status() -> None:
    tree = ast.parse(inspect.getsource(server.live))
    writers = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                if any(isinstance(n, ast.Attribute) and n.attr == "status" for n in names):
                    writers.add(function.name)
    assert writers == {"__init__", "_move"}


def test_a_status_is_its_plain_string_on_the_wire() -> None:
    """What a client sees does not change with the enum: each status is sent as its string."""
    assert [status.value for status in SessionStatus] == [
        "idle",
        "running",
        "awaiting_input",
        "awaiting_approval",
    ]
    for status in SessionStatus:
        snapshot = _live(status).snapshot()
        assert orjson.dumps(snapshot["status"]) == f'"{status.value}"'.encode()
        assert json.dumps(snapshot["status"]) == f'"{status.value}"'
        assert str(status) == status.value and f"{status}" == status.value
    assert _live(cast(SessionStatus, "running")).status is SessionStatus.RUNNING
