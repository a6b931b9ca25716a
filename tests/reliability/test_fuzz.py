"""Throw random and mutated frames at a live server: it never crashes, never leaks a run, and
always answers with a docs/wire-protocol.md error code or valid run events."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from tests.fakes.threaded import ThreadedServer, threaded_server

ERROR_CODES = {
    "invalid_json",
    "unknown_type",
    "invalid_message",
    "run_in_progress",
    "too_many_runs",
    "no_active_run",
    "not_awaiting_input",
    "llm_error",
    "storage_error",
    "internal_error",
}
# Every update type a client may meet is documented: v1's in docs/wire-protocol.md, the
# extensions (agent_user_message, agent_plan, …) in docs/protocol.md.
_DOCS = Path(__file__).resolve().parents[2] / "docs"
UPDATE_TYPES = {
    name
    for doc in ("wire-protocol.md", "protocol.md")
    for name in re.findall(r"`(agent_[a-z_]+)`", (_DOCS / doc).read_text(encoding="utf-8"))
}
TOP_TYPES = {
    "error",
    "agent_update",
    "tool_start",
    "tool_complete",
    "tool_error",
    "chat_delta",
    "chat_response",
    "response_complete",
}
PROBE = json.dumps({"type": "zz_probe"})

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
field_values = st.one_of(
    json_values,
    st.sampled_from(
        [
            "stop",
            "hi",
            "",
            " ",
            0,
            1,
            3,
            50,
            51,
            -1,
            True,
            False,
            None,
            "3",
            ["get_current_time"],
            ["nope"],
            [],
        ]
    ),
)
typed_frames = st.fixed_dictionaries(
    {"type": st.sampled_from(["chat", "agent_control", "agent_user_input"])},
    optional={
        "content": field_values,
        "agent_mode": field_values,
        "agent_max_steps": field_values,
        "tools": field_values,
        "action": field_values,
    },
).map(json.dumps)
frames = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=50),
    json_values.map(json.dumps),
    typed_frames,
    typed_frames.map(lambda raw: raw[: len(raw) // 2]),  # cut mid-frame
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    db = tmp_path_factory.mktemp("fuzz") / "agent.db"
    with threaded_server(db, agent={"request_input_timeout_s": 1}) as server:
        yield server


def _check(frame: Any) -> None:
    assert isinstance(frame, dict), frame
    if frame["type"] == "error":
        assert frame["code"] in ERROR_CODES, frame
        assert isinstance(frame["message"], str) and frame["message"]
    elif frame["type"] == "agent_update":
        assert frame["update_type"] in UPDATE_TYPES, frame
    else:
        assert frame["type"] in TOP_TYPES, frame


def _read_until(ws: ClientConnection, done: Any) -> None:
    while True:
        frame = json.loads(ws.recv(timeout=15))
        _check(frame)
        if done(frame):
            return


def _is_probe_reply(frame: dict[str, Any]) -> bool:
    return frame.get("code") == "unknown_type" and "zz_probe" in frame["message"]


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(sent=st.lists(frames, min_size=1, max_size=4))
def test_random_frames_get_protocol_answers_and_leak_nothing(live: ThreadedServer, sent):
    with connect(f"ws://{live.address}/ws", max_size=None) as ws:
        hello = json.loads(ws.recv(timeout=5))
        assert hello["type"] == "session"
        for frame in sent:
            ws.send(frame)
            ws.send(PROBE)
            _read_until(ws, _is_probe_reply)
        # Leave nothing running: stop whatever a fuzzed chat started.
        ws.send(json.dumps({"type": "agent_control", "action": "stop"}))
        _read_until(
            ws, lambda f: f.get("code") == "no_active_run" or f["type"] == "response_complete"
        )


def test_after_the_fuzzing_the_server_is_healthy_and_idle(live: ThreadedServer):
    hub = live.app.state.services.hub
    assert live.call(_settled(hub)) == 0
    with connect(f"ws://{live.address}/ws") as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "session"


async def _settled(hub: Any) -> int:
    import asyncio

    await asyncio.wait_for(hub.wait_empty(), 10)
    return int(hub.active_runs())
