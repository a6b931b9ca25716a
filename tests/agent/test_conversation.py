"""normalize: every request in the shape strict chat templates accept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.conversation import normalize
from agent.messages import Message, ToolCall
from tests.fakes.openai_server import conversation_problem

CALL = ToolCall("c1", "get_current_time", "{}")


def roles(messages: list[Message]) -> list[str]:
    return [m.role for m in messages]


def test_phase_texts_merge_and_the_instruction_ends_the_list():
    out = normalize(
        [
            Message("system", "S"),
            Message("user", "task"),
            Message("assistant", "I will check."),
            Message("assistant", "", tool_calls=(CALL,)),
            Message("tool", "noon", tool_call_id="c1", tool_name="get_current_time"),
            Message("assistant", "It is noon."),
            Message("system", "stopped"),
            Message("user", "## Your task now"),
        ]
    )
    assert roles(out) == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert out[2].content == "I will check." and out[2].tool_calls == (CALL,)
    assert out[-1].content == "[Note from the system] stopped\n\n## Your task now"


def test_a_run_of_one_role_becomes_one_message_with_every_text_and_call():
    second = ToolCall("c2", "web_search", '{"query": "q"}')
    out = normalize(
        [
            Message("user", "task"),
            Message("assistant", "Reasoning.", phase="reason"),
            Message("assistant", "More.", phase="reason"),
            Message("assistant", "  ", tool_calls=(CALL, second), phase="act"),
            Message("tool", "noon", tool_call_id="c1", tool_name="get_current_time"),
            Message("tool", "found", tool_call_id="c2", tool_name="web_search"),
            Message("user", "next"),
            Message("system", "stopped"),
            Message("user", ""),
            Message("user", "go on"),
        ]
    )
    assert roles(out) == ["user", "assistant", "tool", "tool", "user"]
    assert out[1].content == "Reasoning.\n\nMore." and out[1].tool_calls == (CALL, second)
    assert out[1].phase == "reason"  # the run keeps its first message's fields
    assert out[4].content == "next\n\n[Note from the system] stopped\n\ngo on"


def test_never_a_prefill_and_calls_always_get_results():
    calling = Message("assistant", "x", tool_calls=(CALL,))
    out = normalize([Message("system", "S"), Message("user", "u"), calling])
    assert roles(out) == ["system", "user", "assistant", "tool"]  # a result was added
    assert out[-1].tool_call_id == "c1"
    assert roles(normalize([Message("user", "u"), Message("assistant", "x")]))[-1] == "user"
    orphan = normalize([Message("user", "u"), Message("tool", "r", tool_call_id="zz")])
    assert roles(orphan) == ["user"] and "[Result of a tool] r" in orphan[0].content


_message = st.one_of(
    st.builds(Message, st.just("user"), st.text(max_size=3)),
    st.builds(Message, st.just("assistant"), st.text(max_size=3)),
    st.builds(Message, st.just("system"), st.text(max_size=3)),
    st.just(Message("assistant", "", tool_calls=(CALL,))),
    st.just(Message("tool", "r", tool_call_id="c1", tool_name="t")),
)


@given(st.lists(_message, max_size=12))
def test_any_conversation_comes_out_in_a_shape_a_strict_server_accepts(messages):
    out = normalize([Message("system", "S"), *messages])
    assert conversation_problem([m.to_openai() for m in out]) is None
