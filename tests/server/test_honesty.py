"""Honest runs: failures are named, a premature finish is verified, loops are refused,
budgets end runs, plans and styles steer Reason, and every phase sees its own messages."""

from __future__ import annotations

import asyncio
import json

import httpx

from agent.tokens import LazyExactCounter, counter_for_model
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe, reason, text
from tests.fakes.tools import Flaky


def _verdict(done: bool, why: str):
    return text(f"{why}\n", json.dumps({"done": done, "reason": why}))


def _weather(broken: set[str]):
    flaky = Flaky(broken)
    return flaky, {"extra_tools": [flaky.tool], "tools": {"enabled": ["weather"]}}


async def test_failure_then_premature_finish_is_verified_and_the_run_continues(
    server_factory, fake_llm: FakeLLM
):
    flaky, options = _weather({"Atlantis"})
    fake_llm.script("reason", reason("I'll get the forecast."), reason("Another city then."))
    fake_llm.script(
        "act",
        act(FakeToolCall("weather", {"city": "Atlantis"})),
        act(FakeToolCall("weather", {"city": "Lisbon"})),
    )
    fake_llm.script(
        "observe",
        observe("Done!", final="It will be sunny in Atlantis."),
        observe("Lisbon works.", final="Atlantis had no data; Lisbon is sunny."),
    )
    fake_llm.script("verify", _verdict(False, "The weather call failed, so nothing was found."))
    async with server_factory(**options) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("Weather in Atlantis?", agent_max_steps=4)
    verify = [f for f in frames if kind(f) == "agent_verify"]
    assert len(verify) == 1 and verify[0]["done"] is False and verify[0]["step"] == 1
    assert "failed" in verify[0]["reason"]
    assert [f["step"] for f in frames if kind(f) == "agent_turn_start"] == [1, 2]
    assert frames[-2]["final_answer"] == "Atlantis had no data; Lisbon is sunny."
    assert fake_llm.phases() == ["reason", "act", "observe", "verify", "reason", "act", "observe"]
    # The verifier saw only the task, the calls and the answer: no history, no reasoning.
    verify_request = next(r for r in fake_llm.requests if r.phase == "verify")
    messages = verify_request.body["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    state = messages[1]["content"]
    assert "Weather in Atlantis?" in state and "no data for Atlantis" in state
    assert "It will be sunny in Atlantis." in state
    assert "I'll get the forecast." not in state
    # Step 2's Reason saw the failure as an unmissable note and the verifier's reason.
    second_reason = [r for r in fake_llm.requests if r.phase == "reason"][1]
    instruction = second_reason.body["messages"][-1]["content"]
    assert "Attention: tool calls that failed" in instruction and "Atlantis" in instruction
    notes = [m["content"] for m in second_reason.body["messages"] if m["role"] == "user"]
    assert any("not finished" in n for n in notes)
    assert flaky.runs == ["Atlantis", "Lisbon"]


async def test_a_verified_finish_ends_normally(server_factory, fake_llm: FakeLLM):
    _, options = _weather({"Atlantis"})
    fake_llm.script("act", act(FakeToolCall("weather", {"city": "Atlantis"})))
    fake_llm.script("observe", observe("It failed.", final="I could not get the forecast."))
    fake_llm.script("verify", _verdict(True, "The answer says plainly that it failed."))
    async with server_factory(**options) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("Weather in Atlantis?")
    assert [f["done"] for f in frames if kind(f) == "agent_verify"] == [True]
    assert frames[-2]["stop_reason"] == "finished"


async def test_no_verification_when_nothing_failed(server, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("get_current_time", {})))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?")
    assert "agent_verify" not in [kind(f) for f in frames]
    assert "verify" not in fake_llm.phases()


async def test_finishing_without_the_tools_reason_named_is_verified(server, fake_llm):
    block = json.dumps(
        {"plan": "check", "tools_to_consider": ["get_current_time"], "finish": False}
    )
    fake_llm.script("reason", text("I'll check the clock.\n", block))
    fake_llm.script("act", act())  # ...but calls nothing
    fake_llm.script("verify", _verdict(True, "fine"))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?")
    assert "verify" in fake_llm.phases()
    assert "agent_verify" in [kind(f) for f in frames]


