"""The agent core: the reason → act → observe loop and what it needs, with no transport.

The names below are imported on first use (agent/lazy.py), so a process that needs one
small module of the package does not load the whole loop."""

from typing import TYPE_CHECKING

from agent.lazy import lazy_exports

if TYPE_CHECKING:
    from agent.chat import run_chat
    from agent.control import RunControl
    from agent.loop import run_agent
    from agent.run import RunContext, RunLimits

__all__ = ["RunContext", "RunControl", "RunLimits", "run_agent", "run_chat"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "run_chat": "agent.chat",
        "RunControl": "agent.control",
        "run_agent": "agent.loop",
        "RunContext": "agent.run",
        "RunLimits": "agent.run",
    },
)
