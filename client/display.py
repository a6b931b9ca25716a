"""What the terminal client shows beyond plain lines, only when its output is a terminal:
answers rendered as Markdown (headings, highlighted code, tables) with `rich`, and a live
status line (spinner, phase, elapsed time) while a phase works without printing anything.

Piped output gets neither: the raw Markdown and no control sequences, for files and scripts.
"""

from __future__ import annotations

import re
import shutil
import time

from rich.console import Console
from rich.markdown import Markdown

__all__ = ["ERASE", "SPINNER", "Activity", "render_markdown"]

# Braille frames: one cell wide everywhere, and never mistaken for text the model wrote.
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ERASE = "\r\x1b[K"  # back to the start of the line, and clear it
# rich pads every line to the console's width: trailing blanks (before a closing style)
# would make copied text ragged and wrap on a narrower window
_PADDING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def render_markdown(text: str, *, color: bool) -> str:
    """`text` (already cleaned of control characters) as terminal lines; ANSI styles only
    with `color` (NO_COLOR keeps the layout: tables, indented code, bullets)."""
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    console = Console(
        width=width,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
        markup=False,
    )
    with console.capture() as captured:
        console.print(Markdown(text, code_theme="ansi_dark", hyperlinks=False))
    return _PADDING.sub(r"\1", captured.get())


class Activity:
    """What the run is doing now, since when, and how much it streamed: the status line."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.since = 0.0
        self.tokens = 0
        self.frame = 0

    def set(self, label: str | None) -> None:
        """Enter phase `label` (None: nothing works, no status line); a new one restarts the
        timer and the count."""
        if label != self.label:
            self.label, self.since, self.tokens = label, time.monotonic(), 0

    def count(self) -> None:
        self.tokens += 1

    def line(self) -> str | None:
        """The status line to draw now (it turns the spinner), or None."""
        if self.label is None:
            return None
        self.frame = (self.frame + 1) % len(SPINNER)
        seconds = int(time.monotonic() - self.since)
        text = f"{SPINNER[self.frame]} {self.label} · {seconds} s"
        if self.tokens:
            text += f" · {self.tokens} token{'' if self.tokens == 1 else 's'}"
        return text
