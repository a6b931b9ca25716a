"""The terminal client's versions of a turn in-process (client/versions.py)."""

from __future__ import annotations

from typing import Any

from client.versions import parse_command, turns_of, versions_lines


def test_turns_follow_the_parents_and_every_switch_in_order() -> None:
    """client/versions.py reads the shown turns from events as every client does: older runs
    first, a continuation in the turn it continues, the last `active_path` then new runs."""

    def said(run: str, content: str, parent: Any = "-", origin: str = "chat") -> dict[str, Any]:
        frame = {"type": "agent_update", "update_type": "agent_user_message", "run_id": run}
        frame |= {"content": content, "origin": origin, "agent_mode": True}
        return frame if parent == "-" else {**frame, "parent_run_id": parent}

    events = [
        said("old", "before versions"),
        said("a", "one", None),
        said("b", "two", "a"),
        said("k", "Please continue", "b", "continue"),
        said("c", "two, edited", "a"),
        {"type": "active_path", "active_path": ["a", "b", "k"]},
    ]
    turns = turns_of(events)
    assert [t.message for t in turns] == ["before versions", "one", "two"]
    assert [len(t.versions) for t in turns] == [1, 1, 2] and turns[2].shown == 0
    assert turns[2].again("three") == {
        "type": "chat",
        "content": "three",
        "replaces": "b",
        "agent_mode": True,
    }
    assert versions_lines(turns)[2:] == [
        "3. two  ‹1/2›",
        "     3.1 two  ← shown",
        "     3.2 two, edited",
    ]
    assert turns_of(events[:-1])[2].message == "two, edited"  # the last run shown, no switch
    assert parse_command("/show 3.2").version == 2  # type: ignore[union-attr]
    assert isinstance(parse_command("/edit 3"), str)  # how to write it
    assert isinstance(parse_command("/regen x"), str)
    assert parse_command("/etc/hosts is a file") is None  # a message to send
