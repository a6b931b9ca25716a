"""Token counts: exact offline for OpenAI families; the estimate stays close and errs high."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import tokens
from agent.messages import Message, ToolCall
from agent.tokens import (
    EstimatedCounter,
    LazyExactCounter,
    counter_for_model,
    message_tokens,
    message_upper_bound,
)

ENGLISH = (
    "The server runs an agent for each chat: it reasons about the question, calls the tools "
    "it needs, observes what they returned and answers in plain words. Every event is stored "
    "before any browser sees it, so a client that reconnects gets exactly what it missed. "
    "If the language model fails, the run ends with a clear error instead of hanging; if a "
    "tool fails, the model is told so and may try another way.\n\n"
    "Install it with `make install`, start it with `make serve`, and open the address it "
    "prints. Settings come from config.toml, then from AGENT__SECTION__KEY variables, then "
    "from flags on the command line. Tests run against a fake model server and real storage "
    "(SQLite, and FerretDB for the MongoDB backend); nothing reaches the internet.\n\n"
) * 6
CODE = (
    "async def run_tool_calls(ctx: RunContext, calls: Sequence[ToolCall]) -> list[Outcome]:\n"
    '    """Run each call under its own timeout; a failure becomes its tool_error."""\n'
    "    results: list[Outcome] = []\n"
    "    for call in calls:\n"
    "        started = time.perf_counter()\n"
    "        try:\n"
    "            async with asyncio.timeout(ctx.limits.tool_timeout_s):\n"
    "                value = await ctx.tools.call(call.name, json.loads(call.arguments), ctx)\n"
    "        except (ToolError, TimeoutError) as exc:\n"
    "            results.append(Outcome(False, str(exc), _ms_since(started)))\n"
    "            continue\n"
    "        results.append(Outcome(True, value, _ms_since(started)))\n"
    "    return results\n\n"
) * 8
SAMPLES = {
    # Fixed samples: calibrating against files of the repo would fail when they are edited.
    "english": ENGLISH,
    "code": CODE,
    "json": json.dumps(
        [
            {
                "timezone": "Europe/Paris",
                "iso": "2026-11-22T15:00:00+01:00",
                "weekday": "Sunday",
                "epoch_ms": 1795186800000,
            }
        ]
        * 40
    ),
    "chinese": "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类"
    "智能相似的方式做出反应的智能机器。该领域的研究包括机器人、语言识别和专家系统。" * 5,
    "japanese": "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。明日の天気は晴れ"
    "の予報です。会議は午後三時から始まります。" * 5,
    "russian": "Искусственный интеллект — это свойство интеллектуальных систем выполнять "
    "творческие функции, которые традиционно считаются прерогативой человека." * 5,
}


def test_openai_models_get_exact_offline_counts():
    counter = counter_for_model("gpt-4o-mini")
    assert isinstance(counter, LazyExactCounter)
    assert counter.count("Hello world, this is a test.") == 8  # o200k_base
    assert counter.exact
    assert isinstance(counter_for_model("openai/gpt-4-turbo"), LazyExactCounter)


def test_other_models_get_the_estimate():
    assert isinstance(counter_for_model("llama3.1:8b"), EstimatedCounter)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_estimate_is_calibrated_and_errs_high(name: str):
    text = SAMPLES[name]
    o200k = counter_for_model("gpt-4o").count(text)
    cl100k = counter_for_model("gpt-4").count(text)
    estimate = EstimatedCounter().count(text)
    assert estimate >= 0.95 * min(o200k, cl100k), (name, estimate, o200k, cl100k)
    assert estimate <= 2.0 * max(o200k, cl100k), (name, estimate, o200k, cl100k)


def test_a_huge_text_is_estimated_not_refused():
    counter = counter_for_model("gpt-4o")
    text = "x" * 2_000_000
    assert counter.count(text) == EstimatedCounter().count(text)


def test_tables_load_on_the_first_count_not_before():
    counter = LazyExactCounter("o200k_base")
    assert not counter.loaded and not counter.exact
    assert counter.count("Hello world, this is a test.") == 8
    assert counter.loaded and counter.exact


async def test_under_an_event_loop_the_tables_load_in_a_thread_and_the_loop_never_stalls(
    monkeypatch: pytest.MonkeyPatch,
):
    """Loading takes ~0.5 s of CPU: on the event loop, every session would wait for it."""
    loaded_in: list[str] = []

    def load(encoding: str) -> object:
        loaded_in.append(threading.current_thread().name)
        return real_load(encoding)

    real_load = tokens._load
    monkeypatch.setattr(tokens, "_load", load)
    counter = LazyExactCounter("o200k_base")
    text = '{"city": "Lyon", "days": [1, 2, 3]}'  # 19 tokens, estimated 16
    assert counter.count(text) == EstimatedCounter().count(text)  # meanwhile: the estimate
    assert not counter.exact
    (loading,) = [t for t in threading.enumerate() if t.name == "token-tables"]
    await asyncio.to_thread(loading.join, 30)
    assert counter.loaded and counter.exact and counter.count(text) == 19
    assert loaded_in == ["token-tables"]  # not the event loop's thread


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_byte_bound_is_never_below_a_count(name: str):
    text = SAMPLES[name]
    message = Message(
        "assistant", text, tool_calls=(ToolCall("c1", "get_current_time", text[:40]),)
    )
    bound = message_upper_bound(message)
    for counter in (counter_for_model("gpt-4o"), counter_for_model("gpt-4"), EstimatedCounter()):
        assert message_tokens(counter, message) <= bound, (name, counter)


def _reference_estimate(text: str) -> int:
    """The estimate as its docstring states it, written plainly."""
    if not text:
        return 0
    ascii_chars = sum(c.isascii() for c in text)
    wordish = len(re.findall(r"[A-Za-z ]", text))
    cjk = len(re.findall(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]", text))
    other = len(text) - ascii_chars - cjk
    return int(wordish / 4.2 + (ascii_chars - wordish) / 1.6 + cjk * 1.1 + other * 0.55) + 1


@given(st.text())
def test_the_estimate_counts_as_its_docstring_says(text: str):
    assert EstimatedCounter().count(text) == _reference_estimate(text)
