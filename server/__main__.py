"""`python -m server` is `agent-server`: `serve` when no command is named."""

import sys

from server.cli import main

_args = sys.argv[1:]
raise SystemExit(main(_args if _args[:1] in (["serve"], ["chat"]) else ["serve", *_args]))
