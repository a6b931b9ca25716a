"""Configuration: file, flags and environment in that order; clear errors; the CLI."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agent.budget import Budget, Price
from agent.context import ContextLimits
from agent.run import RunLimits
from server.settings import AgentSettings, ConfigError, load_settings

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_config_loads_and_points_at_the_openai_env(tmp_path):
    settings = load_settings(
        REPO / "config.toml",
        environ={"OPENAI_BASE_URL": "http://llm.local/v1", "OPENAI_API_KEY": "k"},
    )
    assert settings.server.port == 8765
    assert settings.llm.base_url == "http://llm.local/v1"
    assert settings.llm.api_key.get_secret_value() == "k"
    assert settings.storage.sqlite_path == REPO / "data" / "agent.db"


def test_the_environment_given_is_the_only_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """`environ=` was ignored by the variables' checks and by pydantic-settings, which read
    os.environ: a process's AGENT__ variables changed what a caller loaded with its own."""
    monkeypatch.setenv("AGENT__SERVER__PORT", "3000")  # the process's: not the caller's
    monkeypatch.setenv("AGENT__NOSUCH__KEY", "1")
    settings = load_settings(None, environ={"AGENT__LLM__MODEL": "given"})
    assert settings.server.port == 8765 and settings.llm.model == "given"
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ={"AGENT__SERVER__PORT": "abc"})
    assert str(refused.value).rstrip().endswith("(from AGENT__SERVER__PORT)")
    monkeypatch.delenv("AGENT__NOSUCH__KEY")
    assert load_settings(None).server.port == 3000  # none given: the process's own


def test_flags_override_the_file_and_env_overrides_both(tmp_path):
    config = tmp_path / "conf" / "c.toml"
    config.parent.mkdir()
    config.write_text(
        '[server]\nport = 1000\n[llm]\nmodel = "from-file"\n[storage]\nsqlite_path = "db/x.db"\n'
    )
    settings = load_settings(config, {"server": {"port": 2000}}, environ={})
    assert settings.server.port == 2000 and settings.llm.model == "from-file"
    assert settings.storage.sqlite_path == tmp_path / "conf" / "db" / "x.db"
    environ = {"AGENT__SERVER__PORT": "3000", "AGENT__LLM__MODEL": "from-env"}
    settings = load_settings(config, {"server": {"port": 2000}}, environ=environ)
    assert settings.server.port == 3000 and settings.llm.model == "from-env"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[server]\nport = 70000\n", "server.port"),
        ("[agent]\ndefault_max_steps = 60\n", "exceeds max_steps_limit"),
        ('[storage]\nbackend = "postgres"\n', "storage.backend"),
        ("[llm]\ntimeout_s = -1\n", "llm.timeout_s"),
        ("[server]\nprot = 1\n", "server.prot: unknown key"),
        ("[server\n", "not valid TOML"),
        ('[auth]\ntokens = { "short" = { tenant = "a", user = "b" } }\n', "16 characters"),
        # Sections defined by the agent's own dataclasses keep their checks and messages.
        ("[context]\nwindow_tokens = 1000\nreserve_tokens = 1000\n", "reserve_tokens must be"),
        ("[context]\nkeep_recent_steps = 0\n", "context.keep_recent_steps"),
        ("[context]\nwindow = 1\n", "context.window: unknown key"),
        (
            '[llm.prices."m"]\nprompt_per_million = -1\ncompletion_per_million = 1\n',
            "llm.prices.m.prompt_per_million",
        ),
        ('[llm.prices."m"]\nprompt_per_million = 1\n', "completion_per_million: Field required"),
        ('[agent]\nstyle = "loud"\n', "agent.style"),
    ],
)
def test_wrong_values_are_named(tmp_path, toml, message):
    config = tmp_path / "c.toml"
    config.write_text(toml)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_settings(config, environ={})


