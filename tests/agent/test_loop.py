"""The loop's logic in-process, through its own ports: a ScriptedModel, an in-memory event
sink and transcript, real tools. No server, no socket: each test takes milliseconds.

What these do not check (frames, `seq`, persistence order, headers) is tested over the wire
in tests/server/test_agent_run.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import pytest
from pydantic import BaseModel

from agent.budget import Budget
from agent.calling import AGENT_TEMPERATURE
from agent.control import Decision
from agent.errors import ToolError
from agent.events import (
    AnswerDelta,
    ApprovalRequested,
    ChatDelta,
    ChatDone,
    FinishVerified,
    InputRequested,
    ObserveDelta,
    ObserveDone,
    ReasonDelta,
    ReasonDone,
    RunCompleted,
    RunStopped,
    StepStarted,
    ThinkingDelta,
    ToolCompleted,
    ToolFailed,
    ToolStarted,
    UserAnswered,
)
from agent.loop import run_agent
from agent.messages import Message
from agent.metrics import Metric
from agent.ports import ToolContext
from agent.tools.base import Tool
from agent.tools.current_time import make_current_time_tool
from tests.fakes.openai_server import FakeToolCall, Reply, act, observe, reason, text
from tests.fakes.scripted_model import Harness
from tests.fakes.tools import echo_tool


@pytest.fixture
def harness() -> Harness:
    return Harness(tools=[make_current_time_tool(), echo_tool])


async def test_a_run_goes_reason_act_observe_and_finishes(harness: Harness):
    call = FakeToolCall("get_current_time", {"timezone": "Europe/Paris"})
    harness.model.script("reason", reason("I'll check the time in Paris."))
    harness.model.script("act", act(call))
    harness.model.script("observe", observe("It is daytime.", final="It is **noon** in Paris."))

    record = await harness.run("What time is it in Paris?", max_steps=3)

    assert harness.model.phases() == ["reason", "act", "observe"]
    assert record.kinds()[0] == "run_started" and record.kinds()[-1] == "run_completed"
    assert [e.content for e in record.of(ReasonDone)] == ["I'll check the time in Paris."]
    (started,) = record.of(ToolStarted)
    assert (started.call_id, started.arguments) == (call.id, {"timezone": "Europe/Paris"})
    (done,) = record.of(ToolCompleted)
    assert done.result["timezone"] == "Europe/Paris"
    assert [e.content for e in record.of(ObserveDone)] == ["It is daytime."]
    (completion,) = record.of(RunCompleted)
    assert completion.final_answer == "It is **noon** in Paris."
    assert (completion.stop_reason, completion.steps) == ("finished", 1)
    assert completion.usage["total_tokens"] == 45  # three calls of 10 + 5 tokens
    assert completion.usage["estimated_calls"] == 0  # every count came from the model server
    # The transcript holds the tool call and its result for the next run.
    tool_results = [m for m in record.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_results] == [call.id]
    assert json.loads(tool_results[0].content)["timezone"] == "Europe/Paris"
    # Reason and Act show the same tools (a cacheable prefix); only Act may call them.
    # Observe reads the results without them (a tool's description was read as a result).
    reason_call, act_call, observe_call = harness.model.calls
    assert reason_call.tool_choice == "none"
    assert act_call.tool_choice == "auto"
    assert reason_call.tools == act_call.tools
    assert not observe_call.tools


async def test_reason_finish_skips_the_act_call_but_keeps_all_three_phases(harness: Harness):
    harness.model.script("reason", reason("I know this already.", finish=True))
    harness.model.script("observe", observe("Nothing to look up.", final="Paris is in France."))
    record = await harness.run("Where is Paris?")
    assert harness.model.phases() == ["reason", "observe"]
    assert record.of(ReasonDone) and record.of(ObserveDone)
    assert record.of(RunCompleted)[0].final_answer == "Paris is in France."


async def test_a_finish_without_the_tool_the_user_named_still_acts(harness: Harness):
    """Small models answer "what time is it? use get_current_time" from thin air."""
    harness.model.script("reason", reason("I know the time.", finish=True))
    harness.model.script("act", act(FakeToolCall("get_current_time", {})))
    harness.model.script("observe", observe("Checked.", final="It is noon."))
    record = await harness.run("What time is it? Use the get_current_time tool.")
    assert harness.model.phases() == ["reason", "act", "observe"]
    assert [e.name for e in record.of(ToolStarted)] == ["get_current_time"]
    assert record.of(RunCompleted)[0].final_answer == "It is noon."


async def test_act_reads_the_conversation_as_a_plain_tool_loop_does(harness: Harness):
    """Act's request ends with the task or the last result, with no instructions, plan or
    reasoning of ours in it: small models pick their tool best from that form."""
    harness.model.script("reason", reason("I will look at the clock."))
    harness.model.script("act", act(FakeToolCall("get_current_time", {})))
    harness.model.script("observe", observe("Checked, one more look."))
    harness.model.script("reason", reason("Look again."))
    harness.model.script("observe", observe("Same.", final="It is noon."))
    await harness.run("What time is it? Use the get_current_time tool.", max_steps=2)

    first_act, second_act = (c for c in harness.model.calls if c.phase == "act")
    assert [m.role for m in first_act.messages] == ["system", "user"]
    assert first_act.messages[-1].content == "What time is it? Use the get_current_time tool."
    assert [m.role for m in second_act.messages] == ["system", "user", "assistant", "tool"]
    thinking = ("I will look at the clock.", "Checked, one more look.", "Look again.", "## Now")
    for call in (first_act, second_act):
        assert not any(t in m.content for m in call.messages for t in thinking)


class _PageArgs(BaseModel):
    url: str


async def _read_page(args: _PageArgs, context: ToolContext) -> Any:
    return {"text": "Open 8:30 to 17:00."}


async def test_a_link_in_the_task_wants_a_call_of_a_tool_that_reads_links():
    """Qwen2.5-0.5B answered "When does the library open? See http://…" with hours of its
    own: a tool taking a `url` is wanted, as if the user had named it."""
    harness = Harness(tools=[Tool("read_page", "Read a page.", _PageArgs, _read_page), echo_tool])
    harness.model.structured_output = True
    call = '{"tool": "read_page", "arguments": {"url": "http://example.org/hours"}}'
    harness.model.script("act", text("It opens at nine."), text(call))
    harness.model.script("observe", observe("Read it.", final="It opens at 8:30."))
    record = await harness.run("When does it open? See http://example.org/hours")
    acts = [c for c in harness.model.calls if c.phase == "act"]
    assert "Tools the user asked for: read_page.\n" in acts[1].messages[-2].content
    assert [e.name for e in record.of(ToolStarted)] == ["read_page"]
    # Without a link, nothing is wanted: the plain reply stands.
    plain = Harness(tools=[Tool("read_page", "Read a page.", _PageArgs, _read_page)])
    plain.model.structured_output = True
    plain.model.script("act", text("It opens at nine."))
    await plain.run("When does the library open?")
    assert [c.response_format is None for c in plain.model.calls if c.phase == "act"] == [True]


async def test_a_wanted_call_is_asked_again_by_schema_naming_the_tools_asked_for(
    harness: Harness,
):
    """Reason said it can answer and named no tool, and the plain request gave no call: the
    run wants one (the user named the tool), so Act asks again by the call schema, told which
    tools the user asked for, until one of them has been used."""
    harness.model.structured_output = True
    harness.model.script("reason", reason("I know the time.", finish=True))
    call = '{"tool": "get_current_time", "arguments": {"timezone": "UTC"}}'
    harness.model.script("act", text("It is noon."), text(call))
    harness.model.script("observe", observe("Checked, one more look."))
    harness.model.script("reason", reason("Look again."))
    harness.model.script("act", text("No call needed."))
    harness.model.script("observe", observe("Same.", final="It is noon."))
    record = await harness.run("What time is it? Use the get_current_time tool.", max_steps=2)

    acts = [c for c in harness.model.calls if c.phase == "act"]
    assert [a.response_format is not None for a in acts] == [False, True, False]
    assert "Tools the user asked for: get_current_time.\n" in acts[1].messages[-2].content
    assert [e.name for e in record.of(ToolStarted)] == ["get_current_time"]


async def test_a_question_the_user_asks_for_by_name_is_wanted_like_any_named_tool(
    harness: Harness,
):
    """ "Ask me first with the request_input tool": a plain reply with no call is asked again
    by schema; the answered question is no result the run waits for."""
    harness.model.structured_output = True
    harness.model.script("reason", reason("I need the city first."))
    question = '{"tool": "request_input", "arguments": {"question": "Which city?"}}'
    harness.model.script("act", text("It is noon somewhere."), text(question))
    harness.model.script("observe", observe("Paris it is.", final="It is noon in Paris."))
    record_emit = harness.record.emit

    async def emit_and_answer(event: Any) -> None:
        await record_emit(event)
        if isinstance(event, InputRequested):
            assert harness.control.answer("Paris")

    harness.record.emit = emit_and_answer  # type: ignore[method-assign]
    task = "Tell me the time in my city: ask me for it first with the request_input tool."
    record = await harness.run(task, max_steps=1)
    acts = [c for c in harness.model.calls if c.phase == "act"]
    assert [a.response_format is not None for a in acts] == [False, True]
    assert "Tools the user asked for: request_input." in acts[1].messages[-2].content
    assert record.of(RunCompleted)[0].final_answer == "It is noon in Paris."


async def test_a_call_written_out_but_unreadable_is_asked_for_again_and_never_read_back(
    harness: Harness,
):
    """A call cut off at the token bound is not words for Observe to read as a finding: it is
    dropped, and the call is asked for again by schema."""
    harness.model.structured_output = True
    harness.model.script("reason", reason("Let me see."))
    cut = '```json\n{"name": "get_current_time", "arguments": {"timezone": "Asia/'
    call = '{"tool": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}'
    harness.model.script("act", text(cut), text(call))
    harness.model.script("observe", observe("Found it.", final="Noon in Tokyo."))
    record = await harness.run("What time is it in Tokyo?", max_steps=1)
    acts = [c for c in harness.model.calls if c.phase == "act"]
    assert [a.response_format is not None for a in acts] == [False, True]
    assert [e.name for e in record.of(ToolStarted)] == ["get_current_time"]
    observe_call = next(c for c in harness.model.calls if c.phase == "observe")
    assert not any("Asia/" in m.content for m in observe_call.messages if m.role == "assistant")


async def test_observe_is_told_when_the_step_called_nothing(harness: Harness):
    """With no results, "what the results say" had a small model make results up."""
    harness.model.script("reason", reason("I know this."))
    harness.model.script("act", text("Paris."))
    harness.model.script("observe", observe("That is known.", final="Paris."))
    await harness.run("What is the capital of France?", max_steps=1)
    observe_call = next(c for c in harness.model.calls if c.phase == "observe")
    assert "No tool was called in this step" in observe_call.messages[-1].content
    assert [m.content for m in observe_call.messages if m.role == "assistant"] == ["Paris."]


async def test_a_final_answer_that_reads_the_instructions_back_is_never_shown(
    harness: Harness,
):
    """SmolLM2 answered "The results say, in one or two sentences for the person, or": the
    answer is held like the shown fields, and a copy ends no run."""
    copied = "what the results say, in one or two sentences for the person"
    harness.model.script("act", text("Noon."), text("Noon."))
    harness.model.script(
        "observe",
        text(
            json.dumps({"observation": "Got it.", "should_continue": False, "final_answer": copied})
        ),
        observe("Got it.", final="It is noon."),
    )
    record = await harness.run("What time is it?", max_steps=2)
    answers = "".join(e.delta for e in record.of(AnswerDelta))
    assert "two sentences" not in answers and "two sentences" not in str(record.of(RunCompleted))
    assert record.of(RunCompleted)[0].final_answer == "It is noon."


async def test_a_finish_with_tools_to_consider_and_none_used_still_acts(harness: Harness):
    """Reason's block says it can answer and names a tool it would use: until one call
    succeeds, the tools it named are what the run expects, so Act runs."""
    block = json.dumps({"plan": "", "tools_to_consider": ["get_current_time"], "finish": True})
    harness.model.script("reason", Reply(chunks=["I can answer.\n```json\n", block, "\n```"]))
    harness.model.script("act", act(FakeToolCall("get_current_time", {})))
    harness.model.script("observe", observe("Checked.", final="It is noon."))
    await harness.run("What time is it?")
    assert harness.model.phases() == ["reason", "act", "observe"]


async def test_a_finish_without_any_call_to_the_tool_the_user_named_is_checked(
    harness: Harness,
):
    """The model acts without calling the tool the user named and then answers: the answer
    goes to the finish check, as one after failed calls does."""
    harness.model.script("reason", reason("I know the time.", finish=True))
    harness.model.script("act", text("No call needed."))
    harness.model.script("observe", observe("Known.", final="It is noon."))
    harness.model.script("verify", text('```json\n{"done": true, "reason": "Fine."}\n```'))
    record = await harness.run("What time is it? Use the get_current_time tool.", max_steps=1)
    assert harness.model.phases() == ["reason", "act", "observe", "verify"]
    assert record.of(RunCompleted)[0].final_answer == "It is noon."


async def test_a_tool_name_that_is_a_plain_word_does_not_force_act():
    """`echo` is also a word: "an echo" in a question asks for no tool."""
    harness = Harness(tools=[echo_tool])
    harness.model.script("reason", reason("I know this.", finish=True))
    harness.model.script("observe", observe("Known.", final="A reflected sound."))
    await harness.run("What is an echo, in one line? No tools needed.")
    assert harness.model.phases() == ["reason", "observe"]


async def test_an_act_reply_that_repeats_reasons_block_calls_the_tool_its_plan_names(
    harness: Harness,
):
    """A small model writes Reason's block again in Act, with a tool's bare name as plan."""
    block = json.dumps(
        {"plan": "get_current_time", "tools_to_consider": ["get_current_time"], "finish": False}
    )
    harness.model.script("reason", reason("I'll check the clock."))
    harness.model.script("act", text(f"```json\n{block}\n```"))
    harness.model.script("observe", observe("Checked.", final="It is noon."))
    record = await harness.run("What time is it?")
    assert harness.model.phases() == ["reason", "act", "observe"]
    assert [(e.name, e.arguments) for e in record.of(ToolStarted)] == [("get_current_time", {})]
    assert harness.metrics[Metric.TEXT_TOOL_CALLS] == 1


async def test_a_plan_in_words_written_in_act_calls_nothing(harness: Harness):
    block = json.dumps({"plan": "Look at the clock.", "tools_to_consider": [], "finish": False})
    harness.model.script("reason", reason("Nothing to look up."))
    harness.model.script("act", text(f"```json\n{block}\n```"))
    harness.model.script("observe", observe("Fine.", final="Paris is in France."))
    record = await harness.run("Where is Paris?")
    assert harness.model.phases() == ["reason", "act", "observe"]
    assert record.of(ToolStarted) == []


async def test_a_model_repeating_its_block_is_cut_off_and_the_run_goes_on(harness: Harness):
    block = json.dumps({"plan": "Look up the time.", "tools_to_consider": [], "finish": False})
    repeats = [f"```json\n{block}\n```\n\n"] * 50  # a small model, until its token limit
    harness.model.script("reason", text("I'll check.\n", *repeats))
    harness.model.script("observe", observe("Found it.", final="It is noon."))

    record = await harness.run("What time is it?", max_steps=2)

    assert harness.model.closed_early == 1  # the request ended: the server stops generating
    assert harness.model.phases() == ["reason", "act", "observe"]
    assert [e.content for e in record.of(ReasonDone)] == ["I'll check."]
    assert harness.metrics[Metric.REPLIES_CUT] == 1
    (completion,) = record.of(RunCompleted)
    assert completion.final_answer == "It is noon."
    # The cut call sent no usage: its tokens are estimated, not dropped, and said to be.
    assert completion.usage["total_tokens"] > 30 + 15
    assert (completion.usage["llm_calls"], completion.usage["estimated_calls"]) == (3, 1)


async def test_a_thought_that_reads_a_checks_note_back_is_not_shown(harness: Harness):
    """Qwen2.5-0.5B's next thought, after a check found its answer unfinished, was the note
    the loop had written ("Continue the work, or if it cannot be done, …")."""
    harness.model.script("act", act(FakeToolCall("echo", {"text": 1})))  # fails: not a string
    verdict = json.dumps({"done": False, "reason": "The echo failed."})
    harness.model.script("verify", text(f"```json\n{verdict}\n```"))
    copied = (
        "The check found the task is not finished. Continue the work, or if it cannot be "
        "done, say plainly what failed."
    )
    harness.model.script(
        "reason",
        reason("Echo it."),
        text(json.dumps({"thought": copied, "tools_to_consider": [], "finish": False})),
    )
    harness.model.script(
        "observe", observe("Done.", final="All done."), observe("Failed.", final="It failed.")
    )
    record = await harness.run("Echo something.", max_steps=2)
    assert [e.content for e in record.of(ReasonDone)] == ["Echo it.", ""]
    shown = "".join(e.delta for e in record.of(ReasonDelta))
    assert "Continue the work" not in shown


async def test_a_tool_description_read_back_after_own_words_is_not_shown(harness: Harness):
    """Qwen2.5-0.5B's thoughts began in its own words and went on in a tool's description."""
    own = "Tokyo is far east of here, so I will check its clock first."
    copied = " Get the current date and time in one or more time zones."
    thought = json.dumps({"thought": own + copied, "tools_to_consider": [], "finish": False})
    harness.model.script("reason", text(thought))
    harness.model.script("act", act(FakeToolCall("get_current_time", {})))
    harness.model.script("observe", observe("Found it.", final="It is noon."))
    record = await harness.run("What time is it in Tokyo?")
    assert [e.content for e in record.of(ReasonDone)] == [own]
    assert "".join(e.delta for e in record.of(ReasonDelta)) == own


async def test_a_plan_that_only_reads_a_tools_description_back_is_not_shown(harness: Harness):
    """Qwen2.5-0.5B wrote no thought and a plan that was request_input's description: the
    plan shown in the thought's place is held against the same texts as a streamed one."""
    plan = (
        "Ask the user a question and wait for the answer. Use it only when you need "
        "information or a decision that only the user can give."
    )
    block = json.dumps({"plan": plan, "tools_to_consider": [], "finish": False})
    harness.model.script("reason", text("\n\n", block))
    harness.model.script("act", act(FakeToolCall("get_current_time", {})))
    harness.model.script("observe", observe("Found it.", final="It is noon."))
    record = await harness.run("What time is it in Oslo?")
    assert [e.content for e in record.of(ReasonDone)] == [""]


