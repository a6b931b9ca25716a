"""Telling a model's own words from a line it copied out of its prompt."""

from __future__ import annotations

import pytest

from agent.echo import copied_from

PROMPT = (
    "How to choose: Prefer tools: check facts, times and anything that can change with a tool "
    'before you answer, even when you think you know.\n{"plan": "what you will do next, in one '
    'sentence", "finish": false}\nNever write "done" for something that failed.'
)


@pytest.mark.parametrize(
    "text",
    [
        "Choose tools: check facts, times and anything that can change with a tool before you "
        "answer, even when you think you know.",
        "What you will do next, in one sentence.",
        "what  you WILL do next in one sentence",
    ],
)
def test_a_copied_line_is_found_whatever_its_case_and_punctuation(text):
    assert copied_from(text, PROMPT)


@pytest.mark.parametrize(
    "text",
    [
        "I will check the current time in Tokyo.",
        "Done.",  # too short to judge: the prompt has the word, the model may mean it
        "Something failed.",
        "Check facts about Tokyo's time zone before I answer.",
        "",
    ],
)
def test_the_models_own_words_are_not_a_copy(text):
    assert not copied_from(text, PROMPT)