async def test_a_repeated_identical_failing_call_is_refused(server_factory, fake_llm):
    flaky, options = _weather({"Atlantis"})
    same = {"city": "Atlantis"}
    fake_llm.script("act", *(act(FakeToolCall("weather", same)) for _ in range(3)))
    fake_llm.script("verify", _verdict(False, "still failing"), _verdict(False, "still"))
    checked_twice = {"max_verifications": 2}  # each "not done" keeps the run going
    async with server_factory(**options, agent=checked_twice) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("Atlantis!", agent_max_steps=3)
    errors = [f["error"] for f in frames if kind(f) == "tool_error"]
    assert len(errors) == 3
    assert "already failed 2 times" in errors[2] and "not run again" in errors[2]
    assert flaky.runs == ["Atlantis", "Atlantis"]  # the third was never executed


async def test_budget_exceeded_ends_with_what_the_run_has(server_factory, fake_llm: FakeLLM):
    # Each fake call costs 15 tokens: reason + act + observe = 45 >= 40 before step 2.
    async with server_factory(agent={"max_run_tokens": 40}) as s:
        fake_llm.script("observe", observe("Half of it is done."))
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("a big task", agent_max_steps=5)
        completion = frames[-2]
        assert completion["stop_reason"] == "budget"
        assert "budget" in completion["final_answer"]
        assert "Half of it is done." in completion["final_answer"]
        assert completion["usage"]["total_tokens"] == 45
        assert fake_llm.phases() == ["reason", "act", "observe"]
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            usage = (await http.get(f"/api/sessions/{session}/usage")).json()
            metrics = (await http.get("/metrics")).json()
        assert usage == {
            "session_id": session,
            "runs": 1,
            "usage": {
                "prompt_tokens": 30,
                "completion_tokens": 15,
                "total_tokens": 45,
                "cached_tokens": 0,
                "llm_calls": 3,
                "estimated_calls": 0,
            },
        }
        assert metrics["runs_over_budget"] == 1 and metrics["runs_started"] == 1


async def test_a_finished_chat_run_reports_its_usage_and_counts_in_the_sessions(
    server, fake_llm: FakeLLM
):
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        frames = await c.run("hello", agent_mode=False)
    (response,) = [f for f in frames if f["type"] == "chat_response"]
    assert response["usage"]["llm_calls"] == 1 and response["usage"]["total_tokens"] == 15
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        usage = (await http.get(f"/api/sessions/{session}/usage")).json()
    assert usage["runs"] == 1 and usage["usage"]["llm_calls"] == 1