async def test_a_block_that_only_copies_the_prompt_is_not_shown_as_the_agents_words(
    harness: Harness,
):
    """Qwen2.5-0.5B on llama.cpp wrote only a block whose plan was a line of its guidance."""
    copied = "the tools it needs, or []), finish (true only if you can give the complete answer"
    own = "Look up the time in Tokyo."

    def block_only(**fields: object) -> Reply:
        return text("\n\n", json.dumps(fields))

    harness.model.script(
        "reason",
        block_only(plan=copied, tools_to_consider=[], finish=False),
        block_only(plan=own, tools_to_consider=[], finish=False),
    )
    harness.model.script(
        "observe",
        block_only(
            observation="what the results say, in one or two sentences for the person",
            should_continue=True,
        ),
        observe("Found it.", final="It is noon."),
    )

    record = await harness.run("What time is it in Tokyo?", max_steps=2)

    assert [e.content for e in record.of(ReasonDone)] == ["", own]
    assert [e.content for e in record.of(ObserveDone)] == ["", "Found it."]
    assert record.of(RunCompleted)[0].final_answer == "It is noon."


async def test_act_is_told_the_tools_reason_named_when_it_asks_again(harness: Harness):
    harness.model.structured_output = True
    block = {"plan": "Ask, then look.", "tools_to_consider": ["request_input", "nope"]}
    harness.model.script("reason", text(json.dumps({**block, "finish": False})))
    harness.model.script("act", text("Nothing to call."), text('{"tool": "none"}'))
    harness.model.script("observe", observe("ok", final="Done."))
    await harness.run("go", max_steps=1)
    again = [c for c in harness.model.calls if c.phase == "act"][1]
    instruction = again.messages[-2].content
    assert "Tools you named for this step: request_input.\n" in instruction  # offered ones


