"""Phase replies as one JSON object (agent/structured.py): what streams, what is read, and the
older prose-then-block form still read as before."""

from __future__ import annotations

import json

import pytest

from agent.parsing import OBSERVE_KEYS, REASON_KEYS, observe_ends_run
from agent.ports import ToolSpec
from agent.structured import NO_TOOL, PhaseStream, call_schema, observe_schema, reason_schema


def _observe() -> PhaseStream:
    return PhaseStream(
        OBSERVE_KEYS, shown="observation", answer="final_answer", answer_after=observe_ends_run
    )


def _feed(stream: PhaseStream, reply: str, size: int = 3) -> tuple[str, str]:
    """(what was shown, what was given as answer), fed `size` characters at a time."""
    shown, answer = [], []
    for i in range(0, len(reply), size):
        shown.append(stream.feed(reply[i : i + size]))
        answer.append(stream.take_answer())
    shown.append(stream.finish())
    answer.append(stream.take_answer())
    return "".join(shown), "".join(answer)


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
def test_the_thought_streams_and_the_block_is_read(size: int):
    reply = json.dumps(
        {
            "thought": 'I will look up "Tokyo".\nThen answer é 😀.',
            "plan": "Get the time",
            "tools_to_consider": ["get_current_time"],
            "finish": False,
        }
    )  # json.dumps escapes the é and the emoji (a surrogate pair)
    stream = PhaseStream(REASON_KEYS, shown="thought")
    shown, answer = _feed(stream, reply, size)
    assert shown == 'I will look up "Tokyo".\nThen answer é 😀.' and answer == ""
    assert stream.control == json.loads(reply)
    assert stream.content == shown.strip() and stream.settled


def test_the_answer_streams_once_the_block_says_the_run_ends():
    reply = (
        '{"observation": "Found it.", "should_continue": false, "final_answer": "It is **9:00**."}'
    )
    stream = _observe()
    shown, answer = _feed(stream, reply)
    assert (shown, answer) == ("Found it.", "It is **9:00**.")
    assert stream.answer == "It is **9:00**."


def test_an_answer_written_while_the_run_goes_on_is_not_the_answer():
    reply = '{"observation": "Half.", "should_continue": true, "final_answer": "Not yet."}'
    stream = _observe()
    assert _feed(stream, reply) == ("Half.", "")
    assert stream.answer == ""


def test_an_answer_written_before_should_continue_is_held_until_it_is_known():
    reply = '{"final_answer": "Paris.", "observation": "Known.", "should_continue": false}'
    assert _feed(_observe(), reply) == ("Known.", "Paris.")


def test_an_object_in_a_json_fence_is_read_the_same():
    reply = '```json\n{"thought": "Hi.", "plan": "p", "tools_to_consider": [], "finish": true}\n```'
    stream = PhaseStream(REASON_KEYS, shown="thought")
    assert _feed(stream, reply)[0] == "Hi."
    assert stream.control is not None and stream.control["finish"] is True


def test_prose_then_a_block_is_read_as_before():
    reply = 'Looking it up.\n```json\n{"plan": "p", "tools_to_consider": [], "finish": false}\n```'
    stream = PhaseStream(REASON_KEYS, shown="thought")
    shown, _ = _feed(stream, reply)
    assert shown.strip() == "Looking it up." and stream.control == {
        "plan": "p",
        "tools_to_consider": [],
        "finish": False,
    }


def test_an_object_cut_short_keeps_what_it_wrote():
    stream = PhaseStream(REASON_KEYS, shown="thought")
    shown, _ = _feed(stream, '{"thought": "Checking the wea')
    assert shown == "Checking the wea"
    assert stream.control == {"thought": "Checking the wea"} and not stream.settled


def test_what_follows_the_object_is_not_read():
    """A small model writes its object again: the first one stands and the call may close."""
    stream = PhaseStream(REASON_KEYS, shown="thought")
    stream.feed('{"thought": "One.", "plan": "a", "tools_to_consider": [], "finish": false}')
    assert stream.settled
    assert stream.feed('\n{"thought": "Two."') == ""
    assert stream.control is not None and stream.control["thought"] == "One."


def test_the_schemas_ask_for_every_field_in_reading_order():
    reason = reason_schema(["get_current_time", "request_input"])["json_schema"]
    assert reason["strict"] is True
    props = reason["schema"]["properties"]
    assert list(props) == ["thought", "plan", "tools_to_consider", "finish"]
    assert props["tools_to_consider"]["items"]["enum"] == ["get_current_time", "request_input"]
    assert reason["schema"]["required"] == list(props)
    assert "plan_steps" in reason_schema([], plan_steps=True)["json_schema"]["schema"]["required"]
    look = observe_schema()["json_schema"]["schema"]
    assert list(look["properties"]) == ["observation", "should_continue", "final_answer"]


def test_the_call_schema_offers_each_tool_with_its_own_arguments_or_none():
    nested = {
        "type": "object",
        "properties": {"where": {"$ref": "#/$defs/Place"}},
        "required": ["where"],
        "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
    schema = call_schema([ToolSpec("find", "Find.", nested)])["json_schema"]["schema"]
    first, last = schema["anyOf"]
    assert first["properties"]["tool"] == {"const": "find"}
    arguments = first["properties"]["arguments"]
    assert arguments["properties"]["where"]["properties"]["city"] == {"type": "string"}
    assert "$defs" not in json.dumps(arguments) and "$ref" not in json.dumps(arguments)
    assert last["properties"]["tool"] == {"const": NO_TOOL}


def test_a_tool_whose_arguments_are_all_optional_is_asked_for_its_first_one():
    optional = {"type": "object", "properties": {"timezone": {"type": "string"}, "n": {}}}
    required = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"]}
    schema = call_schema([ToolSpec("t", "", optional), ToolSpec("u", "", required)])
    first, second, _ = schema["json_schema"]["schema"]["anyOf"]
    assert first["properties"]["arguments"]["required"] == ["timezone"]
    assert second["properties"]["arguments"]["required"] == ["b"]
