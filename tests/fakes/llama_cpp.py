"""The real model server of the end-to-end tests: the bundled local model (server/local_model.py).

`python -m tests.fakes.llama_cpp` prepares it ahead of the tests (scripts/test-deps.sh).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from server.local_model import LlamaServer, llama_server_binary, qwen_model, smollm2_model

__all__ = ["SHARED_ENV", "LlamaServer", "llama_server_binary", "qwen_model", "shared_server"]

SHARED_ENV = "AGENT_TEST_LLAMA"  # {"base_url", "log"} of the server the pytest controller runs


def shared_server() -> LlamaServer | None:
    """The server the pytest controller started for the session (tests/conftest.py), if any."""
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        return None
    found = json.loads(shared)
    server = LlamaServer.attach(found["base_url"], Path(found["log"]))
    server.wait_ready()
    return server


if __name__ == "__main__":
    print(f"llama-server: {llama_server_binary()}")
    print(f"model: {qwen_model()}")
    print(f"model: {smollm2_model()}")