async def test_max_steps_ends_with_a_summary(harness: Harness):
    for part in range(2):
        harness.model.script("observe", observe(f"Still more to do, part {part}."))
    harness.model.script("summarize", text("I ran out of steps; here is what I found."))
    record = await harness.run("Do a long task", max_steps=2)
    assert [e.step for e in record.of(StepStarted)] == [1, 2]
    assert harness.model.phases() == ["reason", "act", "observe"] * 2 + ["summarize"]
    assert harness.model.calls[-1].tool_choice == "none"
    (completion,) = record.of(RunCompleted)
    assert (completion.stop_reason, completion.steps) == ("max_steps", 2)
    assert completion.final_answer == "I ran out of steps; here is what I found."


async def test_an_empty_summary_falls_back_to_what_the_run_found(harness: Harness):
    # Qwen 0.5B on llama.cpp often ends the summary call at once: the answer must still say
    # what the run found, not only that it stopped.
    harness.model.script("observe", observe("It is 07:42 in Tokyo."))
    harness.model.script("summarize", text(""))
    record = await harness.run("What time is it in Tokyo?", max_steps=1)
    (completion,) = record.of(RunCompleted)
    assert completion.stop_reason == "max_steps"
    assert completion.final_answer == (
        "I reached the limit of 1 step before finishing this task. "
        "What I found so far: It is 07:42 in Tokyo."
    )
    assert "".join(e.delta for e in record.of(AnswerDelta)) == completion.final_answer


