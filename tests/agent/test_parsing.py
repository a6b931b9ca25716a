"""The control-block splitter: what users see never contains the block."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from agent import parsing
from agent.parsing import (
    OBSERVE_KEYS,
    REASON_KEYS,
    ControlStream,
    read_observe_control,
    read_reason_control,
    split_control,
)


@pytest.fixture(autouse=True, scope="module", params=["kept", "dropped"])
def decided_text(request):
    """Every case runs twice: as usual, and with the decided text dropped before each chunk
    (normally only past 4 KB of it), so that every index that moves with it is checked."""
    kept = parsing._KEEP_DECIDED
    if request.param == "dropped":
        parsing._KEEP_DECIDED = 1
    yield
    parsing._KEEP_DECIDED = kept


def observing() -> ControlStream:
    """An Observe stream: the text after a block with `should_continue: false` is the answer."""
    return ControlStream(OBSERVE_KEYS, answer_after=lambda block: not block["should_continue"])


def stream(chunks: list[str], keys=REASON_KEYS) -> tuple[list[str], ControlStream]:
    s = ControlStream(keys)
    shown = [s.feed(c) for c in chunks]
    shown.append(s.finish())
    return shown, s


@pytest.mark.parametrize(
    "reply",
    [
        'I will check.\n```json\n{"plan": "p", "finish": false}\n```',
        'I will check.\n```\n{"plan": "p", "finish": false}\n```\n',
        'I will check. {"plan": "p", "finish": false}',
        'I will check.\n{"plan": "p",\n "finish": false}\n',
    ],
)
def test_the_block_is_cut_out_in_every_accepted_form(reply):
    for size in (1, 3, 7, len(reply)):
        chunks = [reply[i : i + size] for i in range(0, len(reply), size)]
        shown, s = stream(chunks)
        assert "".join(shown).strip() == "I will check."
        assert s.control == {"plan": "p", "finish": False}


def test_text_streams_before_the_block_arrives():
    shown, _ = stream(["Looking ", "it up", " now.\n", '{"finish": true}'])
    assert shown[:3] == ["Looking ", "it up", " now.\n"]


def test_ordinary_braces_and_code_fences_stay_visible():
    reply = 'Use {"a": 1} like this:\n```python\nprint(1)\n```\nThen go on.'
    content, control = split_control(reply, REASON_KEYS)
    assert content == reply and control is None


def test_a_malformed_trailing_json_fence_is_hidden_and_reads_as_no_control():
    content, control = split_control('Done.\n```json\n{"finish": tru\n```', REASON_KEYS)
    assert content == "Done." and control is None


def test_a_cut_off_block_is_hidden():
    content, control = split_control('Almost {"should_continue": fal', OBSERVE_KEYS)
    assert content == "Almost" and control is None


def test_the_last_block_wins_and_the_text_between_stays():
    content, control = split_control('{"plan": "a"} middle {"plan": "b"}', REASON_KEYS)
    assert content == "middle" and control == {"plan": "b"}


def test_lenient_reading_of_values():
    assert read_reason_control({"finish": "true"}).finish is True  # type: ignore[union-attr]
    assert read_reason_control({"plan": 3}).plan == ""  # type: ignore[union-attr]
    observed = read_observe_control({"should_continue": None, "final_answer": "x"})
    assert observed is not None and observed.should_continue is True
    assert read_observe_control(None) is None


def test_thinking_and_action_tags():
    reply = (
        "<thinking>I should check the time.</thinking>\n"
        '<action>{"plan": "x", "finish": true}</action>'
    )
    for size in (1, 4, len(reply)):
        chunks = [reply[i : i + size] for i in range(0, len(reply), size)]
        shown, s = stream(chunks)
        assert "".join(shown).strip() == "I should check the time."
        assert s.control == {"plan": "x", "finish": True}
    content, control = split_control("Sure.<action>not json</action> More text.", REASON_KEYS)
    assert content == "Sure. More text." and control is None
    content, control = split_control(
        '<action>```json\n{"finish": false}\n```</action>', REASON_KEYS
    )
    assert content == "" and control == {"finish": False}


def test_a_key_value_block_is_read_only_with_a_yes_no_value():
    from agent.parsing import read_loose_control

    reply = "Noted.\nobservation: It is noon. should_continue: false"
    text, block = read_loose_control(reply, OBSERVE_KEYS)
    assert text == "Noted." and block == {"observation": "It is noon.", "should_continue": False}
    prose = "I will finish: the report today."
    assert read_loose_control(prose, REASON_KEYS) == (prose, None)


def test_a_fence_inside_the_blocks_strings_does_not_end_it():
    answer = "Run:\n```python\nprint('```')\n```"
    block = {"observation": "o", "should_continue": False, "final_answer": answer}
    reply = "Found it.\n```json\n" + __import__("json").dumps(block) + "\n```"
    for size in (1, 4, len(reply)):
        chunks = [reply[i : i + size] for i in range(0, len(reply), size)]
        shown, s = stream(chunks, OBSERVE_KEYS)
        assert "".join(shown).strip() == "Found it."
        assert s.control is not None and s.control["final_answer"] == answer


def test_prose_without_any_key_is_no_block():
    from agent.parsing import read_loose_control

    assert read_loose_control("Just words.", OBSERVE_KEYS) == ("Just words.", None)


def test_an_open_object_is_scanned_once_across_chunks():
    """A long reply with an unclosed `{` must not be rescanned from its start on every chunk
    (that made long replies quadratic on the event loop)."""
    stream = ControlStream(REASON_KEYS)
    stream.feed('Plan first.\n{"plan": "a')
    scan = stream._scan
    assert scan is not None and scan.pos == len(stream._text)
    for _ in range(50):
        stream.feed(" { b")
        assert stream._scan is scan and scan.pos == len(stream._text)
    stream.feed('"}')
    stream.finish()
    assert stream.content == "Plan first."
    assert stream.control == {"plan": "a" + " { b" * 50}


def test_an_open_code_fence_is_searched_only_in_new_text():
    stream = ControlStream(REASON_KEYS)
    stream.feed("Code:\n```python\nx = 1\n")
    for _ in range(50):
        stream.feed("y = {`}\n")
        opened, resume = stream._fence_searched
        assert resume >= len(stream._text) - 2
    stream.feed("```\nDone.")
    assert stream.finish() == ""
    assert stream.content.startswith("Code:\n```python") and stream.content.endswith("Done.")


@pytest.mark.parametrize("after", ["More words, {x} and `y`. ", "   \n"])
def test_text_after_a_block_is_not_kept_whole(after):
    """Prose (or white space) a model writes after its Reason block is decided text like any
    other: keeping it all made every later chunk copy it (quadratic on the event loop)."""
    stream = ControlStream(REASON_KEYS)
    stream.feed('Plan.\n```json\n{"plan": "p", "finish": false}\n```\n')
    for _ in range(2000):
        stream.feed(after)
        assert len(stream._text) <= 3 * parsing._KEEP_DECIDED + len(after)
    stream.feed('{"plan": "q", "finish": true}')
    stream.finish()
    if after.strip():  # prose between: the later block replaces the first
        assert stream.control == {"plan": "q", "finish": True} and not stream.settled
    else:  # only white space between: a repeat, the first block stands
        assert stream.control == {"plan": "p", "finish": False} and stream.settled


@pytest.mark.parametrize(
    "reply",
    ["Here is the code:\n```\nprint(1)\n```", "Here is the code:\n```\nprint(1)\n"],
)
def test_an_unlabelled_code_block_at_the_end_stays_visible(reply):
    """Only a fence meant as the control block (labelled json, or an object inside) is cut."""
    text, control = split_control(reply, REASON_KEYS)
    assert text == reply.strip() and control is None


def test_an_unlabelled_fence_around_an_object_at_the_end_is_still_cut():
    assert split_control('Plan.\n```\n{"plan": "x"', REASON_KEYS) == ("Plan.", None)


_BLOCK = '{"plan": "p", "finish": false}'


@pytest.mark.parametrize(
    "reply",
    [
        f"I will check.\n```json\n{_BLOCK}\n```\n\n```json\n{_BLOCK}\n```\n\n```json\n{_BLOCK}",
        f"I will check.\n```json\n{_BLOCK}\n{_BLOCK}\n{_BLOCK}\n{_BLOCK}",
        f"I will check.\n{_BLOCK}\n{_BLOCK}\n{_BLOCK[:9]}",
        f'I will check.\n```json\n{_BLOCK}\n```\n{{"name": "get_current_time"}}',
    ],
)
def test_a_block_written_again_settles_the_stream_on_the_first(reply):
    for size in (1, 5, len(reply)):
        chunks = [reply[i : i + size] for i in range(0, len(reply), size)]
        s = ControlStream(REASON_KEYS)
        shown, fed = [], 0
        for chunk in chunks:
            shown.append(s.feed(chunk))
            fed += len(chunk)
            if s.settled:
                break
        shown.append(s.finish())
        assert s.settled
        assert size == len(reply) or fed < len(reply), "the caller can stop reading early"
        assert "".join(shown).strip() == "I will check."
        assert s.control == {"plan": "p", "finish": False}


@pytest.mark.parametrize(
    "reply",
    [
        f"I will check.\n```json\n{_BLOCK}\n```",
        f'{_BLOCK}\nThen more text.\n{{"plan": "b"}}',  # prose between: the last still wins
        'A list: {"plan": "x", "finish": false}, then prose.',
    ],
)
def test_a_single_block_or_blocks_apart_do_not_settle(reply):
    _, s = stream([reply])
    assert not s.settled


def test_blocks_inside_an_answer_after_its_block_never_cut_it():
    s = observing()
    block = '{"observation": "done", "should_continue": false}'
    answer = 'For example:\n```json\n{"observation": "x"}\n```\n\n```json\n{"a": 1}\n```'
    s.feed(f"Done.\n{block}\n{answer}")
    s.finish()
    assert not s.settled and s.answer == answer


def test_a_block_repeated_inside_its_fence_is_no_answer():
    s = observing()
    block = '{"observation": "done", "should_continue": false, "final_answer": "Paris."}'
    s.feed(f"```json\n{block}\n{block}\n{block}")
    s.finish()
    assert s.settled and s.answer == ""
    assert s.control is not None and s.control["final_answer"] == "Paris."


@pytest.mark.parametrize(
    "repeat",
    [
        '\n```json\n{"observation": "done", "should_continue": false}\n```',
        '\n{"observation": "done", "should_continue": false}\n{"obs',
    ],
)
def test_a_final_block_written_again_is_no_answer(repeat):
    block = '{"observation": "done", "should_continue": false, "final_answer": "Paris."}'
    reply = f"Done.\n{block}{repeat}"
    for size in (1, 4, len(reply)):
        s = observing()
        for i in range(0, len(reply), size):
            s.feed(reply[i : i + size])
            assert s.take_answer() == ""
            if s.settled:
                break
        s.finish()
        assert s.settled and s.answer == "" and s.control["final_answer"] == "Paris."


@pytest.mark.parametrize(
    "answer",
    [
        "Paris is the capital.",
        "```python\nprint('Paris')\n```\nThat prints it.",
        '```json\n{"city": "Paris"}\n```',
        '{"city": "Paris"}',
    ],
)
def test_an_answer_after_the_block_streams_whatever_it_opens_with(answer):
    block = '{"observation": "done", "should_continue": false}'
    s = observing()
    reply = f"Done.\n{block}\n{answer}"
    taken = [s.take_answer() for _ in [s.feed(reply[i : i + 3]) for i in range(0, len(reply), 3)]]
    s.finish()
    taken.append(s.take_answer())
    assert not s.settled
    assert "".join(taken).strip() == answer == s.answer


def test_an_answer_is_taken_piece_by_piece_without_its_leading_white_space():
    s = observing()
    s.feed('Done.\n{"observation": "done", "should_continue": false}')
    taken = []
    for chunk in ["\n", "  ", "\n\nParis", " is", "  the", "\n\ncapital. "]:
        s.feed(chunk)
        taken.append(s.take_answer())
    s.finish()
    taken.append(s.take_answer())
    assert taken == ["", "", "Paris", " is", "  the", "\n\ncapital. ", ""]
    assert s.answer == "Paris is  the\n\ncapital."


def test_a_repeat_after_the_final_block_fills_in_what_it_left_empty():
    s = observing()
    first = '{"observation": "done", "should_continue": false, "final_answer": ""}'
    second = '{"observation": "other", "should_continue": false, "final_answer": "Paris."}'
    s.feed(f"Done.\n{first}\n```json\n{second}\n```")
    s.finish()
    assert s.settled and s.answer == ""
    assert s.control == {"observation": "done", "should_continue": False, "final_answer": "Paris."}


@pytest.mark.parametrize(
    ("reply", "shown"),
    [  # a fence opened mid-line: its closing fence looks like an opening one
        ('A ```json\n{"a": 1}\n``` b. ' + _BLOCK, 'A ```json\n{"a": 1}\n``` b.'),
        ("A ```\ncode\n```\n" + _BLOCK, "A ```\ncode"),
        ('Try {"a": \n' + _BLOCK, 'Try {"a":'),  # a brace opened in prose, never closed
    ],
)
def test_a_block_after_a_fence_or_brace_left_open_is_still_read(reply, shown):
    for chunks in ([reply], [reply[: reply.index(_BLOCK)], _BLOCK]):
        text, s = stream(chunks)
        assert "".join(text).strip() == shown
        assert s.control == {"plan": "p", "finish": False}


# Prose a model writes around its block: words, braces, quotes and fences in any order, open or
# closed, mid-line or not, but never a control key or a thinking/action tag.
_PROSE_PIECES = st.sampled_from(
    [
        "A",
        " b.",
        "code",
        " ",
        "\n",
        "\n\n",
        "`",
        "``",
        "```",
        "```json",
        "```python",
        "```\n",
        "```json\n",
        "{",
        "}",
        '"',
        '{"a": ',
        '{"a": 1}',
        "[1, {",
        "x = {`}",
        "\\",
        ":",
    ]
)


def _cut(reply: str, cuts: list[int]) -> list[str]:
    """`reply` in chunks of the given sizes, repeated until it is used up."""
    chunks, i = [], 0
    for cut in cuts * (len(reply) // sum(cuts) + 1):
        if i >= len(reply):
            break
        chunks.append(reply[i : i + cut])
        i += cut
    return chunks


_BLOCK_FORMS = [
    "\n" + _BLOCK,
    " " + _BLOCK,
    "\n```json\n" + _BLOCK + "\n```",
    "\n```\n" + _BLOCK + "\n```\n",
    "\n```json\n" + _BLOCK,  # the model stopped before closing its fence
]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    prose=st.lists(_PROSE_PIECES, max_size=12).map("".join),
    form=st.sampled_from(_BLOCK_FORMS),
    cuts=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40),
)
def test_the_block_is_found_after_any_prose_in_any_chunking(prose, form, cuts):
    """Whatever fences or braces the text before it left open, the block at the end is read
    and never shown (up to 4 braces left open: reading on inside each costs a scan to the
    end of the reply, so the reader stops there)."""
    assume(prose.count("{") <= 4)
    reply = prose + form
    shown, s = stream(_cut(reply, cuts))
    assert s.control == {"plan": "p", "finish": False}, reply
    assert '"plan"' not in "".join(shown), reply


_ENDING = '{"observation": "o", "should_continue": false}'


@pytest.mark.parametrize(
    "before",
    [
        "Code:\n```python\nprint(1)\n",  # a code block the model never closed
        '```\n{"a": 1}\n',  # an object in a fence never closed
    ],
)
def test_a_fence_left_open_ends_where_the_blocks_fence_opens(before):
    """A line "```json" cannot close a fence (it opens one): the answer keeps no stray fence."""
    reply = f"{before}```json\n{_ENDING}\n```\nIt is noon."
    for size in (1, 5, len(reply)):
        s = observing()
        for i in range(0, len(reply), size):
            s.feed(reply[i : i + size])
        s.finish()
        assert s.control == {"observation": "o", "should_continue": False}
        assert s.answer == "It is noon."


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    prose=st.lists(_PROSE_PIECES, max_size=12).map("".join),
    fenced=st.booleans(),
    size=st.integers(min_value=1, max_value=12),
)
def test_an_observe_block_after_any_prose_ends_the_run_and_its_answer_follows(prose, fenced, size):
    """The same for Observe's block that ends the run: the text after it is the answer."""
    assume(prose.count("{") <= 4)
    block = f"\n```json\n{_ENDING}\n```" if fenced else f"\n{_ENDING}"
    reply = f"{prose}{block}\nIt is noon."
    s = observing()
    shown = [s.feed(reply[i : i + size]) for i in range(0, len(reply), size)]
    shown.append(s.finish())
    assert s.control == {"observation": "o", "should_continue": False}, reply
    assert s.answer == "It is noon.", reply
    assert '"observation"' not in "".join(shown), reply


