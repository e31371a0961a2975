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


@pytest.mark.parametrize(("argv", "env", "port"), [
    ([], {}, 8000),
    (["--port", "0"], {}, 0),  # any free gRPC port: REST takes a free one too
    (["--port", "0", "--http-port", "9"], {}, 9),
    (["--http-port", "-1"], {}, -1),
    (["--port", "0"], {"JAXPORT_HTTP_PORT": "8500"}, 8500),
])
def test_http_port_is_resolved_once(argv, env, port):
    """The REST port the native front is handed (it has no default of its own)."""
    assert Settings.from_argv(["--repository", "r", *argv], environ=env).http_port == port


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
    (["--repository", "r", "--http-port", "-2"], {}, "--http-port must be in -1..65535, got -2"),
    (["--repository", "r", "--model-version-policy", "oldest"], {}, "invalid choice: 'oldest'"),
])
def test_bad_values_are_one_error(argv, env, fragment):
    with pytest.raises(SettingsError) as info:
        Settings.from_argv(argv, environ=env)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_batching_models_per_model_overrides_and_fallbacks():
    s = Settings.from_argv(["--repository", "r", "--batching-models", "mlp:2000:8+32, ranker::4,"
                            "plain", "--max-queue-delay-us", "500",
                            "--preferred-batch-sizes", "16"], environ={})
    assert s.batching is False
    assert s.batching_for("mlp") == (2000, (8, 32))
    assert s.batching_for("ranker") == (500, (4,))  # empty delay: the global one
    assert s.batching_for("plain") == (500, (16,))
    assert s.batching_for("other") is None  # not listed, no --batching: does not batch
    both = Settings.from_argv(["--repository", "r", "--batching", "--batching-models", "mlp:0"],
                              environ={})
    assert both.batching_for("mlp") == (0, ()) and both.batching_for("other") == (1000, ())
    env = Settings.from_argv(["--repository", "r"], environ={"JAXPORT_BATCHING_MODELS": "a:7"})
    assert env.batching_for("a") == (7, ())


@pytest.mark.parametrize("spec, fragment", [
    ("mlp:x", "queue delay 'x' is not an integer"),
    ("mlp:-1", "queue delay must be >= 0"),
    ("mlp:10:8+y", "preferred sizes '8+y' must be integers joined by '+'"),
    ("mlp:10:0", "preferred sizes must be positive"),
    ("mlp:1:2:3", "expected NAME[:MAX_QUEUE_DELAY_US[:SIZE+SIZE...]]"),
    (":10", "expected NAME"),
    ("mlp,mlp:5", "model 'mlp' is listed twice"),
])
def test_bad_batching_models_are_one_error(spec, fragment):
    with pytest.raises(SettingsError) as err:
        Settings.from_argv(["--repository", "r", "--batching-models", spec], environ={})
    assert "--batching-models" in str(err.value) and fragment in str(err.value)
    with pytest.raises(SettingsError) as err:
        Settings.from_argv(["--repository", "r"], environ={"JAXPORT_BATCHING_MODELS": spec})
    assert "JAXPORT_BATCHING_MODELS" in str(err.value) and fragment in str(err.value)
