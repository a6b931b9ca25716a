"""Token counts: exact offline for OpenAI families; the estimate stays close and errs high."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.messages import Message, ToolCall
from agent.tokens import (
    EstimatedCounter,
    LazyExactCounter,
    counter_for_model,
    message_tokens,
    message_upper_bound,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLES = {
    "english": (REPO / "README.md").read_text(),
    "code": (REPO / "agent" / "loop.py").read_text(),
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
    assert isinstance(counter, LazyExactCounter) and counter.exact
    assert counter.count("Hello world, this is a test.") == 8  # o200k_base
    assert counter_for_model("openai/gpt-4-turbo").exact


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
    assert not counter.loaded and counter.exact
    assert counter.count("Hello world, this is a test.") == 8
    assert counter.loaded


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_byte_bound_is_never_below_a_count(name: str):
    text = SAMPLES[name]
    message = Message(
        "assistant", text, tool_calls=(ToolCall("c1", "get_current_time", text[:40]),)
    )
    bound = message_upper_bound(message)
    for counter in (counter_for_model("gpt-4o"), counter_for_model("gpt-4"), EstimatedCounter()):
        assert message_tokens(counter, message) <= bound, (name, counter)