async def test_a_summary_that_reads_the_prompt_back_is_withdrawn_for_the_findings(
    harness: Harness,
):
    """Qwen2.5-0.5B on llama.cpp answered the step limit with the summary instruction and a
    tool's description: the copy is never shown, and the answer is what the run found."""
    copied = (
        "The step limit stopped the work and what is left to do, if anything. "
        "Do not call tools and do not add a JSON block."
    )
    harness.model.script("observe", observe("It is 07:42 in Tokyo."))
    harness.model.script("summarize", text(copied))
    record = await harness.run("What time is it in Tokyo?", max_steps=1)
    (completion,) = record.of(RunCompleted)
    assert completion.final_answer == (
        "I reached the limit of 1 step before finishing this task. "
        "What I found so far: It is 07:42 in Tokyo."
    )
    kinds = [e.kind for e in record.events if e.kind in ("answer_delta", "finish_verified")]
    assert kinds == ["answer_delta"]  # the copy held back from its first words: no draft
    assert record.of(AnswerDelta)[-1].delta == completion.final_answer


async def test_missing_control_block_is_free_text_and_the_run_continues(harness: Harness):
    harness.model.script("reason", text("Just thinking aloud, no block."))
    harness.model.script("observe", text("No block here either."), observe("ok", final="Final."))
    record = await harness.run("go", max_steps=3)
    assert record.of(ReasonDone)[0].content == "Just thinking aloud, no block."
    assert [e.step for e in record.of(StepStarted)] == [1, 2]
    assert record.of(RunCompleted)[0].final_answer == "Final."


