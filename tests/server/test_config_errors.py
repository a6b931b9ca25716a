"""Wrong configuration is refused at startup with a message an operator can act on: where
the value is, what was expected, what was given (never a secret), and which variable or flag
gave it."""

from __future__ import annotations

import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from server.settings import ConfigError, Settings, load_settings

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-SECRET-0123456789abcdef"
OTHER = "tok-OTHER-SECRET-0123456789"


@pytest.fixture(autouse=True)
def _no_agent_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's AGENT__ variables would change what these tests load."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("AGENT__"):
            monkeypatch.delenv(name)


def _refusal(tmp_path: Path, toml: str, overrides: Any = None) -> str:
    config = tmp_path / "config.toml"
    config.write_text(toml)
    with pytest.raises(ConfigError) as refused:
        load_settings(config, overrides, environ={})
    return str(refused.value)


# -- secrets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        (
            f'[auth]\ntokens = {{ "{OTHER}" = {{ tenant = "a", user = "b" }}, '
            f'"{TOKEN}" = {{ tenant = "", user = "b" }} }}\n',
            "auth.tokens.<token 2>.tenant: String should have at least 1 character",
        ),
        (
            f'[auth]\ntokens = {{ "{TOKEN}" = {{ tenant = "a" }} }}\n',
            "auth.tokens.<token 1>.user: Field required",
        ),
        (
            f'[auth]\ntokens = {{ "{TOKEN}" = {{ tenant = "a", user = "b", admin = true }} }}\n',
            "auth.tokens.<token 1>.admin: unknown key",
        ),
        (f'[auth]\ntokens = ["{TOKEN}"]\n', "auth.tokens: Input should be a valid dictionary"),
        (f'[auth]\ntokens = {{ "{TOKEN}" = "alice" }}\n', "auth.tokens.<token 1>: Input should"),
        (
            '[auth]\ntokens = { "tok-SECRET" = { tenant = "a", user = "b" } }\n',
            "at least 16 characters long (<token 1> is not)",
        ),
        (f'[llm]\napi_key = ["{TOKEN}"]\n', "llm.api_key: Input should be a valid string"),
        (
            f'[tools.web_search]\napi_key = ["{TOKEN}"]\n',
            "tools.web_search.api_key: Input should be a valid string",
        ),
        (f'[llm]\napi_keys = "{TOKEN}"\n', "llm.api_keys: unknown key"),  # a misspelled key
        (  # a token one level too high: the key itself is the secret
            f'[auth]\n"{TOKEN}" = {{ tenant = "a", user = "b" }}\n',
            "auth.<a key that is no setting: tokens go in auth.tokens>: unknown key",
        ),
        (  # a URI holds its password
            '[storage]\nmongodb_uri = ["mongodb://agent:SECRET@db.example/"]\n',
            "storage.mongodb_uri: Input should be a valid string",
        ),
    ],
)
def test_a_wrong_token_or_key_is_named_by_its_place_never_shown(
    tmp_path: Path, toml: str, where: str
) -> None:
    # The token was the key path (auth.tokens.tok-SECRET-….tenant) or the "(got …)" part.
    message = _refusal(tmp_path, toml)
    assert where in message
    assert "SECRET" not in message


def test_tokens_from_the_environment_are_not_shown_either() -> None:
    environ = {"AGENT__AUTH__TOKENS": f'{{"{TOKEN}": {{"tenant": ""}}}}'}
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ=environ)
    message = str(refused.value)
    assert "auth.tokens.<token 1>.tenant" in message and "(from AGENT__AUTH__TOKENS)" in message
    assert "SECRET" not in message


# -- numbers ------------------------------------------------------------------------------------


