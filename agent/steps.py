"""StepGroups: the steps of the current run as one call shows them, and how they give way.

A run's conversation is grouped as [the task and its notes], then one group per step (a step
starts with its reasoning, and its tool calls and their results stay together). To fit a
call's budget a step collapses into a one-line summary, and a summary can be left out, with
one line that counts the steps left out. agent/context.py decides which, and when.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.messages import Message

__all__ = ["Count", "StepGroups", "left_out_note", "split_steps"]

Count = Callable[[Sequence[Message]], int]  # the tokens of some messages


class StepGroups:
    """The run's steps as one call shows them (whole, summarized or left out), with their
    tokens: [task and notes], then one group per step."""

    def __init__(self, count: Count, steps: list[list[Message]]) -> None:
        self._count = count
        self.steps = steps
        self._sizes = [count(step) for step in steps]
        self._dropped = 0
        self._note: Message | None = None  # says how many steps were left out
        self.total = sum(self._sizes)

    def replace(self, index: int, messages: list[Message]) -> None:
        """Show `messages` for step `index` instead, and count them."""
        size = self._count(messages)
        self.total += size - self._sizes[index]
        self.steps[index], self._sizes[index] = messages, size

    def collapse(self, index: int) -> bool:
        """Show step `index` as a one-line summary; False when it is one already."""
        step = self.steps[index]
        if not step or _is_summary(step):
            return False
        self.replace(index, [_summarize_step(step)])
        return True

    def drop(self, index: int) -> bool:
        """Leave out step `index`, summarized first (the note counts it); False otherwise."""
        step = self.steps[index]
        if not _is_summary(step):
            return False
        self.replace(index, [])
        self._dropped += 1
        before = self._count([self._note]) if self._note else 0
        self._note = left_out_note(self._dropped, step[0].run_id)
        self.total += self._count([self._note]) - before
        return True

    def messages(self) -> list[Message]:
        """The steps in order, the note on those left out where the first of them was."""
        out: list[Message] = []
        note = self._note
        for index, step in enumerate(self.steps):
            if note is not None and index > 0 and not step:
                out.append(note)
                note = None
            out.extend(step)
        return out


def left_out_note(steps: int, run_id: str | None) -> Message:
    """The line that stands for the `steps` steps left out."""
    text = (
        f"[{steps} earlier step{'s' if steps > 1 else ''} of this task left out to fit the "
        "context window.]"
    )
    return Message("user", text, phase="summary", run_id=run_id)


def split_steps(current: list[Message]) -> list[list[Message]]:
    """[task and notes], then one group per step: a step starts with its reasoning, or with
    its act where the reasoning is left out (Act's and Observe's plain view, agent/history.py)."""
    groups: list[list[Message]] = [[]]
    for message in current:
        starts = message.phase == "reason" or (
            message.phase == "act" and not (groups[-1] and groups[-1][-1].phase == "reason")
        )
        if starts and groups[-1]:
            groups.append([])
        groups[-1].append(message)
    return groups


def _is_summary(group: list[Message]) -> bool:
    return len(group) == 1 and group[0].phase == "summary"


def _summarize_step(group: list[Message]) -> Message:
    thought = next((_first_sentence(m.content) for m in group if m.phase == "reason"), "")
    observed = next((_first_sentence(m.content) for m in group if m.phase == "observe"), "")
    calls = []
    results = {m.tool_call_id: m for m in group if m.role == "tool"}
    for message in group:
        for call in message.tool_calls:
            result = results.get(call.id)
            outcome = "ok" if result is not None and result.status == "ok" else "failed"
            calls.append(f"{call.name}({call.arguments[:80]}) → {outcome}")
    text = "[Earlier step, summarized] "
    text += f"Thought: {thought} " if thought else ""
    text += f"Calls: {'; '.join(calls)}. " if calls else ""
    text += f"Observed: {observed}" if observed else ""
    return Message("user", text.strip(), phase="summary", run_id=group[0].run_id)


def _first_sentence(text: str) -> str:
    sentence = text.strip().split("\n", 1)[0]
    for end in (". ", "! ", "? "):
        if end in sentence:
            sentence = sentence.split(end, 1)[0] + end.strip()
            break
    return sentence[:200]