async def test_bad_tool_calls_become_tool_errors_and_the_run_goes_on(
    harness: Harness, caplog: pytest.LogCaptureFixture
):
    calls = [
        FakeToolCall("no_such_tool", {}),
        FakeToolCall("get_current_time", {"timezone": "Mars/Olympus"}),
        FakeToolCall("get_current_time", {"timezone": 42}),
        FakeToolCall("get_current_time", '{"timezone": "UTC"'),
        FakeToolCall("echo", {"text": "crash"}),
        FakeToolCall("echo", {"text": "hi", "delay_ms": "5"}),  # strict: "5" is not 5
    ]
    harness.model.script("act", act(*calls))
    harness.model.script("observe", observe("Several calls failed.", final="I could not do it."))
    with caplog.at_level(logging.ERROR, logger="agent.acting"):
        record = await harness.run("break things")

    failed = record.of(ToolFailed)
    assert [e.call_id for e in failed] == [c.id for c in calls]
    errors = [e.error for e in failed]
    assert "no tool named 'no_such_tool'" in errors[0]
    assert "Mars/Olympus" in errors[1]
    assert "timezone" in errors[2]
    assert "not valid JSON" in errors[3]
    assert "failed unexpectedly" in errors[4] and "Traceback" not in errors[4]
    assert "delay_ms" in errors[5]
    assert record.of(RunCompleted)[0].stop_reason == "finished"
    # The model sees only the kind of a crash; the operator's log has the traceback.
    (crash,) = [r for r in caplog.records if r.name == "agent.acting"]
    assert "echo" in crash.getMessage() and calls[4].id in crash.getMessage()
    assert crash.exc_info is not None and crash.exc_info[0] is not None
    observe_call = [c for c in harness.model.calls if c.phase == "observe"][-1]
    tool_messages = [m for m in observe_call.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == [c.id for c in calls]


class _BlobArgs(BaseModel):
    kind: str


async def _blob(args: _BlobArgs, context: ToolContext) -> Any:
    if args.kind == "error":
        raise ToolError("the disk said: " + "no " * 2_000)
    if args.kind == "object":
        return {"rows": [{"id": n, "name": "é" * 20} for n in range(400)]}
    if args.kind == "odd-error":  # a file name that is not UTF-8, as os.listdir gives it
        raise ToolError("cannot read " + os.fsdecode(b"notes-\xff.txt"))
    if args.kind == "odd-text":
        return "found " + os.fsdecode(b"notes-\xfe.txt")
    return "line\n" * 3_000 if args.kind == "text" else "short"


async def test_a_tool_result_or_error_past_the_limit_is_cut_with_a_note(harness: Harness):
    harness.tools.append(Tool("blob", "Return a big result.", _BlobArgs, _blob))
    calls = [FakeToolCall("blob", {"kind": k}) for k in ("text", "object", "error", "small")]
    harness.model.script("act", act(*calls))
    harness.model.script("observe", observe("Read it.", final="Done."))
    record = await harness.run("read the big file", tool_result_max_bytes=2_000)

    text, obj = (e.result for e in record.of(ToolCompleted)[:2])
    assert text.startswith("line\nline\n") and text.endswith("are its beginning.]")
    assert "the result had 18,002 bytes as JSON" in text
    assert obj.startswith('{"rows":[{"id":0,') and obj.endswith("are its beginning.]")
    (failed,) = record.of(ToolFailed)
    assert failed.error.startswith("the disk said: no no") and failed.error.endswith("beginning.]")
    assert record.of(ToolCompleted)[2].result == "short"  # within the limit: as it was
    for value in (text, obj, failed.error):
        assert len(json.dumps(value, ensure_ascii=False).encode()) <= 2_000
    observe_call = [c for c in harness.model.calls if c.phase == "observe"][-1]
    sent = {m.tool_call_id: m.content for m in observe_call.messages if m.role == "tool"}
    assert sent[calls[0].id] == text and sent[calls[1].id] == obj  # the model read the same


# What an answer that says nothing of the run's last, failed call ends with (agent/findings.py).
_FAILED_UNSAID = "\n\n(I could not finish some of the other things I tried.)"


async def test_a_tool_text_that_is_not_unicode_is_carried_escaped(harness: Harness):
    # A lone surrogate (a file name that is not UTF-8) fits no JSON: the text goes on with it
    # escaped, and the run goes on, whether the tool returned it or failed with it.
    harness.tools.append(Tool("blob", "Return a big result.", _BlobArgs, _blob))
    calls = [FakeToolCall("blob", {"kind": k}) for k in ("odd-text", "odd-error")]
    harness.model.script("act", act(*calls))
    harness.model.script("observe", observe("Read it.", final="Done."))
    record = await harness.run("read the odd file")

    (completed,) = record.of(ToolCompleted)
    assert completed.result == "found notes-\\udcfe.txt"
    (failed,) = record.of(ToolFailed)
    assert failed.error == "cannot read notes-\\udcff.txt"
    assert record.of(RunCompleted)[-1].final_answer == f"Done.{_FAILED_UNSAID}"


async def _asking(args: _BlobArgs, context: ToolContext) -> Any:
    odd = os.fsdecode(b"notes-\xff.txt")
    return await context.extra["ask"](f"Open {odd}? " + "Please say. " * 500)


async def test_a_question_a_tool_puts_is_escaped_and_cut_like_its_result(harness: Harness):
    # An MCP server's elicitation message is the server's text: it reaches the person within
    # the same bound as a result, and text JSON cannot hold does not fail the run's store.
    harness.tools.append(Tool("asking", "Ask the person.", _BlobArgs, _asking))
    harness.model.script("act", act(FakeToolCall("asking", {"kind": "x"})))
    harness.model.script("observe", observe("Asked.", final="Done."))
    task = harness.start("ask me", tool_result_max_bytes=2_000)
    await harness.record.wait_for(lambda: bool(harness.record.of(InputRequested)))
    (asked,) = harness.record.of(InputRequested)
    assert asked.question.startswith("Open notes-\\udcff.txt? Please say.")
    assert asked.question.endswith("are its beginning.]")
    assert len(json.dumps(asked.question, ensure_ascii=False).encode()) <= 2_000
    assert harness.control.answer("Yes.")
    async with asyncio.timeout(5):
        await task
    assert [e.result for e in harness.record.of(ToolCompleted)] == ["Yes."]


async def _asks_its_kind(args: _BlobArgs, context: ToolContext) -> Any:
    return f"{args.kind} got: " + str(await context.extra["ask"](f"Which {args.kind}?"))


async def test_calls_that_ask_at_once_ask_in_turn_and_get_their_own_answers(harness: Harness):
    # Two calls of one turn run concurrently and both ask the person (two frontend tools, two
    # MCP tools eliciting): the second question is published only once the first is answered,
    # and each answer reaches the question it was given for.
    harness.tools.append(Tool("asking", "Ask the person.", _BlobArgs, _asks_its_kind))
    calls = [FakeToolCall("asking", {"kind": "colour"}), FakeToolCall("asking", {"kind": "size"})]
    harness.model.script("act", act(*calls))
    harness.model.script("observe", observe("Asked both.", final="Done."))
    task = harness.start("ask twice")
    for call, answer in zip(calls, ("red", "large"), strict=True):
        await harness.record.wait_for(
            lambda c=call: (
                harness.control.pending is not None and harness.control.pending.tool_call_id == c.id
            )
        )
        asked = [e.call_id for e in harness.record.of(InputRequested)]
        assert asked[-1] == call.id and asked.count(call.id) == 1
        assert len(asked) == calls.index(call) + 1  # the other question is not out yet
        assert harness.control.answer(answer)
    async with asyncio.timeout(5):
        await task
    results = {e.call_id: e.result for e in harness.record.of(ToolCompleted)}
    assert results == {calls[0].id: "colour got: red", calls[1].id: "size got: large"}


async def test_a_reply_that_goes_on_too_long_is_closed_and_says_it_was_cut(harness: Harness):
    # A model in a loop on a server without an output limit: the events that carry the whole
    # reply would pass the 1 MiB a client takes. The call is closed at the limit.
    pieces = [" ".join(f"word{i}-{j}" for j in range(40)) + " " for i in range(40)]
    harness.model.script("chat", text(*pieces))  # about 19,000 characters, none repeated
    record = await harness.run("write", agent=False, reply_max_chars=2_000)
    answer = record.of(ChatDone)[-1].content
    assert answer.startswith("word0-0 word0-1") and len(answer) < 2_100
    assert answer.endswith(
        "[Cut here: the reply went on past 2,000 characters; the rest was not read.]"
    )
    assert "".join(e.delta for e in record.of(ChatDelta)) == answer
    assert harness.model.closed_early == 1
    assert harness.metrics[Metric.REPLIES_CUT] == 1


async def test_a_reply_of_escaped_characters_is_cut_by_its_size_on_the_wire(harness: Harness):
    # A control character is six bytes in JSON (`\u0001`): 200,000 of them made a 1.2 MB
    # frame, past what a client takes. Each counts six toward the limit.
    harness.model.script("chat", text(*["\x01" * 500] * 10))
    record = await harness.run("write", agent=False, reply_max_chars=2_000)
    answer = record.of(ChatDone)[-1].content
    assert answer.endswith("the rest was not read.]")
    note = len("\n\n[Cut here: the reply went on past 2,000 characters; the rest was not read.]")
    assert len(json.dumps(answer)) <= 2_000 + note + 10


async def test_thinking_that_goes_on_too_long_is_closed_like_a_reply(harness: Harness):
    # A reasoning model thinking without end streams thinking events forever: the same limit
    # closes it, and the reply's text says why.
    thoughts = Reply(reasoning=["Hmm, let me think again. " * 20] * 40, chunks=["Never read."])
    harness.model.script("chat", thoughts)
    record = await harness.run("think", agent=False, reply_max_chars=2_000)
    shown = "".join(e.delta for e in record.of(ThinkingDelta))
    assert shown.startswith("Hmm, let me think again.") and len(shown) == 2_000
    assert record.of(ChatDone)[-1].content == (
        "\n\n[Cut here: the reply went on past 2,000 characters; the rest was not read.]"
    )
    assert harness.model.closed_early == 1
    assert harness.metrics[Metric.REPLIES_CUT] == 1


async def test_tool_arguments_longer_than_a_result_may_be_are_refused(harness: Harness):
    harness.model.script("act", act(FakeToolCall("echo", {"text": "x" * 5_000})))
    harness.model.script("observe", observe("Too long.", final="Done."))
    record = await harness.run("echo a lot", tool_result_max_bytes=2_000)
    (started,) = record.of(ToolStarted)
    assert started.arguments == {}
    (failed,) = record.of(ToolFailed)
    assert failed.error == "The arguments are 5012 bytes long; at most 2000 are accepted."
    assert record.of(RunCompleted)[-1].final_answer == f"Done.{_FAILED_UNSAID}"


async def test_a_stop_while_the_model_streams_is_recorded_and_ends_the_call(harness: Harness):
    harness.model.script("reason", Reply(chunks=["Let me ", "think"], hang_after=1))
    task = harness.start("go")
    async with asyncio.timeout(5):
        await harness.model.hanging.wait()
    assert harness.control.request_stop("user")
    async with asyncio.timeout(5):
        await task
    (stopped,) = harness.record.of(RunStopped)
    assert (stopped.step, stopped.reason) == (1, "user")
    assert harness.model.cancelled == 1
    assert not harness.record.of(RunCompleted)
    assert harness.record.messages[-1].phase == "stop"  # a note for the model's next run
    # the cut call is in the usage the stop reports, its tokens estimated
    assert (stopped.usage["llm_calls"], stopped.usage["estimated_calls"]) == (1, 1)
    assert stopped.usage["prompt_tokens"] > 0 and stopped.usage["completion_tokens"] > 0


async def test_chat_mode_streams_deltas_and_may_call_tools(harness: Harness):
    call = FakeToolCall("echo", {"text": "hello"})
    harness.model.script("chat", act(call), text("Echoed: ", "hello"))
    record = await harness.run("say hello", agent=False)
    assert harness.model.phases() == ["chat", "chat"]
    assert [e.result for e in record.of(ToolCompleted)] == [{"echo": "hello"}]
    assert "".join(e.delta for e in record.of(ChatDelta)) == "Echoed: hello"
    assert record.of(ChatDone)[-1].content == "Echoed: hello"
    assert record.kinds()[-1] == "chat_done"


async def test_chat_mode_never_shows_a_call_written_as_text_as_the_reply(harness: Harness):
    # Small models (Qwen2.5-0.5B) write the call as text: it was streamed as the reply, then
    # run as a call, so the user read JSON as the answer.
    written = ['{"name": "echo", ', '"arguments": {"text": ', '"hello"}}']
    harness.model.script("chat", text(*written), text("Echoed: ", "hello"))
    record = await harness.run("say hello", agent=False)
    assert [e.result for e in record.of(ToolCompleted)] == [{"echo": "hello"}]
    shown = [e.delta for e in record.of(ChatDelta)]
    assert shown == ["Echoed: ", "hello"]
    assert record.of(ChatDone)[-1].content == "Echoed: hello"


async def test_chat_mode_streams_prose_and_code_as_they_come(harness: Harness):
    # Only a reply that begins like a call waits: prose, a code fence and a JSON object that
    # is no call (once read) are shown, the first two piece by piece.
    harness.model.script("chat", text("Sure", ", here:\n", "```python\n", "x = 1\n```"))
    record = await harness.run("code please", agent=False)
    assert [e.delta for e in record.of(ChatDelta)] == [
        "Sure",
        ", here:\n",
        "```python\n",
        "x = 1\n```",
    ]
    harness.model.script("chat", text("```", "py\n", "y = 2\n```"))
    record = await harness.run("more", agent=False)
    assert [e.delta for e in record.of(ChatDelta)][-2:] == ["```py\n", "y = 2\n```"]
    harness.model.script("chat", text('{"colour": ', '"red"}'))
    record = await harness.run("as json", agent=False)
    assert record.of(ChatDone)[-1].content == '{"colour": "red"}'
    assert [e.delta for e in record.of(ChatDelta)][-1] == '{"colour": "red"}'  # held, then shown


async def test_a_rejected_draft_answer_is_not_taken_for_the_final_one(harness: Harness):
    # Step 1 streams a draft answer; the check says not done; the budget then ends the run,
    # whose answer must still arrive as deltas, although a draft already streamed.
    block = json.dumps({"observation": "Checked.", "should_continue": False})
    harness.model.script("act", act(FakeToolCall("no_such_tool", {})))
    harness.model.script("observe", text("Checked.\n```json\n", block, "\n```\n", "Draft."))
    harness.model.script("verify", text('```json\n{"done": false, "reason": "It failed."}\n```'))
    record = await harness.run("go", budget=Budget(max_tokens=50))  # spent by the check
    (completed,) = record.of(RunCompleted)
    assert completed.stop_reason == "budget"
    deltas = [e.delta for e in record.of(AnswerDelta)]
    assert deltas[0] == "Draft." and deltas[-1] == completed.final_answer


async def test_an_answer_or_decision_given_as_soon_as_it_is_announced_is_taken(
    harness: Harness,
):
    # A client may answer the moment it reads the question (AG-UI answers a frontend tool's
    # call from the request that brought its result): the question is open before it is out.
    record_emit = harness.record.emit

    async def emit_and_reply(event: Any) -> None:
        await record_emit(event)
        if isinstance(event, ApprovalRequested):
            harness.control.decide(event.call_id, Decision(True))
        elif isinstance(event, InputRequested):
            assert harness.control.answer("Lisbon")

    harness.record.emit = emit_and_reply  # type: ignore[method-assign]
    echo = FakeToolCall("echo", {"text": "hi"})
    ask = FakeToolCall("request_input", {"question": "Which city?"})
    harness.model.script("act", act(echo, ask))
    harness.model.script("observe", observe("Both done.", final="Done."))
    ctx = harness.context()
    ctx.needs_approval = lambda name: name == "echo"
    harness.record.messages.append(Message("user", "go", run_id=ctx.run_id))
    async with asyncio.timeout(5):
        await run_agent(ctx, list(harness.record.messages))
    assert [e.result for e in harness.record.of(ToolCompleted)] == [{"echo": "hi"}]
    assert [e.content for e in harness.record.of(UserAnswered)] == ["Lisbon"]


async def test_call_ids_a_model_server_repeats_are_made_unique(harness: Harness):
    # Some servers number calls per reply (`call_0` every time) or repeat one in a reply:
    # two calls would share a result, an approval and a question.
    first = FakeToolCall("echo", {"text": "one"}, id="call_0")
    harness.model.script("act", act(first))
    harness.model.script("observe", observe("One.", final="Done."))
    await harness.run("first")
    twins = [FakeToolCall("echo", {"text": t}, id="call_0") for t in ("two", "three")]
    harness.model.script("act", act(*twins))
    harness.model.script("observe", observe("Two.", final="Done."))
    record = await harness.run("second")
    ids = [e.call_id for e in record.of(ToolStarted)]
    assert ids[0] == "call_0" and len(set(ids)) == 3
    results = {e.call_id: e.result for e in record.of(ToolCompleted)}
    assert sorted(r["echo"] for r in results.values()) == ["one", "three", "two"]


# -- servers that constrain decoding (agent/structured.py) -------------------------------------


def _thinks(thought: str, tools: list[str]) -> Reply:
    """Reason's reply as one JSON object, naming `tools`."""
    fields = {"thought": thought, "plan": thought, "tools_to_consider": tools, "finish": False}
    return text(json.dumps(fields))


async def test_phases_ask_for_one_json_object_and_every_call_is_bounded(harness: Harness):
    harness.model.script("reason", _thinks("Looking.", ["get_current_time"]))
    harness.model.script("act", act(FakeToolCall("get_current_time", {})))
    harness.model.script("observe", observe("Found.", final="Noon."))
    await harness.run("What time is it?")
    by_phase = {c.phase: c for c in harness.model.calls}
    reason_schema = by_phase["reason"].response_format["json_schema"]["schema"]
    assert list(reason_schema["properties"]) == ["thought", "plan", "tools_to_consider", "finish"]
    # no tool used yet in this run: Reason may not finish, whether a tool is needed is Act's
    assert reason_schema["properties"]["finish"]["enum"] == [False]
    assert (
        "should_continue"
        in by_phase["observe"].response_format["json_schema"]["schema"]["properties"]
    )
    assert by_phase["act"].response_format is None and by_phase["act"].tool_choice == "auto"
    assert {c.phase: c.max_tokens for c in harness.model.calls} == {
        "reason": 1024,
        "act": 1024,
        "observe": 2048,
    }
    # the agent's phases sample close to the likeliest token (the model's settings may differ)
    assert {c.temperature for c in harness.model.calls} == {AGENT_TEMPERATURE}


async def test_act_asks_again_by_schema_only_when_a_planned_call_was_not_made(
    harness: Harness,
):
    """A server that takes a response_format: Act asks natively first; a reply with no call
    where Reason planned one is asked again as JSON of the call schema. A step that plans
    none keeps the plain reply."""
    harness.model.structured_output = True
    harness.model.script("reason", _thinks("Check Tokyo.", ["get_current_time"]))
    call = '{"tool": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}'
    harness.model.script("act", text("Tokyo is nice."), text(call), text("No call needed now."))
    harness.model.script("observe", observe("Got it."), observe("Done.", final="9:00 in Tokyo."))
    harness.model.script("reason", _thinks("Answer.", []))
    record = await harness.run("What time is it in Tokyo?", max_steps=2)
    acts = [c for c in harness.model.calls if c.phase == "act"]
    assert [a.response_format is not None for a in acts] == [False, True, False]
    schema = acts[1].response_format["json_schema"]["schema"]
    assert {o["properties"]["tool"]["const"] for o in schema["anyOf"]} >= {
        "get_current_time",
        "none",
    }
    assert acts[1].tool_choice == "none" and acts[2].tool_choice == "auto"
    assert [(e.name, e.arguments) for e in record.of(ToolStarted)] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"})
    ]
    assert harness.metrics[Metric.SCHEMA_TOOL_CALLS] == 1


