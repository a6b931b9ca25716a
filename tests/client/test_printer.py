"""The terminal client's printer in-process (client/printer.py): on a terminal the answer is
rendered whole, also one cut short, and the status line says what works; piped, raw text."""

from __future__ import annotations

import io
from typing import Any

from client.printer import Printer, Style


def frames(*kinds: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for kind, fields in kinds:
        frame = (
            {"type": "agent_update", "update_type": kind}
            if kind.startswith("agent_")
            else {"type": kind}
        )
        out.append({**frame, "run_id": "r1", **fields})
    return out


def shown(terminal: bool, *kinds: tuple[str, dict[str, Any]]) -> tuple[str, Printer]:
    out = io.StringIO()
    printer = Printer(out, Style(False), terminal)
    for frame in frames(*kinds):
        printer.frame(frame)
    return out.getvalue(), printer


def test_a_chat_reply_is_rendered_once_complete_on_a_terminal() -> None:
    text, _ = shown(
        True,
        ("chat_delta", {"delta": "**Hello** "}),
        ("chat_delta", {"delta": "world"}),
        ("chat_response", {"content": "**Hello** world"}),
        ("response_complete", {}),
    )
    assert text == "assistant:\nHello world\n"


def test_an_answer_cut_short_is_still_shown_and_said_so() -> None:
    text, _ = shown(
        True,
        ("agent_answer_delta", {"step": 1, "delta": "# Plan\n\n- first"}),
        ("agent_stopped", {"step": 1, "reason": "user"}),
        ("response_complete", {}),
    )
    assert text.startswith("answer (cut off):\n") and "• first" in text and "# Plan" not in text


def test_piped_output_streams_the_raw_text() -> None:
    text, _ = shown(
        False,
        ("chat_delta", {"delta": "**Hello** "}),
        ("chat_delta", {"delta": "world"}),
        ("chat_response", {"content": "**Hello** world"}),
        ("response_complete", {}),
    )
    assert text == "assistant: **Hello** world\n"


def test_the_status_line_names_the_phase_and_counts_what_streams() -> None:
    out = io.StringIO()
    printer = Printer(out, Style(False), terminal=True)
    for frame in frames(
        ("agent_turn_start", {"step": 2}),
        ("agent_reason", {"step": 2, "content": "Look it up."}),
    ):
        printer.frame(frame)
    printer.tick()
    assert out.getvalue().endswith(" step 2 · acting · 0 s")
    printer.frame(frames(("agent_answer_delta", {"step": 2, "delta": "It"}))[0])
    printer.tick()
    assert out.getvalue().endswith(" writing the answer · 0 s · 1 token")
    printer.frame(frames(("response_complete", {}))[0])
    printer.tick()
    assert not printer.status_shown  # nothing works: the line is gone