def _number_keys(model: type[BaseModel], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], type]:
    """Every int or float key of the settings, in sections and sub-tables (not in tables of
    names, such as llm.prices and tools.mcp, which the tests below give one entry each)."""
    keys: dict[tuple[str, ...], type] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
            annotation = args[0]
        fields = getattr(annotation, "__pydantic_fields__", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _number_keys(annotation, (*path, name))
        elif isinstance(fields, dict):  # a pydantic dataclass: [context]
            for key, info in fields.items():
                if info.annotation in (int, float):
                    keys[(*path, name, key)] = info.annotation
        elif annotation in (int, float):
            keys[(*path, name)] = annotation
    return keys


def _toml(values: dict[tuple[str, ...], str]) -> str:
    tables: dict[tuple[str, ...], list[str]] = {}
    for key, value in values.items():
        tables.setdefault(key[:-1], []).append(f"{key[-1]} = {value}")
    return "".join(
        f"[{'.'.join(table)}]\n" + "\n".join(lines) + "\n" for table, lines in tables.items()
    )


NUMBERS = _number_keys(Settings)
FLOATS = [k for k, kind in NUMBERS.items() if kind is float]


def _by_ten(keys: list[tuple[str, ...]]) -> list[list[tuple[str, ...]]]:
    """Ten keys at a time: a message lists ten problems, then counts the others."""
    return [keys[start : start + 10] for start in range(0, len(keys), 10)]


def test_the_checked_keys_include_those_that_crashed() -> None:
    crashed = [
        ("server", "shutdown_timeout_s"),
        ("server", "keep_alive_timeout_s"),
        ("storage", "run_lease_s"),
        ("llm", "timeout_s"),
        ("agent", "request_input_timeout_s"),
    ]
    assert set(crashed) <= set(FLOATS) and ("tools", "web_fetch", "timeout_s") in FLOATS
    assert NUMBERS[("server", "port")] is int and NUMBERS[("context", "window_tokens")] is int


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_no_number_may_be_infinite(tmp_path: Path, value: str) -> None:
    # inf passed every "> 0": shutdown_timeout_s, keep_alive_timeout_s and run_lease_s then
    # crashed the start with OverflowError, llm.timeout_s and request_input_timeout_s every run.
    for keys in _by_ten(FLOATS):
        message = _refusal(tmp_path, _toml(dict.fromkeys(keys, value)))
        for key in keys:  # "(got inf)", not "null" as JSON would write it
            assert f"{'.'.join(key)}: Input should be a finite number (got {value})" in message
    message = _refusal(
        tmp_path,
        f"[llm.prices.m]\nprompt_per_million = {value}\ncompletion_per_million = 1\n"
        f'[tools.mcp.x]\ncommand = "x"\nstart_timeout_s = {value}\n',
    )
    assert "llm.prices.m.prompt_per_million: Input should be a finite number" in message
    assert "tools.mcp.x.start_timeout_s: Input should be a finite number" in message


def test_an_infinite_number_from_the_environment_is_refused() -> None:
    environ = {
        "AGENT__SERVER__SHUTDOWN_TIMEOUT_S": "inf",
        "AGENT__TOOLS__WEB_FETCH__TIMEOUT_S": "1e999",
    }
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ=environ)
    lines = str(refused.value).splitlines()
    assert any(
        "server.shutdown_timeout_s: Input should be a finite number" in line
        and line.endswith("(from AGENT__SERVER__SHUTDOWN_TIMEOUT_S)")
        for line in lines
    )
    assert any("tools.web_fetch.timeout_s: Input should be a finite number" in x for x in lines)


def test_true_and_false_are_not_numbers(tmp_path: Path) -> None:
    # `port = true` bound port 1; `window_tokens = false` would disable the context budget.
    for keys in _by_ten(list(NUMBERS)):
        message = _refusal(tmp_path, _toml(dict.fromkeys(keys, "true")))
        for key in keys:
            assert f"{'.'.join(key)}: Input should be a number, not true or false" in message


def test_numbers_from_the_environment_still_read_as_numbers() -> None:
    environ = {
        "AGENT__SERVER__PORT": "8080",
        "AGENT__LLM__TIMEOUT_S": "12.5",
        "AGENT__CONTEXT__WINDOW_TOKENS": "8192",
    }
    settings = load_settings(None, environ=environ)
    assert settings.server.port == 8080 and settings.llm.timeout_s == 12.5
    assert settings.context.window_tokens == 8192


# -- files that cannot be read ------------------------------------------------------------------


def test_a_directory_or_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .* is a directory"):
        load_settings(tmp_path, environ={})
    config = tmp_path / "config.toml"
    config.write_bytes(b'[llm]\nmodel = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 0xe9 on line 2\)"):
        load_settings(config, environ={})


def test_a_file_that_may_not_be_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(ConfigError, match=f"cannot read config file {config}: Permission denied"):
        load_settings(config, environ={})


def test_serve_answers_an_unreadable_config_with_exit_2_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server", "--config", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"agent-server: config file {tmp_path} is a directory, not a file"


# -- environment variables ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("AGENT__SERVER__ALLOWED_ORIGINS", "http://x", 'must be a JSON list, e.g. ["a", "b"]'),
        ("AGENT__AUTH__TOKENS", TOKEN, 'must be a JSON object, e.g. {"<token>": {"tenant"'),
        ("agent__server__allowed_origins", "http://x", "must be a JSON list"),
        ("AGENT__SERVER", "port", "must be a JSON object"),
    ],
)
def test_a_list_or_table_variable_that_is_not_json_is_named(
    variable: str, value: str, expected: str
) -> None:
    # A 50-line traceback naming only the section ("server"), with the token in it.
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ={variable: value})
    assert f"{variable}: {expected}" in str(refused.value)
    assert value not in str(refused.value)


def test_a_variable_of_an_unknown_section_is_refused() -> None:
    # AGENT__SERVRE__PORT was ignored, while AGENT__SERVER__PROT was refused.
    with pytest.raises(ConfigError) as refused:
        load_settings(None, environ={"AGENT__SERVRE__PORT": "1"})
    assert "AGENT__SERVRE__PORT: unknown section 'servre'" in str(refused.value)
    ours = {"AGENT_SERVER_PORT": "1", "OPENAI_API_KEY": "k"}  # one underscore: not ours
    assert load_settings(None, environ=ours).llm.api_key.get_secret_value() == "k"