async def test_usage_carries_cost_when_the_model_is_priced(server_factory, fake_llm):
    prices = {"gpt-4o-mini": {"prompt_per_million": 1000, "completion_per_million": 2000}}
    async with server_factory(llm={"prices": prices}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hi")
    usage = frames[-2]["usage"]
    # 3 calls x (10 prompt, 5 completion) tokens = 30 * 1000/1e6 + 15 * 2000/1e6
    assert usage["cost"] == 0.06


async def test_rolling_plan_is_made_shown_and_followed(server_factory, fake_llm: FakeLLM):
    block = {
        "plan": "x",
        "tools_to_consider": [],
        "finish": False,
        "plan_steps": ["Find the train times", "Pick the best one"],
    }
    fake_llm.script("reason", text("Planning.\n", json.dumps(block)))
    fake_llm.script("observe", observe("Step one done."), observe("ok", final="Take the 9:12."))
    async with server_factory(agent={"plan_every": 5}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("train to Lyon", agent_max_steps=3)
    plans = [f for f in frames if kind(f) == "agent_plan"]
    assert plans == [{**plans[0], "step": 1, "plan": ["Find the train times", "Pick the best one"]}]
    reasons = [r for r in fake_llm.requests if r.phase == "reason"]
    assert "plan_steps" in reasons[0].body["messages"][-1]["content"]
    second = reasons[1].body["messages"][-1]["content"]
    assert "## Your plan\n1. Find the train times\n2. Pick the best one" in second
    assert "plan_steps" not in second  # not due again until step 6 (or a failure)


async def test_style_changes_the_reason_guidance(server, fake_llm: FakeLLM):
    async with await server.client() as c:
        await c.recv()
        await c.run("hi", agent_style="direct")
        await c.run("hi", agent_style="tool_first")
        await c.send({"type": "chat", "content": "hi", "agent_style": "chaotic"})
        assert (await c.recv())["code"] == "invalid_message"
    # The style is part of the run's system message (the same on every call of the run).
    systems = [r.body["messages"][0]["content"] for r in fake_llm.requests if r.phase == "reason"]
    assert "Answer directly from what you know" in systems[0]
    assert "Prefer tools" in systems[1]


async def test_a_missing_control_block_is_asked_for_again(server, fake_llm: FakeLLM):
    fake_llm.script("reason", text("I know this one."))
    fake_llm.script("repair", text('{"plan": "answer", "finish": true}'))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("2+2?")
    assert fake_llm.phases() == ["reason", "repair", "observe"]  # finish: no Act
    repair = next(r for r in fake_llm.requests if r.phase == "repair")
    assert repair.body["messages"][-2] == {"role": "assistant", "content": "I know this one."}
    assert "JSON object" in repair.body["messages"][-1]["content"]
    assert [f["content"] for f in frames if kind(f) == "agent_reason"] == ["I know this one."]


async def test_after_two_failed_repairs_the_reply_is_free_text(server, fake_llm: FakeLLM):
    fake_llm.script("reason", text("No block."))
    fake_llm.script("repair", text("still none"), text("nope"))
    async with await server.client() as c:
        await c.recv()
        await c.run("hello", agent_max_steps=1)
        async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
            metrics = (await http.get("/metrics")).json()
    assert fake_llm.phases()[:4] == ["reason", "repair", "repair", "act"]
    assert metrics["control_block_retries"] == 2 and metrics["control_block_fallbacks"] == 1


async def test_each_phase_sees_its_own_message_list(server, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("get_current_time", {})))
    fake_llm.script("observe", observe("Looked.", final="Noon."))
    async with await server.client() as c:
        await c.recv()
        await c.run("time please")
    by_phase = {r.phase: r.body["messages"] for r in fake_llm.requests}
    for phase, messages in by_phase.items():
        assert [m["role"] for m in messages].count("system") == 1, phase
        assert messages[0]["role"] == "system"
    act_messages = by_phase["act"]
    # Act reads the conversation as a plain tool loop does: it ends with the task.
    assert [m["role"] for m in act_messages] == ["system", "user"]
    assert act_messages[-1]["content"] == "time please"
    # The system message is the same for every phase: a prompt cache reuses it.
    assert len({messages[0]["content"] for messages in by_phase.values()}) == 1
    # The state message exists only for the Act call: Observe sees the results instead.
    observe_messages = by_phase["observe"]
    assert not any(
        m["content"].startswith("[Current state]")
        for m in observe_messages
        if isinstance(m.get("content"), str)
    )
    assert [m["role"] for m in observe_messages[-3:]] == ["assistant", "tool", "user"]
    assert observe_messages[-3]["tool_calls"]  # Reason's text and Act's call, merged


async def test_the_act_state_names_the_plan_or_points_at_the_reasoning_when_there_is_some(
    server, fake_llm: FakeLLM
):
    """The state message is part of the request that asks again, by schema, for a call
    Reason planned and the plain request did not make."""
    first = json.dumps({"plan": "Check the clock.", "tools_to_consider": ["get_current_time"]})
    second = json.dumps({"plan": "", "tools_to_consider": ["get_current_time"], "finish": False})
    fake_llm.script("reason", text(f"Let me see.\n```json\n{first}\n```"))
    fake_llm.script("reason", text(f"```json\n{second}\n```"))
    call = json.dumps({"tool": "get_current_time", "arguments": {}})
    fake_llm.script("act", act(), text(call), act(), text('{"tool": "none"}'))
    fake_llm.script("observe", observe("Looked."), observe("Done.", final="Noon."))
    async with await server.client() as c:
        await c.recv()
        await c.run("time please", agent_max_steps=2)
    acts = [r.body for r in fake_llm.requests if r.phase == "act"]
    assert ["response_format" in body for body in acts] == [False, True, False, True]
    states = [acts[1]["messages"][-1]["content"], acts[3]["messages"][-1]["content"]]
    assert "Plan: Check the clock." in states[0]  # the plan of Reason's block
    assert "Request: time please" in states[0]  # the request, said again
    # Step 2's Reason wrote no text and no plan: its empty message is not there to point at.
    assert "Plan: none written; choose the next action from the task." in states[1]
    assert "see your last message" not in states[1]


async def test_a_plan_that_reads_back_request_inputs_description_is_no_plan(
    server, fake_llm: FakeLLM
):
    """Qwen2.5-0.5B gave request_input's description as its plan: Act's state must not hand
    it back as the plan (the description of every offered tool counts, request_input's too)."""
    from agent.acting import REQUEST_INPUT_SPEC

    block = {"plan": REQUEST_INPUT_SPEC.description, "tools_to_consider": ["get_current_time"]}
    fake_llm.script("reason", text(f"```json\n{json.dumps(block)}\n```"))
    call = json.dumps({"tool": "get_current_time", "arguments": {}})
    fake_llm.script("act", act(), text(call))
    fake_llm.script("observe", observe("Looked.", final="Noon."))
    async with await server.client() as c:
        await c.recv()
        await c.run("time please", agent_max_steps=1)
    state = [r.body for r in fake_llm.requests if r.phase == "act"][1]["messages"][-1]["content"]
    assert REQUEST_INPUT_SPEC.description.rstrip(".") not in state
    assert "Plan: none written; choose the next action from the task." in state


async def test_a_large_result_is_cut_shown_in_an_event_and_recallable(server_factory, fake_llm):
    from tests.fakes.tools import echo_tool

    long_text = " ".join(f"fact{i}" for i in range(3000))
    fake_llm.script(
        "act",
        act(FakeToolCall("echo", {"text": long_text})),
        act(FakeToolCall("recall_details", {"result_id": "x", "focus": "fact2999"})),
    )
    fake_llm.script(
        "observe",
        observe("Too long, I'll look closer."),
        observe("Found it.", final="The last fact is fact2999."),
    )
    options = {
        "extra_tools": [echo_tool],
        "tools": {"enabled": ["echo"]},
        "context": {"tool_result_tokens": 200},
    }
    counter = counter_for_model("gpt-4o-mini")  # the server's (one per model and process)
    assert isinstance(counter, LazyExactCounter)
    await asyncio.to_thread(counter.load)  # else its first counts are estimates
    async with server_factory(**options) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("echo a lot", agent_max_steps=3)
    context = [f for f in frames if kind(f) == "agent_context"]
    assert context and context[0]["compressed"][0]["kept_tokens"] == 200
    assert context[0]["budget"] == 32_000 - 2_048 and context[0]["exact"] is True
    acts = [r for r in fake_llm.requests if r.phase == "act"]
    names = lambda r: {t["function"]["name"] for t in r.body["tools"]}  # noqa: E731
    assert "recall_details" not in names(acts[0]) and "recall_details" in names(acts[1])
    tool_frames = [f for f in frames if f["type"].startswith("tool_")]
    assert tool_frames[-1]["type"] == "tool_error"  # "x" is not a stored result id
    assert "no stored result" in tool_frames[-1]["error"]


async def _ask_for_weather(server_factory, fake_llm: FakeLLM, cities: list[str], steps: int):
    """A run whose steps each ask for the weather of the next of `cities` (all without data)
    and go on; returns the tool, the run's frames and the server's metrics."""
    flaky, options = _weather(set(cities))
    fake_llm.script("act", *(act(FakeToolCall("weather", {"city": c})) for c in cities))
    fake_llm.script("observe", *(observe("No luck yet.") for _ in range(steps)))
    async with server_factory(**options) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("What is the weather?", agent_max_steps=steps)
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            metrics = (await http.get("/metrics")).json()
    return flaky, frames, metrics


async def test_near_duplicate_calls_failing_the_same_way_end_the_run_as_stuck(
    server_factory, fake_llm: FakeLLM
):
    cities = ["Atlantis", "Atlantis city", "Atlantis city centre", "Atlantis now"]
    flaky, frames, metrics = await _ask_for_weather(server_factory, fake_llm, cities, 10)
    completion = frames[-2]
    # Step 1 failed; steps 2 to 4 only varied it by a word and failed the same way.
    assert completion["stop_reason"] == "stuck" and completion["steps"] == 4
    assert fake_llm.phases() == ["reason", "act", "observe"] * 4  # no summary, no verify
    assert flaky.runs == cities
    assert "kept trying the same thing" in completion["final_answer"]
    assert metrics["runs_stuck"] == 1


async def test_different_failing_calls_are_not_stuck(server_factory, fake_llm: FakeLLM):
    cities = ["Atlantis", "Lemuria", "Mu", "El Dorado"]
    _, frames, metrics = await _ask_for_weather(server_factory, fake_llm, cities, 4)
    assert frames[-2]["stop_reason"] == "max_steps" and "runs_stuck" not in metrics
