"""EchoGate: a copy of the prompts is held back and cut; the model's own text passes."""

from __future__ import annotations

from agent.echo import ECHO_WORDS, EchoGate

PROMPTS = "## Now: think\n\nWrite a few short sentences for the person,\nthen the JSON block."


def test_the_models_own_words_pass_at_once() -> None:
    gate = EchoGate(PROMPTS)
    assert gate.feed("It is ") == "It is "
    assert gate.feed("07:42.") == "07:42."
    assert gate.finish() == "" and not gate.echoed


def test_words_that_match_are_held_until_the_text_is_its_own() -> None:
    gate = EchoGate(PROMPTS)
    assert gate.feed("Write a ") == ""
    assert gate.feed("few") == ""  # still the prompt's words
    assert gate.feed(" lines of code") == "Write a few lines of code"
    assert gate.feed(" now.") == " now."


def test_a_short_text_that_matches_is_released_at_the_end() -> None:
    gate = EchoGate(PROMPTS)
    assert gate.feed("Write") == ""
    assert gate.finish() == "Write" and not gate.echoed


def test_a_copy_is_cut_whatever_its_case_and_line_breaks() -> None:
    gate = EchoGate(PROMPTS)
    copied = "write a FEW short\nsentences   for the person, then the JSON block. And more."
    shown = "".join(gate.feed(copied[i : i + 5]) for i in range(0, len(copied), 5))
    assert shown == "" and gate.finish() == "" and gate.echoed
    assert len("write a few short sentences for the person,".split()) >= ECHO_WORDS


def test_a_copy_from_the_middle_of_a_word_is_not_one() -> None:
    gate = EchoGate(PROMPTS)
    assert gate.feed("rite a few") == "rite a few"  # matches only inside "Write"
