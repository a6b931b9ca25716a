"""A hand-written MCP stdio server (newline-delimited JSON-RPC) for what the reference
servers never do: a stray line that is not UTF-8 on stdout, tool names that collide once made
model-safe, a tool list that changes, answers the SDK cannot parse (a lone surrogate escape),
a method that never gets its answer, answers of many megabytes. Run as
`python -m tests.fakes.mcp_raw`; `mcp_raw_server()` is its config."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
_STRICT = {  # this server checks nothing itself: what reaches it runs
    "type": "object",
    "properties": {"mode": {"type": "string", "enum": ["fast", "slow"]}, "n": {"type": "integer"}},
    "required": ["mode"],
    "additionalProperties": False,
}
TOOLS = [
    {"name": "echo", "description": "Echo a text.", "inputSchema": _SCHEMA},
    {
        "name": "noisy",
        "description": "Log a Latin-1 line to stdout, then echo.",
        "inputSchema": _SCHEMA,
    },
    {"name": "a.b", "description": "Dotted.", "inputSchema": _SCHEMA},
    {"name": "a_b", "description": "Underscored.", "inputSchema": _SCHEMA},
    {"name": "grow", "description": "Add the tool `added`, and say so.", "inputSchema": _SCHEMA},
    {"name": "strict", "description": "Run in a mode.", "inputSchema": _STRICT},
    {
        "name": "surrogate",
        "description": "Echo the text with a lone surrogate escape (\\udcff) after it.",
        "inputSchema": _SCHEMA,
    },
    {
        "name": "misshapen",
        "description": "Answer with a result that is a number, not an object.",
        "inputSchema": _SCHEMA,
    },
    {
        "name": "huge",
        "description": "Answer with `text` megabytes of text (`tail` in the text: the id last).",
        "inputSchema": _SCHEMA,
    },
    {
        "name": "shapeless",
        "description": "Answer with a result that is a text with a lone surrogate, not an object.",
        "inputSchema": _SCHEMA,
    },
]
_ADDED = {"name": "added", "description": "Added by grow.", "inputSchema": _SCHEMA}
_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def mcp_raw_server(hang_on: str | None = None) -> dict[str, Any]:
    """`[tools.mcp.<name>]` for this server. With `hang_on` (a method), it blocks for a minute
    on that request, answering nothing and reading nothing: a closed stdin does not end it."""
    args = ["-m", "tests.fakes.mcp_raw", *(["--hang-on", hang_on] if hang_on else [])]
    return {"command": sys.executable, "args": args}


def _answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name, text = params["name"], params.get("arguments", {}).get("text", "")
        if name == "noisy":
            sys.stdout.buffer.write(b"caf\xe9: a log line that is not UTF-8\n")
        if name == "grow" and _ADDED not in TOOLS:
            TOOLS.append(_ADDED)
            _write(_CHANGED)
        if name == "surrogate":
            text += "\udcff"  # json.dumps writes it as the escape `\udcff`
        result = {"content": [{"type": "text", "text": f"{name}: {text}"}]}
        if name == "misshapen":
            return {"jsonrpc": "2.0", "id": request["id"], "result": 5}
        if name == "huge":
            size = int(float(text.split()[0]) * 1e6)
            result = {"content": [{"type": "text", "text": "x" * size}]}
            if "tail" in text:
                return {"jsonrpc": "2.0", "result": result, "id": request["id"]}
        if name == "shapeless":
            return {"jsonrpc": "2.0", "id": request["id"], "result": "\udcff"}
    elif method == "ping":
        result = {}
    else:  # a method of a newer revision (the SDK probes for one): not known here
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    hang_on = sys.argv[2] if sys.argv[1:2] == ["--hang-on"] else None
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("method") == hang_on:
            time.sleep(60)
        answer = _answer(request) if "id" in request else None
        if answer is not None:
            _write(answer)


def _write(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