async def test_none_by_schema_calls_nothing(harness: Harness):
    harness.model.structured_output = True
    harness.model.script("reason", _thinks("I know this.", []))
    harness.model.script("act", text('{"tool": "none"}'))
    harness.model.script("observe", observe("Known.", final="Paris."))
    record = await harness.run("What is the capital of France?")
    assert record.of(ToolStarted) == []
    assert record.of(RunCompleted)[0].final_answer == "Paris."


async def test_a_copy_of_the_instructions_in_a_json_field_is_never_shown(harness: Harness):
    copied = "what the results say, in one or two sentences for the person"
    harness.model.script(
        "reason",
        text(
            '{"thought": "Checking the clock now for you.", '
            '"plan": "p", "tools_to_consider": [], "finish": true}'
        ),
    )
    harness.model.script(
        "observe",
        text(
            json.dumps({"observation": copied, "should_continue": False, "final_answer": "Noon."})
        ),
    )
    record = await harness.run("What time is it?")
    shown = [e.delta for e in record.of(ObserveDelta)] + [e.content for e in record.of(ObserveDone)]
    assert not any("two sentences" in text for text in shown), shown
    assert "".join(e.delta for e in record.of(ReasonDelta)) == "Checking the clock now for you."
    assert record.of(RunCompleted)[0].final_answer == "Noon."


