"""`python -m server` is `agent-server serve …`."""

import sys

from server.cli import main

raise SystemExit(main(["serve", *sys.argv[1:]] if sys.argv[1:2] != ["chat"] else sys.argv[1:]))
