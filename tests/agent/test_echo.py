"""Telling a model's own words from a line it copied out of its prompt."""

from __future__ import annotations

import pytest

from agent.echo import EchoGate, copied_from, own_words

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
        # eight words of ours in a row, among more of the model's own (Qwen2.5-0.5B)
        "I will use the web_fetch function to get the weather, and then check facts, times "
        "and anything that can change.",
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


SOURCE = (
    "Ask the user a question and wait for the answer. Use it only when you need information "
    "or a decision that only the user can give."
)


def _through(gate: EchoGate, text: str, size: int) -> str:
    """`text` streamed through `gate` in pieces of `size` characters."""
    shown = "".join(gate.feed(text[i : i + size]) for i in range(0, len(text), size))
    return shown + gate.finish()


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_a_copied_sentence_after_own_words_is_held_back_whatever_the_pieces(size):
    own = "Tokyo is nine hours ahead of London, so I will look it up now. "
    copied = "I will ask the user a question and wait for the answer. "
    tail = "Then I answer."
    gate = EchoGate(SOURCE)
    assert _through(gate, own + copied + tail, size) == own + tail
    assert gate.dropped and not gate.copy
    assert gate.shown == own + tail


def test_own_words_pass_on_before_their_sentence_ends():
    """Word by word: only a word that may still go on in the next piece waits for it."""
    gate = EchoGate(SOURCE)
    first = gate.feed("The order A-1042 was shipped to Lisbon on the third")
    assert first == "The order A-1042 was shipped to Lisbon on the "
    assert gate.feed(" of December.") == "third of December."


def test_a_text_of_nothing_but_copies_is_a_copy():
    gate = EchoGate(SOURCE)
    assert _through(gate, "Use it only when you need information or a decision.", 5) == ""
    assert gate.copy


def test_own_words_are_what_the_gate_shows():
    text = "It is noon in Tokyo. Use it only when you need information or a decision."
    assert own_words(text, SOURCE) == "It is noon in Tokyo."
    assert own_words("Use it only when you need information or a decision.", SOURCE) == ""


def test_a_long_held_line_is_judged_at_its_fortieth_word_not_its_end():
    """A line that shares a run with the instructions and never ends its sentence is not
    held for the whole phase: the page would look frozen."""
    gate = EchoGate(SOURCE)
    line = "Ask the user about " + " ".join(f"city{i}" for i in range(60))
    shown = "".join(gate.feed(word + " ") for word in line.split())
    assert shown.startswith("Ask the user about city0") and "city59" in shown
    assert not gate.dropped


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_a_copy_that_begins_after_a_sentences_first_words_is_left_out(size):
    """Qwen2.5-0.5B: "I will use the web_fetch function to get the current weather in XYZ,
    and the lookup_order function to look up a person in the user's address book by first
    name." Its first eight words are its own; the description comes after them."""
    gate = EchoGate(SOURCE)
    own = "I will use the lookup_order function for my order first, and then "
    copied = "ask the user a question and wait for the answer. "
    shown = _through(gate, own + copied + "It is noon.", size)
    assert "wait for the answer" not in shown
    assert shown.startswith("I will use the lookup_order function for my order first")
    assert shown.endswith("It is noon.")
    assert gate.dropped


def test_a_few_words_of_ours_inside_a_sentence_of_its_own_are_shown():
    gate = EchoGate(SOURCE)
    text = "The order A-1042 was shipped, so ask the user a question later if needed."
    assert _through(gate, text, 3) == text
    assert not gate.dropped


DESCRIPTION = "Recall what you remember about the user: memories matching the query, best first."


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_a_whole_short_sentence_of_ours_is_a_copy_inside_a_sentence_of_its_own(size):
    """Qwen2.5-0.5B listed the tools it would use: "…, and the memory_retrieve function to
    recall what you remember about the user." Seven words, too few for a run, but the whole
    of a sentence of a tool's description."""
    gate = EchoGate(descriptions=[DESCRIPTION])
    own = "I will plan to use the clock for the time in Paris, and the memory tool to "
    shown = _through(gate, own + "recall what you remember about the user. It is noon.", size)
    assert "remember about the user" not in shown
    assert shown.startswith("I will plan to use the clock for the time in Paris")
    assert shown.endswith("It is noon.")
    said = "So I will look it up now and recall what you remember about the user."
    assert copied_from(said, descriptions=[DESCRIPTION])
    assert not copied_from("I remember about the user what you said.", descriptions=[DESCRIPTION])
    # other texts of ours carry failed calls' errors, which an answer may say in their words
    assert not copied_from(said, DESCRIPTION)
