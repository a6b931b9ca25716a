"""Versions of a turn in the terminal (docs/wire-protocol.md, "Versions of a turn").

`/versions` lists the shown conversation's turns, each with its versions; `/show 2.1` shows
version 1 of turn 2; `/edit 2 text` and `/regen 2` make a new version of turn 2. The turns
are read from the session's stored events (`GET /api/sessions/{id}/events`): every
`agent_user_message` says its run's parent, and the shown path follows them and the
`active_path` events, in order, as every client follows them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

__all__ = [
    "Command",
    "Turn",
    "fetch_events",
    "parse_command",
    "run_command",
    "turns_of",
    "versions_lines",
]

Frame = dict[str, Any]
COMMANDS = ("/versions", "/show", "/edit", "/regen")
USAGE = "/versions · /show TURN.VERSION · /edit TURN new text · /regen TURN"
_PREVIEW = 60  # characters of a message in a list


@dataclass(frozen=True)
class Command:
    name: str  # versions | show | edit | regen
    turn: int = 0
    version: int = 0
    text: str = ""


@dataclass
class Turn:
    """A turn of the shown conversation: its versions' runs and messages, and which is shown."""

    versions: list[tuple[str, str]] = field(default_factory=list)  # (run_id, message)
    shown: int = 0  # index in `versions`
    modes: dict[str, bool] = field(default_factory=dict)  # agent_mode of each run

    def again(self, content: str | None = None) -> Frame:
        """The `chat` that makes a new version of this turn: its message again, or `content`,
        in the mode the shown version ran in."""
        frame: Frame = {"type": "chat", "content": content or self.message}
        frame["replaces"] = self.run_id
        if self.run_id in self.modes:
            frame["agent_mode"] = self.modes[self.run_id]
        return frame

    @property
    def run_id(self) -> str:
        return self.versions[self.shown][0]

    @property
    def message(self) -> str:
        return self.versions[self.shown][1]


def parse_command(line: str) -> Command | str | None:
    """A version command of `line`; a string saying how to write it when it is one written
    wrong; None for anything else (a message to send)."""
    name, _, rest = line.strip().partition(" ")
    if name not in COMMANDS:
        return None
    rest = rest.strip()
    try:
        if name == "/versions" and not rest:
            return Command("versions")
        if name == "/show":
            turn, _, version = rest.partition(".")
            return Command("show", int(turn), int(version))
        if name == "/regen":
            return Command("regen", int(rest))
        if name == "/edit":
            turn, _, text = rest.partition(" ")
            if text.strip():
                return Command("edit", int(turn), text=text.strip())
    except ValueError:
        pass
    return f"usage: {USAGE}"


def turns_of(events: list[Frame]) -> list[Turn]:
    """The shown conversation's turns, from a session's events in order. Runs stored before
    versions existed are turns of one version; a continuation belongs to the turn it
    continues."""
    parents: dict[str, str | None] = {}
    messages: dict[str, str] = {}
    modes: dict[str, bool] = {}
    continued: set[str] = set()
    older: list[str] = []
    path: list[str] = []
    for frame in events:
        if frame.get("type") == "active_path":
            path = [str(r) for r in frame.get("active_path") or ()]
            continue
        if frame.get("update_type") != "agent_user_message":
            continue
        run_id = str(frame["run_id"])
        messages[run_id] = str(frame.get("content", ""))
        if isinstance(frame.get("agent_mode"), bool):
            modes[run_id] = frame["agent_mode"]
        if frame.get("origin") == "continue":
            continued.add(run_id)
        if "parent_run_id" not in frame:
            older.append(run_id)
            continue
        parent = frame["parent_run_id"]
        parents[run_id] = parent
        at = path.index(parent) if parent in path else -1
        path = [*path[: at + 1], run_id]
    turns: list[Turn] = []
    for run_id in [*older, *path]:
        if run_id in continued:
            continue
        parent = parents.get(run_id)
        siblings = [r for r, p in parents.items() if p == parent and r not in continued]
        ids = siblings if run_id in parents else [run_id]
        turns.append(Turn([(r, messages[r]) for r in ids], ids.index(run_id), modes))
    return turns


def versions_lines(turns: list[Turn]) -> list[str]:
    """`/versions` as lines: each turn's shown message, and every version of a turn that has
    several (the shown one marked)."""
    if not turns:
        return ["(no messages yet)"]
    lines = []
    for number, turn in enumerate(turns, 1):
        count = len(turn.versions)
        mark = f"  ‹{turn.shown + 1}/{count}›" if count > 1 else ""
        lines.append(f"{number}. {_short(turn.message)}{mark}")
        if count > 1:
            for index, (_, message) in enumerate(turn.versions, 1):
                shown = "  ← shown" if index == turn.shown + 1 else ""
                lines.append(f"     {number}.{index} {_short(message)}{shown}")
    return lines


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _PREVIEW else line[: _PREVIEW - 1] + "…"


async def fetch_events(ws_url: str, session_id: str, token: str | None) -> list[Frame]:
    """Every stored event of the session, over the HTTP API of the server at `ws_url`."""
    parts = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path.removesuffix("/ws") + f"/api/sessions/{quote(session_id)}/events"
    url = urlunsplit((scheme, parts.netloc, path, "", ""))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.get(url, headers=headers)
        reply.raise_for_status()
    events: list[Frame] = reply.json()["events"]
    return events


async def run_command(
    command: Command | str,
    *,
    events: Callable[[], Awaitable[list[Frame]]],
    say: Callable[[str], None],
    fail: Callable[[str], None],
    send: Callable[[Frame], Awaitable[bool]],
) -> bool:
    """Carry out `command` (or say how to write it) with the session's `events`; True when
    it started a run (`/edit`, `/regen`)."""
    if isinstance(command, str):
        say(command)
        return False
    try:
        turns = turns_of(await events())
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        fail(f"the versions could not be read: {exc}")
        return False
    if command.name == "versions":
        for line in versions_lines(turns):
            say(line)
        return False
    if not 1 <= command.turn <= len(turns):
        fail(f"there is no turn {command.turn} (/versions lists them)")
        return False
    turn = turns[command.turn - 1]
    if command.name == "show":
        if not 1 <= command.version <= len(turn.versions):
            fail(f"turn {command.turn} has {len(turn.versions)} version(s)")
        else:
            run_id = turn.versions[command.version - 1][0]
            await send({"type": "select_version", "run_id": run_id})
        return False
    return await send(turn.again(command.text if command.name == "edit" else None))
