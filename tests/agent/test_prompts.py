"""The shipped prompts: they render, they carry the plain-language rules, and they never ask
the model to show users raw JSON or internals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.ledger import CallLedger
from agent.parsing import (
    OBSERVE_KEYS,
    REASON_KEYS,
    ControlStream,
    observe_ends_run,
    split_control,
)
from agent.prompts import FilePromptProvider, default_prompt_dir
from agent.structured import PhaseStream

PROMPTS = default_prompt_dir()
PHASES = [
    "agent_reason_prompt",
    "agent_act_prompt",
    "agent_observe_prompt",
    "agent_summarize_prompt",
    "agent_verify_prompt",
    "chat_prompt",
]
VALUES = {
    "step": 1,
    "max_steps": 5,
    "tools": "get_current_time",
    "extra": "",
    "today": "x",
    "style": "g",
    "keys": "finish",
    "state": "s",
    "task": "t",
    "calls": "c",
    "failures": "f",
    "answer": "a",
    "figures": "22.5",
    "reason": "r",
}


def test_every_template_renders_without_leftover_placeholders():
    provider = FilePromptProvider()
    for path in sorted(PROMPTS.glob("*.md")):
        rendered = provider.render(path.stem, **VALUES)
        assert rendered, path.name
        assert not re.search(r"\$[a-z_]+", rendered), f"{path.name} leaves a placeholder"


def _mentions(text: str, *words: str) -> bool:
    """Whether `text` speaks of each of `words` (case-insensitive stems), however phrased."""
    lowered = text.lower()
    return all(re.search(rf"\b{re.escape(word)}", lowered) for word in words)


def test_the_plain_language_rules_are_read_where_the_person_reads_the_text():
    # Concepts, not exact sentences: rewording a prompt must not fail the suite.
    writing = (PROMPTS / "writing.md").read_text()
    assert _mentions((PROMPTS / "system.md").read_text(), "technical")
    assert _mentions(writing, "function", "error")  # no function names, no error codes
    assert _mentions(writing, "json")
    assert _mentions(writing, "done", "never")
    # Chat answers and the step-limit answer carry them; Act's request must not (a small
    # model told "never show JSON" wrote its call as prose), nor Reason's and Observe's,
    # whose long rules a small model read back as its findings.
    provider = FilePromptProvider()
    rules = provider.render("writing")
    for name in ("chat_prompt", "agent_summarize_prompt"):
        assert rules in provider.render(name, **VALUES), name
    for name in ("system", "agent_system", "agent_reason_prompt", "agent_observe_prompt"):
        assert rules not in provider.render(name, **VALUES), name
    for text in (writing, (PROMPTS / "system.md").read_text()):
        # A small model copies a quoted sample sentence as its own answer: Qwen 0.5B answered
        # "What time is it in Tokyo?" with an old example after the tool had succeeded.
        assert not re.search(r'"[A-Z][^"]{15,}[.!?]"', text)


@pytest.mark.parametrize(
    ("prompt", "keys", "shown"),
    [
        ("agent_reason_prompt", REASON_KEYS, "thought"),
        ("agent_observe_prompt", OBSERVE_KEYS, "observation"),
    ],
)
def test_the_prompt_and_the_parser_agree_on_the_object(
    prompt: str, keys: frozenset[str], shown: str
):
    """The keys a phase's instruction names, `key (what it holds)`, are exactly what the
    phase's reader takes: its control keys, and the field the person reads."""
    text = FilePromptProvider().render(prompt, **VALUES)
    fields = text.split("JSON object:", 1)[1]
    named = set(re.findall(r"\b([a-z_]+) \(", fields))
    assert named == keys | {shown}
    reply = "{" + ", ".join(f'"{k}": ""' for k in sorted(named)) + "}"
    stream = PhaseStream(keys, shown=shown)
    stream.feed(reply)
    stream.finish()
    assert stream.control is not None and set(stream.control) == keys | {shown}


def test_observe_asks_for_the_answer_in_the_object_that_ends_the_run():
    reply = '{"observation": "Found it.", "should_continue": false, "final_answer": "The answer."}'
    stream = PhaseStream(
        OBSERVE_KEYS, shown="observation", answer="final_answer", answer_after=observe_ends_run
    )
    shown = stream.feed(reply) + stream.finish()
    assert shown == "Found it." and stream.take_answer() == "The answer."
    rules = (PROMPTS / "agent_observe_prompt.md").read_text()
    assert _mentions(rules, "final_answer", "should_continue (false")


def test_the_older_form_is_still_read():
    """Prose and then a block, as servers that ignore the schema may still answer."""
    block = '```json\n{"observation": "o", "should_continue": false}\n```\n'
    stream = ControlStream(OBSERVE_KEYS, answer_after=observe_ends_run)
    stream.feed("Found it.\n" + block + "The answer.")
    stream.finish()
    assert stream.content == "Found it." and stream.answer == "The answer."
    content, control = split_control("Words.\n" + block, OBSERVE_KEYS)
    assert content == "Words." and control is not None


def test_failed_calls_are_named_with_the_rule_to_say_so_and_change_approach():
    """The rules on failures travel with the failures: every phase's message names them."""
    ledger = CallLedger()
    ledger.record(1, "get_weather", {"city": "Atlantis"}, ok=False, detail="no data")
    note = ledger.failure_note()
    assert _mentions(note, "fail", "plainly", "repeat", "never claim")
    assert "get_weather" in note


def test_phase_instructions_stay_short():
    """What differs per call is the last message; short, so a prefix cache reuses the rest."""
    for name in ("agent_reason_prompt", "agent_act_prompt", "agent_observe_prompt"):
        assert len((PROMPTS / f"{name}.md").read_text()) < 400, name


def test_every_phase_has_a_prompt_file():
    for name in PHASES:
        assert (PROMPTS / f"{name}.md").is_file(), name
    for style in ("balanced", "tool_first", "direct"):
        assert (Path(PROMPTS) / f"style_{style}.md").is_file()
