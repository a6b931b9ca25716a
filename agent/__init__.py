"""The agent core: the reason → act → observe loop and what it needs, with no transport."""

from agent.chat import run_chat
from agent.control import RunControl
from agent.loop import run_agent
from agent.run import RunContext, RunLimits

__all__ = ["RunContext", "RunControl", "RunLimits", "run_agent", "run_chat"]
