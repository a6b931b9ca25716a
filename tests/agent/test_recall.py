"""Stored results as text, read back in bounded pieces that together hold every character."""

from __future__ import annotations

import json
import re

import pytest

from agent.context import ContextLimits, ContextWindow
from agent.messages import Message
from agent.recall import recall, result_text
from agent.tokens import EstimatedCounter

COUNTER = EstimatedCounter()
WINDOW = ContextWindow(COUNTER, ContextLimits(window_tokens=8_000, reserve_tokens=1_000))
_HEADER = re.compile(r"\[Characters (\d+)-(\d+) of (\d+)\.\]\n")


def _stored(content: str) -> list[Message]:
    return [Message("tool", content, tool_call_id="r1", tool_name="t", status="ok")]


def test_long_strings_follow_a_short_envelope_as_text():
    text = result_text({"results": [{"url": "u", "text": "a\nb", "n": 3}], "ok": True})
    envelope, rest = text.split("\n\n", 1)
    assert json.loads(envelope) == {
        "results": [{"url": "u", "text": "(text 1, below)", "n": 3}],
        "ok": True,
    }
    assert rest == "[text 1: results[0].text]\na\nb"
    assert result_text({"echo": "short"}) == '{"echo":"short"}'
    assert result_text("plain") == "plain"


@pytest.mark.parametrize(
    "content",
    [
        "".join(f"word{i} " for i in range(40_000)),  # 200 KB on one line
        "\n".join(f"line {i}: 東京 данные" for i in range(8_000)),
    ],
    ids=["one-line", "lines"],
)
def test_every_character_is_reachable_in_pieces_that_fit(content: str):
    conversation = _stored(content)
    offset, pieces = 0, []
    while True:
        piece = recall(conversation, "r1", WINDOW.piece, offset=offset)
        header = _HEADER.match(piece)
        assert header is not None and int(header.group(1)) == offset
        assert int(header.group(3)) == len(content)
        assert COUNTER.count(piece) <= WINDOW.result_tokens()  # never cut again
        end = int(header.group(2))
        body = piece[header.end() :]
        if end == len(content):
            assert body.endswith("\n[End of the result.]")
            pieces.append(body.removesuffix("\n[End of the result.]"))
            break
        assert body.endswith(f"\n[More: call recall_details with offset {end} to read on.]")
        pieces.append(body.rsplit("\n", 1)[0])
        offset = end
    assert "".join(pieces) == content and len(pieces) > 10


def test_a_focus_finds_passages_anywhere_even_inside_one_long_line():
    content = "filler " * 30_000 + "the secret is 42 " + "filler " * 10
    found = recall(_stored(content), "r1", WINDOW.piece, focus="secret")
    assert "the secret is 42" in found and len(found) < 1_500
    assert found.startswith("[at character ")
    assert "mentions 'nope'" in recall(_stored(content), "r1", WINDOW.piece, focus="nope")


def test_many_matches_are_paged_by_offset():
    content = "\n".join(f"match number {i} " + "x" * 300 for i in range(200))
    first = recall(_stored(content), "r1", WINDOW.piece, focus="match")
    more = re.search(r"with this focus and offset (\d+)\.\]$", first)
    assert more is not None and "match number 0 " in first
    second = recall(_stored(content), "r1", WINDOW.piece, focus="match", offset=int(more[1]))
    assert "match number 0 " not in second
    last_first = re.findall(r"match number (\d+) ", first)[-1]
    assert f"match number {int(last_first) + 1} " in second.split("\n", 1)[0]


def test_a_result_stored_as_one_json_line_is_searched_in_parts():
    text = "filler " * 20_000 + "needle here " + "filler " * 100
    old = json.dumps({"results": [{"text": text}]})  # as older versions stored it
    found = recall(_stored(old), "r1", WINDOW.piece, focus="needle")
    assert "needle here" in found and len(found) < 1_500
    with pytest.raises(LookupError):
        recall(_stored(old), "other", WINDOW.piece)
