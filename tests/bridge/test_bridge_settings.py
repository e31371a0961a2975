"""Settings: every field is a flag and a `JAXPORT_*` variable; flag > env > default; bad values
are one SettingsError naming the flag or variable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from jaxport.bridge.settings import Settings, SettingsError, build_parser


def test_defaults():
    s = Settings.from_argv(["--repository", "repo"], environ={})
    assert s.repository == Path("repo")
    assert (s.host, s.port, s.metrics_port, s.engine) == ("127.0.0.1", 8001, 8002, "exported")
    assert s.model_version_policy == "latest" and s.port_file is None
    assert s.max_message_bytes >= 64 * 1024 * 1024 + 1024  # a 64 MiB tensor plus its message


def test_precedence_flag_over_env_over_default():
    env = {"JAXPORT_REPOSITORY": "from-env", "JAXPORT_PORT": "9000", "JAXPORT_ENGINE": "pjrt",
           "JAXPORT_GRACE_PERIOD_S": "2.5", "JAXPORT_PORT_FILE": "/tmp/p.json"}
    s = Settings.from_argv(["--port", "0"], environ=env)
    assert s.repository == Path("from-env")
    assert s.port == 0  # flag wins
    assert s.engine == "pjrt" and s.grace_period_s == 2.5 and s.port_file == Path("/tmp/p.json")


def test_every_field_has_a_flag_and_an_env_var():
    help_text = build_parser().format_help()
    for f in dataclasses.fields(Settings):
        assert f"--{f.name.replace('_', '-')}" in help_text
        assert f"JAXPORT_{f.name.upper()}" in help_text.replace("\n", "").replace(" ", "")


def test_settings_are_frozen():
    s = Settings.from_argv(["--repository", "r"], environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(("argv", "env", "fragment"), [
    ([], {}, "--repository (or JAXPORT_REPOSITORY) is required"),
    (["--repository", "r"], {"JAXPORT_METRICS_PORT": "x"}, "JAXPORT_METRICS_PORT='x'"),
    (["--repository", "r", "--metrics-port", "-2"], {}, "--metrics-port must be in -1..65535"),
    (["--repository", "r"], {"JAXPORT_ENGINE": "tpu"}, "--engine must be one of"),
    (["--repository", "r", "--max-message-bytes", "0"], {}, "--max-message-bytes must be >= 1"),
    (["--repository", "r", "--model-version-policy", "oldest"], {}, "invalid choice: 'oldest'"),
])
def test_bad_values_are_one_error(argv, env, fragment):
    with pytest.raises(SettingsError) as info:
        Settings.from_argv(argv, environ=env)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