def test_a_list_of_most_offered_tools_names_none():
    from agent.loop import _named
    from agent.parsing import ReasonControl
    from agent.ports import ToolSpec

    tools = [ToolSpec(n, "", {}) for n in ("a", "b", "c", "d", "e")]
    assert _named(ReasonControl("p", ("a", "b", "c", "d"), False), tools) == []
    assert _named(ReasonControl("p", ("b", "b", "x"), False), tools) == ["b"]


async def test_steps_that_call_nothing_and_observe_nothing_of_their_own_end_the_run(
    harness: Harness,
):
    """Observations that only read the instructions back are never shown (empty): two steps
    of them with no call made no progress either."""
    copied = json.dumps(
        {
            "observation": "what the results say, in one or two sentences for the person",
            "should_continue": True,
            "final_answer": "",
        }
    )
    harness.model.script("act", text("Nothing."), text("Nothing."), text("Nothing."))
    harness.model.script("observe", text(copied), text(copied), text(copied))
    record = await harness.run("What is the weather in Atlantis?", max_steps=10)
    (completion,) = record.of(RunCompleted)
    assert (completion.steps, completion.stop_reason) == (2, "stuck")
    assert [e.content for e in record.of(ObserveDone)] == ["", ""]


async def test_a_step_that_calls_nothing_and_observes_the_same_again_ends_the_run(
    harness: Harness,
):
    """A small model says "continue" with the answer in hand, step after step: once a step
    with no call observes what the step before observed, the run ends as stuck, its answer
    saying so and what it found."""
    harness.model.script("act", act(FakeToolCall("get_current_time", {})), text("Nothing."))
    harness.model.script(
        "observe", observe("It is 09:52 in Tokyo."), observe("It is 09:52 in  Tokyo.")
    )
    record = await harness.run("What time is it in Tokyo?", max_steps=10)
    (completion,) = record.of(RunCompleted)
    assert (completion.steps, completion.stop_reason) == (2, "stuck")
    assert "not getting any further" in completion.final_answer
    assert "09:52 in  Tokyo" in completion.final_answer
    assert harness.model.phases().count("reason") == 2


