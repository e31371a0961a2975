"""The front's one resolved configuration (`jaxport.bridge.cli.front_config`, read by
bridge/front/config.go): what Settings resolved from flags and environment, the worker command,
and the flags every worker gets. The live hand-off (`jaxport serve` execs the front with it) is
what every front test starts through (front_helpers.front_command)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from front_helpers import FRONT_SRC
from jaxport.bridge import cli
from jaxport.bridge.settings import Settings, SettingsError


def test_config_is_what_settings_resolved() -> None:
    argv = ["--repository", "repo", "--port", "0", "--workers", "3", "--front-bin", "/x/front",
            "--batching", "--tls-cert", "c.pem", "--tls-key", "k.pem"]
    settings = Settings.from_argv(argv, environ={"JAXPORT_GRACE_PERIOD_S": "2.5"})
    config = cli.front_config(settings, argv)
    assert config == {
        "host": "127.0.0.1", "port": 0, "port_file": None, "metrics_port": 8002,
        "http_port": 0, "workers": 3,
        "worker_cmd": [sys.executable, "-m", "jaxport.bridge.worker"],
        # the flags as given, minus the serve-only one (abbreviated, as argparse takes it)
        "worker_args": ["--repository", "repo", "--port", "0", "--workers", "3", "--batching",
                        "--tls-cert", "c.pem", "--tls-key", "k.pem"],
        "max_message_bytes": settings.max_message_bytes, "grace_period_s": 2.5,
        "tls_cert": "c.pem", "tls_key": "k.pem", "tls_client_ca": None, "auth_token_file": None,
        "pjrt_plugin": "cpu", "max_inflight_per_model": settings.max_inflight_per_model,
        "max_queue_per_model": settings.max_queue_per_model,
        "batch_queue_size": settings.batch_queue_size, "trace_otlp_endpoint": None,
    }
    # --pjrt-plugin none (or JAXPORT_PJRT_PLUGIN=none): no native engine, the front gets null
    for given in (["--pjrt-plugin", "none"], ["--pjrt-plugin="]):
        off = Settings.from_argv([*argv, *given], environ={})
        assert cli.front_config(off, argv)["pjrt_plugin"] is None
    off = Settings.from_argv(argv, environ={"JAXPORT_PJRT_PLUGIN": "none"})
    assert cli.front_config(off, argv)["pjrt_plugin"] is None
    # --trace-otlp-endpoint (or JAXPORT_TRACE_OTLP_ENDPOINT): the receiver, checked as HOST:PORT
    traced = Settings.from_argv([*argv, "--trace-otlp-endpoint", "127.0.0.1:4317"], environ={})
    assert cli.front_config(traced, argv)["trace_otlp_endpoint"] == "127.0.0.1:4317"
    traced = Settings.from_argv(argv, environ={"JAXPORT_TRACE_OTLP_ENDPOINT": "otel:4317"})
    assert cli.front_config(traced, argv)["trace_otlp_endpoint"] == "otel:4317"
    for bad in ("4317", "host:", "host:0", "host:http"):
        with pytest.raises(SettingsError, match=f"--trace-otlp-endpoint.*HOST:PORT.*{bad!r}"):
            Settings.from_argv([*argv, "--trace-otlp-endpoint", bad], environ={})
    command = cli.front_command(Path("/x/front"), argv, settings, worker_cmd=["w", "-m", "x"])
    assert command[:2] == ["/x/front", "--config"]
    assert json.loads(command[2]) == {**config, "worker_cmd": ["w", "-m", "x"]}


def test_config_fields_are_the_fronts() -> None:
    """The front requires every field and refuses any other (config.go): the two lists agree."""
    source = (FRONT_SRC / "config.go").read_text(encoding="utf-8")
    body = source[source.index("type config struct {"):]
    body = body[:body.index("\n}\n")]
    fields = re.findall(r'`json:"([a-z_]+)"`', body)
    settings = Settings.from_argv(["--repository", "repo"], environ={})
    assert sorted(fields) == sorted(cli.front_config(settings, []))
