"""The agent server with persistence off: `python -m server`, but over bench's NullStore.

    python -m bench.memory_server --config config.toml --port P

Same settings, same app (`create_app`), same uvicorn options (`uvicorn_config`), same
AgentServer; only the store is substituted, through create_app's own `store=` parameter.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bench.memstore import NullStore
from server.app import create_app
from server.cli import uvicorn_config
from server.runner import AgentServer
from server.settings import load_settings

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args()
    settings = load_settings(args.config, {"server": {"port": args.port}})
    logging.basicConfig(level=settings.server.log_level.upper())
    app = create_app(settings, store=NullStore())
    AgentServer(uvicorn_config(app, settings), owns_process=True).run()


if __name__ == "__main__":
    main()