async def test_the_same_observation_after_a_new_call_is_progress(harness: Harness):
    harness.model.script(
        "act", act(FakeToolCall("get_current_time", {})), act(FakeToolCall("get_current_time", {}))
    )
    harness.model.script(
        "observe", observe("Checking."), observe("Checking."), observe("Done.", final="Noon.")
    )
    record = await harness.run("What time is it?", max_steps=3)
    assert record.of(RunCompleted)[0].final_answer == "Noon."


async def test_a_verdict_that_reads_the_checks_instructions_back_is_not_shown(harness: Harness):
    """Qwen2.5-0.5B's verdict reason was the verify prompt's own sentence: the person reads a
    plain one instead."""
    copied = "The task is done only if the results actually contain what the task asked for."
    harness.model.script("act", act(FakeToolCall("echo", {"text": 1})))  # fails: not a string
    harness.model.script(
        "observe", observe("Done.", final="All done."), observe("Ok.", final="No.")
    )
    verdict = json.dumps({"done": False, "reason": copied})
    harness.model.script("verify", text(f"```json\n{verdict}\n```"))
    record = await harness.run("Echo something.", max_steps=2)
    reasons = [e.reason for e in record.of(FinishVerified)]
    assert reasons and reasons[0] == "The check found the task not finished yet."


class _PageArgs(BaseModel):
    url: str


async def _page(args: _PageArgs, context: ToolContext) -> dict[str, Any]:
    return {"url": args.url, "text": "Open 8:30 to 17:00."}


async def test_a_link_in_the_task_has_act_offered_the_link_reader_alone_until_it_is_used():
    """Qwen2.5-0.5B, asked what a linked page says, called the clock and made the page up."""
    harness = Harness(
        tools=[make_current_time_tool(), Tool("read_page", "Read a page.", _PageArgs, _page)]
    )
    harness.model.script("reason", reason("I'll read it."), reason("Done reading."))
    harness.model.script(
        "act", act(FakeToolCall("read_page", {"url": "http://x.test/hours"})), act()
    )
    harness.model.script("observe", observe("It opens at 8:30."), observe("Read.", final="8:30."))

    await harness.run("When does it open? See http://x.test/hours", max_steps=2)

    offered = [[t.name for t in c.tools] for c in harness.model.calls if c.phase == "act"]
    assert offered[0] == ["read_page", "request_input"]  # the person's link is read first
    assert "get_current_time" in offered[1]  # once it was, every tool is offered again


async def test_a_reply_that_calls_most_offered_tools_at_once_calls_none():
    """Qwen2.5-0.5B called all eight tools of `make eval` in one reply, `memory_save` of
    made-up facts among them: a list called through is no choice, and nothing of it runs."""
    spray = [
        FakeToolCall("get_current_time", {}),
        FakeToolCall("echo", {"text": "a"}),
        FakeToolCall("read_page", {"url": "http://x.test"}),
        FakeToolCall("request_input", {"question": "Which?"}),
    ]
    harness = Harness(
        tools=[
            make_current_time_tool(),
            echo_tool,
            Tool("read_page", "Read a page.", _PageArgs, _page),
        ]
    )
    harness.model.script("reason", reason("Let me see."))
    harness.model.script("act", act(*spray))
    harness.model.script("observe", observe("Nothing yet.", final="I could not find out."))

    record = await harness.run("Tell me something.", max_steps=1)

    assert record.of(ToolStarted) == []
    assert harness.metrics[Metric.SPRAYED_CALLS_DROPPED] == 4
