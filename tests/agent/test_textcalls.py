"""Tool calls written as text: recognised for offered tools only, never evaluated."""

from __future__ import annotations

import json

import pytest

from agent.adapters.openai_chat import ThinkSplitter
from agent.textcalls import CallTextHold, read_text_tool_calls

OFFERED = {"get_current_time"}


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}',
        'Sure.\n```json\n{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}'
        "\n```",
        '<tool_call>\n{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}\n'
        "</tool_call>",
        '[{"type": "function", "function": {"name": "get_current_time", '
        '"arguments": "{\\"timezone\\": \\"Asia/Tokyo\\"}"}}]',
        'get_current_time(timezone="Asia/Tokyo")',
        '[get_current_time(timezone="Asia/Tokyo")]',
        # Reason's block written again in Act, the tool's name as its plan (Qwen2.5-0.5B)
        '```json\n{"plan": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}, '
        '"tools_to_consider": ["get_current_time"], "finish": false}\n```',
    ],
)
def test_every_written_form_becomes_a_call(reply):
    calls, rest = read_text_tool_calls(reply, OFFERED)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"})
    ]
    assert "{" not in rest and "```" not in rest and "tool_call" not in rest
    assert calls[0].id.startswith("call_")


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "delete_everything", "arguments": {}}',
        "Use get_current_time to check.",
        '__import__("os").system("true")',
        "get_current_time(*args)",
        '{"a": 1}',
        '{"plan": "Look at the clock.", "tools_to_consider": [], "finish": false}',
    ],
)
def test_anything_else_stays_text(reply):
    assert read_text_tool_calls(reply, OFFERED) == ((), reply)


@pytest.mark.parametrize("ending", ["}", "", "}\n  "])
def test_a_call_that_ends_the_reply_short_of_its_braces_is_completed(ending):
    """llama.cpp with Qwen2.5-0.5B wrote `… "arguments": {"question": "…"}` and stopped."""
    cut = 'I will ask.\n\n{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"'
    calls, rest = read_text_tool_calls(cut + ending, OFFERED)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"})
    ]
    assert rest == "I will ask."


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "get_current_time", "arguments": {"timezone": "Asia/To',  # cut in a string
        '{"name": "get_current_time", "arguments": {"timezone": ',  # cut before a value
        '{"name": "get_current_time", "arguments": {"timezones": ["UTC"',  # an open list
        '{"name": "get_current_time", "arguments": {} and then more',  # not a cut: prose
        '{"name": "delete_everything", "arguments": {}',  # not offered
    ],
)
def test_a_cut_object_that_is_not_a_whole_call_stays_text(reply):
    assert read_text_tool_calls(reply, OFFERED) == ((), reply)


@pytest.mark.parametrize(
    "tail",
    [
        '"UTC", "Asia/Shanghai", "Asia/Shanghai", "Asia/Shanghai", "Asia/Sh',  # in a string
        '"UTC", "Asia/Shanghai", "Asia/Shanghai", "Asia/Shanghai", ',  # between items
    ],
)
def test_a_call_cut_inside_a_member_keeps_its_whole_members(tail):
    """llama.cpp with Qwen2.5-0.5B wrote the right tool and zone, then repeated one zone in
    `timezones` until the reply was closed: the call is what was whole before that."""
    reply = (
        '```json\n{\n  "name": "get_current_time",\n  "arguments": {\n'
        f'    "timezone": "Europe/London",\n    "timezones": [{tail}'
        "\n\n[Cut here: the reply began to repeat itself.]"
    )
    calls, _ = read_text_tool_calls(reply, OFFERED)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_current_time", {"timezone": "Europe/London"})
    ]


def test_a_repeated_call_runs_once():
    call = '{"name": "get_current_time", "arguments": {}}'
    calls, _ = read_text_tool_calls(f"{call}\n{call}\n{call}", OFFERED)
    assert len(calls) == 1


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_a_leading_think_block_is_split_out_across_chunks(size):
    text = "  <think>plan it</think>\nThe answer. <think>not thinking</think>"
    splitter = ThinkSplitter()
    pieces = []
    for i in range(0, len(text), size):
        pieces += splitter.feed(text[i : i + size])
    pieces += splitter.finish()
    thinking = "".join(p for is_thinking, p in pieces if is_thinking)
    shown = "".join(p for is_thinking, p in pieces if not is_thinking)
    assert thinking == "plan it"
    assert shown == "The answer. <think>not thinking</think>"


def test_an_oversized_reply_is_not_scanned():
    call = '{"name": "get_current_time", "arguments": {}}'
    huge = "{ " * 60_000 + call  # unbalanced braces: a scan would be quadratic
    assert read_text_tool_calls(huge, OFFERED) == ((), huge)
    assert read_text_tool_calls(call, OFFERED)[0]  # a normal reply still is read


def test_a_reply_is_held_only_while_it_may_become_a_call():
    hold = CallTextHold(["get_current_time"])
    assert hold.feed(" \n") == "" and hold.feed("get_curr") == ""  # a tool's name, so far
    assert hold.feed("ent_time(") == "" and hold.holding
    assert hold.feed('timezone="UTC")') == ""
    assert hold.settle("") == ""  # it was a call: nothing of it is shown
    prose = CallTextHold(["get_current_time"])
    assert prose.feed("  ") == "" and prose.feed("ge") == ""
    assert prose.feed("ntly, ") == "  gently, "  # no call begins so: out at once
    assert prose.feed("then more") == "then more" and prose.settle(None) == ""
    fence = CallTextHold([])
    assert fence.feed("``") == "" and fence.feed("`json\n{") == ""
    assert fence.settle(None) == "```json\n{"  # no call after all: shown whole