def _read_with(keep: int, chunks: list[str], observe: bool) -> tuple[list[str], list[str], Any]:
    before, parsing._KEEP_DECIDED = parsing._KEEP_DECIDED, keep
    try:
        s = observing() if observe else ControlStream(REASON_KEYS)
        shown, answers = [], []
        for chunk in chunks:
            shown.append(s.feed(chunk))
            answers.append(s.take_answer())
        shown.append(s.finish())
        answers.append(s.take_answer())
        return shown, answers, (s.control, s.settled, s.content, s.answer)
    finally:
        parsing._KEEP_DECIDED = before


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    prose=st.lists(_PROSE_PIECES, max_size=12).map("".join),
    form=st.sampled_from([*_BLOCK_FORMS, "\n" + _ENDING, f"\n```json\n{_ENDING}\n```"]),
    after=st.lists(st.sampled_from([*_BLOCK_FORMS, "\n" + _ENDING, " more words"]), max_size=3),
    cuts=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40),
    observe=st.booleans(),
)
# a fence after spaces mid-line is no block: the cut keeps the character that says so
@example(
    prose="Look at this  ",
    form="```json\n" + _BLOCK + "\n```",
    after=[],
    cuts=[14, 60],
    observe=False,
)
def test_dropping_the_decided_text_changes_nothing_a_caller_sees(prose, form, after, cuts, observe):
    """A long reply's decided text is dropped as it streams (else every chunk copies it all):
    whatever the reply and its chunking, what is shown, the answer and the block are the
    ones read with all of the text kept."""
    reply = prose + form + "".join(after)
    chunks = _cut(reply, cuts)
    assert _read_with(1, chunks, observe) == _read_with(10**9, chunks, observe), reply
