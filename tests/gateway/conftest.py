"""The real gateway process (``dpbandit gateway``), driven by a real HTTP client (httpx)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

RANK = "/personalizer/v1.0/rank"


def reward_path(event_id: str) -> str:
    return f"/personalizer/v1.0/events/{event_id}/reward"


def activate_path(event_id: str) -> str:
    return f"/personalizer/v1.0/events/{event_id}/activate"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bandit(first_episode_len: int = 30, window: float = 5.0) -> dict:
    """A small FLIPHAT bandit over hashed feature objects (seeded: reproducible tie-breaks)."""
    return {
        "policy": {
            "policy": "fliphat",
            "d": 64,
            "s": 4,
            "epsilon": 1.0,
            "delta": 1e-6,
            "first_episode_len": first_episode_len,
            "noise_backend": "fast",
        },
        "feedback_window": window,
        "on_expiry": "default",
        "reward_bounds": [0.0, 1.0],
        "seed": 7,
        "features": {},
    }


def rank_body(i: int, tier: str | None = None, n_actions: int = 3, **extra) -> dict:
    tier = tier or ("gold" if i % 2 else "silver")
    return {
        "contextFeatures": [{"user": {"tier": tier, "visits": i % 5}}],
        "actions": [
            {"id": f"a{k}", "features": [{"type": f"t{k}", "price": 1.0 + k}]}
            for k in range(n_actions)
        ],
        "eventId": f"ev-{i}",
        **extra,
    }


class GatewayProcess:
    """``dpbandit gateway --config FILE`` as a subprocess; ``client`` talks to it."""

    def __init__(self, config: dict, directory: Path, name: str = "gateway"):
        self.config = config
        self.directory = directory
        self.name = name
        self.port = config["gateway"]["port"]
        self.path = directory / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(config))
        self.log = directory / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> GatewayProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streaming_dpbandit.cli", "gateway", "--config",
                 str(self.path)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the gateway exited {self.proc.returncode}:\n{self.text()}")
            try:
                if self.client.get("/livez").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the gateway did not start:\n{self.text()}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def metric(self, name: str) -> float:
        """The first sample of ``name`` on /metrics (0.0 while the series does not exist)."""
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.client.close()

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return -1 if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.client.close()
        return rc


@pytest.fixture
def gateway_factory(tmp_path):
    started: list[GatewayProcess] = []

    def make(config: dict, name: str = "gateway") -> GatewayProcess:
        gp = GatewayProcess(config, tmp_path, name)
        started.append(gp)
        return gp

    yield make
    for gp in started:
        gp.stop()