def test_the_agent_receives_its_settings_as_they_were_parsed(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(
        '[context]\nwindow_tokens = 9000\n[llm]\nmodel = "m"\n'
        '[llm.prices."m"]\nprompt_per_million = 1.5\ncompletion_per_million = 6\n'
    )
    settings = load_settings(config, environ={})
    assert settings.context == ContextLimits(window_tokens=9000)
    assert settings.llm.prices["m"] == Price(1.5, 6.0)


# RunLimits fields without an `[agent]` key of the same name, and where each comes from.
_LIMITS_FROM_ELSEWHERE = {
    "max_steps": "the chat's agent_max_steps, else agent.default_max_steps",
    "budget": "agent.max_run_tokens and agent.max_run_cost, priced by llm.prices",
    "approval_timeout_s": "tools.approval_timeout_s",
}


def test_every_run_limit_is_a_setting_or_says_where_it_comes_from():
    keys = AgentSettings.model_fields
    for field in dataclasses.fields(RunLimits):
        assert field.name in keys or field.name in _LIMITS_FROM_ELSEWHERE, field.name
        if field.name in keys:  # a run built without settings behaves as the shipped default
            assert keys[field.name].default == getattr(RunLimits(), field.name), field.name
    assert not set(_LIMITS_FROM_ELSEWHERE) & set(keys)


def test_each_run_gets_the_agent_settings_and_its_request(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(
        "[agent]\ncontrol_retries = 0\nmax_verifications = 5\nplan_every = 3\n"
        'tool_timeout_s = 7\nstyle = "direct"\ndefault_max_steps = 4\n'
    )
    agent = load_settings(config, environ={}).agent
    budget = Budget(max_tokens=100)
    limits = agent.limits(budget=budget, approval_timeout_s=9.0)
    assert (limits.control_retries, limits.max_verifications, limits.plan_every) == (0, 5, 3)
    assert (limits.tool_timeout_s, limits.style, limits.max_steps) == (7.0, "direct", 4)
    assert (limits.budget, limits.approval_timeout_s) == (budget, 9.0)
    asked = agent.limits(budget=budget, approval_timeout_s=9.0, max_steps=2, style="tool_first")
    assert (asked.max_steps, asked.style) == (2, "tool_first")


def test_the_readme_documents_every_agent_key():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`agent\.(\w+)`", readme))
    assert set(AgentSettings.model_fields) - documented == set()


def test_a_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", environ={})


def test_serve_reports_bad_config_and_exits_2(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[agent]\nmax_steps_limit = 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "server", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "agent.max_steps_limit" in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_unknown_tools(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[tools]\nenabled = ["get_current_time", "teleport"]\n')
    done = subprocess.run(  # `python -m server serve …` is the same as without `serve`
        [sys.executable, "-m", "server", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "teleport" in done.stderr


async def test_serve_runs_from_any_directory_and_stops_on_sigterm(tmp_path):
    import asyncio
    import signal

    import httpx

    from tests.fakes.processes import free_port, start_server_process

    port = free_port()
    env = {"AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "a.db")}
    proc = await start_server_process(tmp_path, port, env, capture=True)
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/healthz")
        assert response.json() == {"status": "ok"}
        proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.stdout.read(), 20)).decode()  # type: ignore[union-attr]
        # uvicorn re-raises the signal after a clean shutdown, as a process should
        assert await asyncio.wait_for(proc.wait(), 20) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in output
        # what it runs with, in one line: the file, the model and its server, the store
        assert f"INFO server.cli: config {REPO / 'config.toml'}; model " in output
        assert f"; storage sqlite {tmp_path / 'a.db'}\n" in output
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert (tmp_path / "a.db").exists()


async def test_a_worker_that_dies_stops_the_others_and_the_server_exits_with_an_error(tmp_path):
    """`serve --workers 2`: a crashed worker is not silently missing from then on; the whole
    server exits non-zero, for its supervisor (systemd, Kubernetes) to restart."""
    import asyncio
    import os
    import signal

    from tests.fakes.processes import free_port, start_server_process

    env = {"AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "a.db")}
    port = free_port()
    proc = await start_server_process(tmp_path, port, env, capture=True, extra=["--workers", "2"])
    children = await asyncio.to_thread(_children, proc.pid)
    try:
        assert len(children) == 2
        os.kill(int(children[0]), signal.SIGKILL)
        output = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()  # type: ignore[union-attr]
        assert await asyncio.wait_for(proc.wait(), 30) != 0
        assert "a worker exited on its own" in output
        # uvicorn says nowhere where workers listen: the supervisor does
        assert f"INFO server.cli: 2 workers (pids {', '.join(children)}) " in output
        assert f"serving on http://127.0.0.1:{port}\n" in output
        assert not await asyncio.to_thread(_alive, children[1])  # the other one was stopped
    finally:
        for child in children:  # without the fix they outlive the test and hold its pipe
            if await asyncio.to_thread(_alive, child):
                os.kill(int(child), signal.SIGKILL)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_workers_end_when_their_supervisor_is_killed(tmp_path):
    """A `kill -9` of the supervisor left its workers serving as orphans, holding the port
    and the store; each is now told to stop as its supervisor dies."""
    import asyncio
    import os
    import signal

    from tests.fakes.processes import free_port, start_server_process

    env = {"AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "a.db")}
    proc = await start_server_process(tmp_path, free_port(), env, extra=["--workers", "2"])
    children = await asyncio.to_thread(_children, proc.pid)
    try:
        assert len(children) == 2
        proc.kill()
        await asyncio.wait_for(proc.wait(), 10)
        async with asyncio.timeout(30):
            await asyncio.gather(*(_ended(int(c)) for c in children))
    finally:
        for child in children:
            if await asyncio.to_thread(_alive, child):
                os.kill(int(child), signal.SIGKILL)


async def _ended(pid: int) -> None:
    """Wait until process `pid` (not a child of ours) has exited: its pidfd turns readable."""
    import asyncio
    import os

    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(fd, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _alive(pid: str) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_the_default_origins_follow_the_port(monkeypatch: pytest.MonkeyPatch) -> None:
    # Serving on another port refused the bundled page's own WebSocket (403) until the
    # origins were listed by hand.
    monkeypatch.delenv("AGENT__SERVER__PORT", raising=False)
    moved = load_settings(None, {"server": {"port": 9100}})
    assert moved.server.allowed_origins == ("http://127.0.0.1:9100", "http://localhost:9100")
    chosen = load_settings(
        None, {"server": {"port": 9100, "allowed_origins": ["https://a.example"]}}
    )
    assert chosen.server.allowed_origins == ("https://a.example",)
    assert load_settings(None, {}).server.allowed_origins == (
        "http://127.0.0.1:8765",
        "http://localhost:8765",
    )


def test_origins_set_by_hand_are_kept_as_written_on_any_port(tmp_path: Path) -> None:
    # A list equal to the defaults was replaced when the port changed: the shipped config's
    # http://127.0.0.1:8765 was refused when serving with --port 19240.
    config = tmp_path / "config.toml"
    config.write_text('[server]\nallowed_origins = ["http://127.0.0.1:8765"]\n')
    kept = load_settings(config, {"server": {"port": 19240}}, environ={})
    assert kept.server.allowed_origins == ("http://127.0.0.1:8765",)
    environ = {"AGENT__SERVER__ALLOWED_ORIGINS": '["http://127.0.0.1:8765"]'}
    from_env = load_settings(None, {"server": {"port": 19240}}, environ=environ)
    assert from_env.server.allowed_origins == ("http://127.0.0.1:8765",)
    # The shipped config leaves them unset, so that they follow --port.
    assert "allowed_origins" not in tomllib.loads((REPO / "config.toml").read_text())["server"]
    shipped = load_settings(REPO / "config.toml", {"server": {"port": 19240}}, environ={})
    assert shipped.server.allowed_origins == (
        "http://127.0.0.1:19240",
        "http://localhost:19240",
    )


def test_a_wrong_value_from_the_environment_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The message pointed at the config file, which holds no such value.
    config = tmp_path / "config.toml"
    config.write_text("[server]\nhost = '127.0.0.1'\n")
    monkeypatch.setenv("AGENT__SERVER__PORT", "abc")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, {})
    assert "server.port: " in str(refused.value)
    assert str(refused.value).rstrip().endswith("(from AGENT__SERVER__PORT)")


def test_a_key_written_in_the_config_is_refused_without_being_echoed() -> None:
    # It was silently replaced by the environment's (empty) key; the refusal must not print it.
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"llm": {"api_key": "sk-secret-value"}})
    assert "environment only" in str(refused.value) and "OPENAI_API_KEY" in str(refused.value)
    assert "sk-secret-value" not in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # the search provider's key likewise
        load_settings(None, {"tools": {"web_search": {"api_key": "brave-secret-value"}}})
    said = str(refused.value)
    assert said.startswith("tools.web_search.api_key: keys are read from the environment only")
    assert "BRAVE_SEARCH_API_KEY" in said and "brave-secret-value" not in said


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_serve_refuses_fewer_than_one_worker(tmp_path: Path, workers: str) -> None:
    # They ran one process, as if --workers had not been given.
    done = subprocess.run(
        [sys.executable, "-m", "server", "--port", "1", "--workers", workers],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert f"argument --workers: must be at least 1 (got {workers})" in done.stderr


def test_workers_need_a_fixed_port_from_the_file_too(tmp_path: Path) -> None:
    # Only --port 0 was refused; port = 0 in the file started workers on a port each.
    config = tmp_path / "config.toml"
    config.write_text("[server]\nport = 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "server", "--config", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "agent-server: --workers needs a fixed port: server.port is 0" in done.stderr


def test_the_startup_line_names_what_the_server_runs_with_and_no_secret(tmp_path: Path) -> None:
    from server.cli import startup_summary

    config = tmp_path / "config.toml"
    config.write_text(
        '[llm]\nmodel = "m1"\nbase_url = "https://me:hunter2@llm.example/v1?key=k2"\n'
        '[storage]\nsqlite_path = "x.db"\n'
    )
    line = startup_summary(load_settings(config, environ={}), config)
    assert line == (
        f"config {config}; model m1 at https://llm.example/v1; storage sqlite {tmp_path / 'x.db'}"
    )
    config.write_text(
        '[storage]\nbackend = "mongodb"\nmongodb_uri = "mongodb://u:hunter2@db:27017/?tls=true"\n'
    )
    line = startup_summary(load_settings(config, environ={}), config)
    assert "storage mongodb mongodb://db:27017/ database agent_server" in line
    assert "hunter2" not in line
    line = startup_summary(load_settings(None, environ={}), None)
    assert line.startswith("no config file: defaults; model gpt-4o-mini at https://api.openai.com")
    assert line.endswith(f"storage sqlite {Path.cwd() / 'data' / 'agent.db'}")


def test_the_readme_says_where_relative_mcp_commands_are_found() -> None:
    # It said every relative path resolves against the config file's folder; an MCP server's
    # command is run from the working directory (docs/tools.md says so too).
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    paragraph = " ".join(readme[readme.index("## Configuration") :].split("\n\n")[1].split())
    assert "MCP server's `command`" in paragraph and "working directory" in paragraph
    tools = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    assert "relative to the server's working directory" in tools


def test_a_run_under_the_default_settings_has_the_runs_own_defaults():
    """`[agent]` starts from RunLimits' defaults (each written once, in agent/run.py); the
    limits that come from elsewhere (steps, budget, approval timeout) default the same."""
    settings = load_settings(None, environ={})
    limits = settings.agent.limits(
        budget=Budget(), approval_timeout_s=settings.tools.approval_timeout_s
    )
    assert limits == RunLimits()
