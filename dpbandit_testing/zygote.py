"""A fork server for the kill tests: one process imports the package once, then forks a
``dpbandit`` command whenever asked, so that (re)starting a service costs a fork instead of an
interpreter start and the package's imports (1–5 s each on a loaded 2-core machine).

A forked command is an ordinary ``dpbandit`` process — ``cli.main(argv)`` in a process of its
own, with its own stdout/stderr log — and the test kills it with a real ``SIGKILL``. The
server reaps its children and reports their exit status.

>>> z = Zygote()  # doctest: +SKIP
>>> pid = z.spawn(["serve", "--config", "serve.yaml"], "serve.log")  # doctest: +SKIP
>>> os.kill(pid, signal.SIGKILL); z.wait(pid)  # doctest: +SKIP
-9
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Zygote"]


class Zygote:
    """Client of the fork server (a child process of the caller).

    Parameters
    ----------
    env
        The server's environment (default: the caller's, with single-threaded BLAS: a
        fork must not inherit a BLAS thread pool).
    """

    def __init__(self, env: dict[str, str] | None = None):
        env = dict(os.environ if env is None else env)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dpbandit_testing.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        ready = self._read()
        if ready != "ready":
            raise RuntimeError(f"the fork server did not start: {ready!r}")

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _ask(self, **cmd: object) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def spawn(self, argv: list[str], log: str | Path) -> int:
        """Fork ``dpbandit ARGV`` with stdout and stderr appended to ``log``; its pid."""
        return int(self._ask(op="spawn", argv=argv, log=str(log)))

    def poll(self, pid: int) -> int | None:
        """The exit status of ``pid`` (negative: killed by that signal), or None if it runs."""
        got = self._ask(op="poll", pid=pid)
        return None if got == "running" else int(got)

    def wait(self, pid: int, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while (rc := self.poll(pid)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {pid} still runs after {timeout:g} s")
            time.sleep(0.05)
        return rc

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _child(argv: list[str], log: str) -> None:
    """In the forked process: the command's own stdio, default signals, then the CLI."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(0)
    sys.stdout = open(1, "w", buffering=1)
    sys.stderr = open(2, "w", buffering=1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    code = 1
    try:
        from streaming_dpbandit.cli import main

        code = int(main(argv) or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # os._exit below would swallow it: say why the service died
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve() -> None:
    """The server: import everything a service imports, then answer commands on stdin."""
    import confluent_kafka  # noqa: F401 - the imports every child shares
    import kafka  # noqa: F401

    import streaming_dpbandit.cli  # noqa: F401
    from streaming_dpbandit.stream import runner  # noqa: F401
    from streaming_dpbandit.stream.kafka import confluent_group, python_group  # noqa: F401

    exited: dict[int, int] = {}
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                _child(cmd["argv"], cmd["log"])
            print(pid, flush=True)
        elif cmd["op"] == "poll":
            pid = int(cmd["pid"])
            if pid not in exited:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    exited[pid] = os.waitstatus_to_exitcode(status)
            print(exited.get(pid, "running"), flush=True)


if __name__ == "__main__":
    _serve()