# -- llm.base_url -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["not a url", "ftp://llm.local/v1", "http://", "localhost:8080/v1", "http://h:x/v1"]
)
def test_a_base_url_that_is_not_http_is_refused(tmp_path: Path, url: str) -> None:
    # It started, and every run then retried its model calls as if the failure were temporary.
    message = _refusal(tmp_path, f'[llm]\nbase_url = "{url}"\n')
    assert "llm.base_url: must be an absolute http(s) URL with a host" in message


def test_a_base_url_is_refused_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = _refusal(tmp_path, '[llm]\nbase_url = "ftp://me:hunter2@llm.local/v1?key=k2"\n')
    assert '(got "ftp://llm.local/v1")' in message and "hunter2" not in message
    with pytest.raises(ConfigError, match=r"OPENAI_BASE_URL: must be an absolute http\(s\) URL"):
        load_settings(None, environ={"OPENAI_BASE_URL": "garbage"})
    for good in ("http://127.0.0.1:8080/v1", "https://api.example.com/v1", "http://[::1]:1/v1"):
        assert load_settings(None, environ={"OPENAI_BASE_URL": good}).llm.base_url == good


# -- flags --------------------------------------------------------------------------------------


def test_a_wrong_flag_is_blamed_on_the_flag_not_the_file(tmp_path: Path) -> None:
    # "--port -1" read "invalid configuration in …/config.toml: server.port: …".
    message = _refusal(tmp_path, "[llm]\nmodel = 'm'\n", {"server": {"port": -1}})
    assert message.splitlines()[0] == "invalid configuration:"
    assert message.splitlines()[1].endswith("(got -1) (from --port)")
    message = _refusal(tmp_path, "", {"server": {"host": "0.0.0.0"}})
    assert "server.host: without auth tokens the server only binds to a loopback" in message
    assert message.endswith('(got "0.0.0.0") (from --host)')
    message = _refusal(tmp_path, "[server]\nmax_connections = 0\n", {"server": {"port": -1}})
    assert message.splitlines()[0] == f"invalid configuration in {tmp_path / 'config.toml'}:"


def test_a_database_name_mongodb_refuses_and_an_endless_lease_are_said_at_start(
    tmp_path: Path,
) -> None:
    # A name with "/" was a driver traceback when the store opened; a lease of 1e16 s ended
    # every run with internal_error, and 1e308 a traceback at start.
    message = _refusal(tmp_path, '[storage]\nmongodb_database = "bad/name"\n')
    assert "storage.mongodb_database: a MongoDB database name has 1 to 63 characters" in message
    message = _refusal(tmp_path, "[storage]\nrun_lease_s = 1e16\n")
    assert "storage.run_lease_s: Input should be less than or equal to 3600" in message


def test_an_otlp_endpoint_that_is_not_an_http_url_is_refused(tmp_path: Path) -> None:
    message = _refusal(tmp_path, '[telemetry]\notlp_endpoint = "not a url"\n')
    assert "telemetry.otlp_endpoint: must be an absolute http(s) URL with a host" in message


# -- checks across sections, in settings.py like every other ----------------------------------


def test_a_cost_limit_without_a_price_is_refused_by_the_settings(tmp_path: Path) -> None:
    # It was refused only by create_app, in another module than every other check.
    message = _refusal(tmp_path, "[agent]\nmax_run_cost = 1.5\n")
    assert "agent.max_run_cost: needs a price for model 'gpt-4o-mini'" in message
    assert '[llm.prices."gpt-4o-mini"]' in message
    priced = (
        '[agent]\nmax_run_cost = 1.5\n[llm.prices."gpt-4o-mini"]\n'
        "prompt_per_million = 0.15\ncompletion_per_million = 0.6\n"
    )
    config = tmp_path / "priced.toml"
    config.write_text(priced)
    budget = load_settings(config, environ={}).budget
    assert budget.max_cost == 1.5 and budget.price is not None


def test_derived_limits_follow_the_tokens() -> None:
    """0 means a default that depends on whether tenants are told apart (auth tokens)."""
    tokens = {"auth": {"tokens": {TOKEN: {"tenant": "acme", "user": "alice"}}}}
    alone = Settings(server={"max_connections": 10})
    shared = Settings(server={"max_connections": 10}, **tokens)
    chosen = Settings(
        server={"max_connections": 10, "max_sockets_per_tenant": 3},
        agent={"run_starts_per_minute_per_tenant": 30},
        **tokens,
    )
    assert [s.sockets_per_tenant for s in (alone, shared, chosen)] == [10, 5, 3]
    assert [s.run_starts_per_minute for s in (alone, shared, chosen)] == [0, 600, 30]
