"""The shipped prompts: they render, they carry the plain-language rules, and they never ask
the model to show users raw JSON or internals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.prompts import FilePromptProvider, default_prompt_dir

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
    "style_guidance": "g",
    "keys": "finish",
    "task": "t",
    "calls": "c",
    "failures": "f",
    "answer": "a",
}


def test_every_template_renders_without_leftover_placeholders():
    provider = FilePromptProvider()
    for path in sorted(PROMPTS.glob("*.md")):
        rendered = provider.render(path.stem, **VALUES)
        assert rendered, path.name
        assert not re.search(r"\$[a-z_]+", rendered), f"{path.name} leaves a placeholder"


def test_the_system_prompt_sets_plain_language_rules_with_examples():
    system = (PROMPTS / "system.md").read_text()
    assert "not technical" in system
    assert "Do:" in system and "Don't:" in system
    assert "Never show raw JSON" in system
    assert "Never claim a task is done when it is not" in system


@pytest.mark.parametrize("name", ["agent_reason_prompt", "agent_observe_prompt"])
def test_phase_prompts_keep_the_json_block_away_from_the_person(name: str):
    text = (PROMPTS / f"{name}.md").read_text()
    assert "for the person" in text  # the text part is written for the user
    assert "JSON block" in text and "nothing after it" in text


def test_prompts_require_acknowledging_failures_and_changing_approach():
    observe = (PROMPTS / "agent_observe_prompt.md").read_text()
    act = (PROMPTS / "agent_act_prompt.md").read_text()
    reason = (PROMPTS / "agent_reason_prompt.md").read_text()
    assert "If a tool failed, say so plainly" in observe
    assert "never repeat the same call unchanged" in act
    assert "do not repeat" in reason and "failed" in reason
    assert "say so honestly" in observe


def test_every_phase_has_a_prompt_file():
    for name in PHASES:
        assert (PROMPTS / f"{name}.md").is_file(), name
    for style in ("balanced", "tool_first", "direct"):
        assert (Path(PROMPTS) / f"style_{style}.md").is_file()
