"""Configuration mistakes give one error line and exit status 2 (issue 19, item 9): infinities,
numbers and booleans written as strings in the YAML file, a dimension whose state cannot be
allocated; and credentials from the environment merge with ``--kafka``."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml

from dpbandit_testing.stream_helpers import BANDIT, bandit_config, record_stream
from streaming_dpbandit.cli import build_parser, main
from streaming_dpbandit.commands.serve import build_service_settings


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    d = tmp_path_factory.mktemp("config-stream")
    path = d / "stream.jsonl"
    record_stream(path, 300, seed=2, state_dir=d / "rec")
    return path


def serve(tmp_path, cfg: dict, *flags: str) -> tuple[int, str]:
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["serve", "--config", str(cfg_path), "--no-progress", *flags])
    return code, err.getvalue()


def config(tmp_path, **bandit_over) -> dict:
    return {
        "bandits": {BANDIT: bandit_config() | bandit_over},
        "snapshots": {"directory": str(tmp_path / "state")},
        "metrics": {"enabled": False},
    }


def one_error_line(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_infinite_or_nan_settings_are_refused(stream, tmp_path, value):
    cfg = config(tmp_path, feedback_window=value)  # YAML writes .inf, -.inf, .nan
    line = one_error_line(*serve(tmp_path, cfg, "--file", str(stream)))
    assert "feedback_window" in line and "finite" in line


def test_infinity_inside_a_policy_is_refused(stream, tmp_path):
    cfg = config(tmp_path)
    cfg["bandits"][BANDIT]["policy"]["epsilon"] = float("inf")
    line = one_error_line(*serve(tmp_path, cfg, "--file", str(stream)))
    assert "epsilon" in line


@pytest.mark.parametrize(
    ("where", "value", "what"),
    [
        (("bandits", BANDIT, "default_reward"), "1.5", "a number"),
        (("bandits", BANDIT, "feedback_window"), "2", "a number"),
        (("bandits", BANDIT, "policy", "d"), "20", "an integer"),
        (("metrics", "enabled"), "no", "true or false"),
        (("max_batch",), "10", "an integer"),
    ],
)
def test_numbers_and_booleans_written_as_strings_are_refused(stream, tmp_path, where, value, what):
    cfg = config(tmp_path)
    node = cfg
    for k in where[:-1]:
        node = node.setdefault(k, {})
    node[where[-1]] = value
    line = one_error_line(*serve(tmp_path, cfg, "--file", str(stream)))
    assert where[-1] in line and what in line and repr(value) in line


def test_a_dimension_too_large_for_memory_is_one_error_line(stream, tmp_path):
    cfg = config(tmp_path)
    cfg["bandits"][BANDIT]["policy"]["d"] = 1_000_000_000
    line = one_error_line(*serve(tmp_path, cfg, "--file", str(stream)))
    assert "does not fit in memory" in line and BANDIT in line


def test_env_credentials_merge_with_the_kafka_flag(tmp_path, monkeypatch):
    """The documented pattern: secrets in the environment, the bootstrap on the command line,
    no ``kafka:`` section in the file (it failed with 'bootstrap_servers: Field required')."""
    monkeypatch.setenv("DPBANDIT_KAFKA__SASL_PASSWORD", "s3cret")
    monkeypatch.setenv("DPBANDIT_KAFKA__SASL_USERNAME", "svc")
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(config(tmp_path)))
    args = build_parser().parse_args(
        ["serve", "--config", str(cfg_path), "--kafka", "broker:9092", "--no-progress"]
    )
    settings, _, _ = build_service_settings(args)
    assert settings.kafka.bootstrap_servers == "broker:9092"
    assert settings.kafka.sasl_password.get_secret_value() == "s3cret"
    assert settings.kafka.sasl_username == "svc"
    assert settings.metrics.enabled is False  # the file still counts


def test_a_valid_file_still_serves(stream, tmp_path):
    code, err = serve(tmp_path, config(tmp_path), "--file", str(stream))
    assert code == 0, err


@pytest.mark.parametrize("mode, announced", [("single", True), ("group", False)])
def test_the_default_state_directory_is_announced_only_where_it_is_used(tmp_path, mode, announced):
    # a group replica keeps its state in Kafka topics: no directory to announce
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(
        yaml.safe_dump({"bandits": {BANDIT: bandit_config()}, "scaling": {"mode": mode}})
    )
    args = build_parser().parse_args(
        ["serve", "--config", str(cfg_path), "--kafka", "broker:9092", "--no-progress"]
    )
    _, notes, _ = build_service_settings(args)
    assert any("snapshots.directory" in n for n in notes) is announced
