"""PromptProvider over a folder of Markdown templates (`$name` placeholders)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template

__all__ = ["FilePromptProvider", "default_prompt_dir"]


def default_prompt_dir() -> Path:
    """The shipped `prompts/` folder, wherever the package is installed."""
    return Path(str(resources.files("prompts")))


class FilePromptProvider:
    """Read every `*.md` template once, at construction, so rendering never touches disk."""

    def __init__(self, directory: Path | None = None) -> None:
        folder = directory or default_prompt_dir()
        self._templates = {
            path.stem: Template(path.read_text(encoding="utf-8"))
            for path in sorted(folder.glob("*.md"))
        }
        if not self._templates:
            raise FileNotFoundError(f"no prompt templates (*.md) in {folder}")

    def render(self, name: str, **values: object) -> str:
        """`$writing` in any template is the shared `writing.md` (how to write for the
        person): the phases whose text the person reads carry it in their own message."""
        try:
            template = self._templates[name]
        except KeyError:
            raise KeyError(f"prompt template {name!r} not found") from None
        shared = {"writing": self._writing()}
        return template.safe_substitute(shared | {k: str(v) for k, v in values.items()}).strip()

    def _writing(self) -> str:
        writing = self._templates.get("writing")
        return writing.template.strip() if writing is not None else ""
