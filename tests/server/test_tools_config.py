"""Wrong `[tools]` values for MCP servers stop the server at startup with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.settings import ConfigError, load_settings


def _load(tmp_path: Path, toml: str, environ: dict[str, str] | None = None):
    path = tmp_path / "config.toml"
    path.write_text(toml)
    return load_settings(path, environ=environ or {})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[tools.mcp.x]\nargs = ["a"]\n', "give exactly one of command (stdio) or url"),
        ('[tools.mcp.x]\ncommand = "a"\nurl = "http://h/mcp"\n', "give exactly one of"),
        ('[tools.mcp.x]\nurl = "ftp://h/mcp"\n', "url must start with http:// or https://"),
        ('[tools.mcp."a__b"]\ncommand = "a"\n', "MCP server name 'a__b'"),
        ('[tools.mcp.x]\ncommand = "a"\napproval = "sometimes"\n', "tools.mcp.x.approval"),
        ('[tools.mcp.x]\ncommand = "a"\ntimeout = 3\n', "tools.mcp.x.timeout: unknown key"),
        (
            '[tools.mcp.x]\nurl = "http://h/mcp"\nheaders_env = { Authorization = "NOPE_VAR" }\n',
            "tools.mcp.x.headers_env: environment variable(s) not set: NOPE_VAR",
        ),
    ],
)
def test_bad_mcp_config_is_a_startup_error(tmp_path: Path, toml: str, message: str):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, toml)
    assert message in str(caught.value)


def test_secrets_come_from_the_environment_and_cwd_from_the_config_folder(tmp_path: Path):
    settings = _load(
        tmp_path,
        '[tools.mcp.web]\nurl = "https://h/mcp"\nheaders_env = { Authorization = "WEB_AUTH" }\n'
        '[tools.mcp.local]\ncommand = "srv"\ncwd = "work"\n',
        {"WEB_AUTH": "Bearer s3cret"},
    )
    web, local = settings.tools.mcp["web"], settings.tools.mcp["local"]
    assert web.headers["Authorization"].get_secret_value() == "Bearer s3cret"
    assert "s3cret" not in repr(settings)
    assert local.cwd == tmp_path / "work"
    assert settings.tools.modules_dir == tmp_path
