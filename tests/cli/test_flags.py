"""Every flag of every sub-command says what it does, and durations read the same everywhere."""

from __future__ import annotations

import argparse
import importlib

import pytest

from keda_llm.cli import SUBCOMMANDS


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_flag_has_help(command: str) -> None:
    parser = argparse.ArgumentParser()
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    missing = [a.option_strings or [a.dest] for a in parser._actions
               if not a.help and a.dest != "help"]
    assert missing == [], f"keda-llm {command}: flags without help: {missing}"
