"""The help a new user reads (issue 34, item 7): every command describes itself in plain text,
``explain`` lists the policies it knows, and ``budget`` takes the state directory it is
pointed at."""

from __future__ import annotations

import argparse
import json

import pytest

from streaming_dpbandit.cli import build_parser, main
from streaming_dpbandit.config import CONFIGS


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def help_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [None, *subcommands()])
def test_every_command_describes_itself_without_markup(command, capsys):
    text = help_of([] if command is None else [command], capsys)
    parser = build_parser() if command is None else subcommands()[command]
    assert parser.description, f"dpbandit {command or ''} has no description"
    assert "``" not in text and ":func:" not in text and ":class:" not in text
    for action in parser._actions:  # every option says what it is for
        if isinstance(action, argparse._SubParsersAction):
            continue  # (its commands have theirs)
        assert action.help, f"dpbandit {command or ''} {action.option_strings or action.dest}"


def test_explain_lists_every_policy_whole(capsys):
    text = help_of(["explain"], capsys)
    words = set(text.replace(",", " ").split())
    assert set(CONFIGS) <= words, set(CONFIGS) - words  # none split across lines
    assert "d=400" in text  # --policy-param says what it takes


def test_budget_takes_a_state_directory(tmp_path, capsys):
    state = tmp_path / "state"
    assert main(["serve", "--events", "600", "--no-metrics", "--no-progress",
                 "--state-dir", str(state)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["budget", str(state), "--json"]) == 0
    by_dir = json.loads(capsys.readouterr().out)
    assert main(["budget", str(state / "ledger.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_dir
    assert by_dir["records"] >= 1 and by_dir["ledger"] == str(state / "ledger.jsonl")
    assert main(["budget", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"dpbandit budget: error: no ledger in {tmp_path} (a state directory holds ledger.jsonl)"
    )
