"""RepeatWatch: a reply going round in circles is noticed; ordinary repetition is not."""

from __future__ import annotations

from agent.repetition import RepeatWatch


def _watch(text: str, size: int = 5) -> int | None:
    """The offset at which the watch fires, or None."""
    watch = RepeatWatch()
    for i in range(0, len(text), size):
        if watch.feed(text[i : i + size]):
            return i
    return None


def test_a_block_of_lines_written_a_third_time_is_a_loop():
    block = (
        "Use get_current_time to get the current time in Tokyo.\n"
        "Then tell the person what time it is there.\n"
        "Check the answer before giving it.\n"
    )
    fired = _watch("Plan:\n" + block * 10)
    assert fired is not None and fired < len(block) * 3 + 10


def test_a_long_line_without_breaks_repeating_itself_is_a_loop():
    fired = _watch("The time in Tokyo is what the tool says it is, no more. " * 200)
    assert fired is not None and fired < 1500


def test_code_with_a_repeated_line_is_not_a_loop():
    code = "".join(
        f"def test_{i}():\n    result = compute({i})\n    assert result == expected\n\n"
        for i in range(30)
    )
    assert _watch(code) is None


def test_a_table_and_ordinary_prose_are_not_loops():
    table = "| city | time |\n| --- | --- |\n" + "".join(
        f"| City number {i} | {i:02d}:00 |\n" for i in range(40)
    )
    prose = " ".join(f"Sentence {i} says something new about topic {i * 7}." for i in range(300))
    assert _watch(table) is None and _watch(prose) is None
