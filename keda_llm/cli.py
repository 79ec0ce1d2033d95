"""The `keda-llm` console command: one entry point, one sub-command per part.

Each part owns its own argument parser (`<part>.cli.add_arguments` / `run`), so this module only
dispatches and imports a part when it is asked for (the exporter never imports numpy, the scaler
never imports matplotlib).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from keda_llm import __version__

#: sub-command -> (module with add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "exporter": ("keda_llm.exporter.cli", "per-node exporter: engine /metrics + NVML -> llm_* metrics"),
    "scaler": ("keda_llm.scaler.cli", "KEDA external scaler (gRPC) for LLM servers"),
    "activator": ("keda_llm.activator.cli", "OpenAI-compatible proxy: holds requests at zero, wakes the model, routes"),
    "simulate": ("keda_llm.simulator.cli", "replay a request trace through a simulated GPU cluster"),
    "tune": ("keda_llm.simulator.tune_cli",
             "sweep a ScaledObject's knobs on a trace; write the cheapest that meets an SLO"),
    "demo": ("keda_llm.demo", "live demo: simulated engines, exporter, scaler and a KEDA+HPA loop"),
}


#: What the [sim] extra installs: a sub-command that needs one of these says so in one line.
SIM_ONLY = frozenset({"numba", "matplotlib", "rich", "jsonschema", "llvmlite"})


def _missing_extra(name: str, err: ModuleNotFoundError) -> bool:
    """One line naming the extra a sub-command needs, when `err` is one of its modules; else False."""
    if (err.name or "").split(".")[0] not in SIM_ONLY:
        return False
    print(f"keda-llm {name}: needs the simulator's dependencies ({err.name} is not installed); "
          f"hint: pip install -e '.[sim]' (from a checkout)", file=sys.stderr)
    return True


def _load(name: str, module: str) -> ModuleType | None:
    """The sub-command's module, or None after one line saying which extra it needs."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if not _missing_extra(name, err):
            raise
        return None


#: the exit status of a command whose stdout was closed under it (`keda-llm ... | head -1`): the shell's for a
#: command that SIGPIPE ended, 128 + 13, as for the tools Python does not run
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit status. Ctrl-C that a sub-command does not handle itself is one line and 130, not a
    traceback; a closed stdout (`| head -1`) ends it quietly with BROKEN_PIPE."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if a in SUBCOMMANDS), None)
    try:
        return _main(args_list)
    except KeyboardInterrupt:
        print(f"keda-llm{f' {command}' if command else ''}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _stdout_to_devnull()
        return BROKEN_PIPE


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null so that Python's own flush at exit does not fail on the closed pipe again
    ("Exception ignored ... BrokenPipeError"); what was left unwritten is dropped, as the reader is gone."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a test's StringIO, or no stdout at all
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class _UsageError(Exception):
    """A usage error argparse found, already printed as one line."""


class _OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are the commands' one line, `keda-llm CMD: error: ...; hint: ...`,
    exit 2, not the full usage block above argparse's message (`--slo ttft=abc` printed 21 lines). Its
    sub-parsers are of this class too (argparse makes them of the parent's)."""

    def error(self, message: str) -> NoReturn:  # argparse's own wording, kept; one line
        text = " ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"{self.prog}: error: {text}; hint: {self.prog} --help", file=sys.stderr)
        raise _UsageError(text)


def _main(args_list: list[str]) -> int:
    parser = _OneLineParser(prog="keda-llm", description="Autoscale LLM servers through KEDA.")
    parser.add_argument("--version", action="version", version=f"keda-llm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in args_list if a in SUBCOMMANDS), None)
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = parsers[name] = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            loaded = _load(name, module)
            if loaded is None:
                return 2
            loaded.add_arguments(p)
    try:
        args, extra = parser.parse_known_args(args_list)
        if extra:  # said by the sub-command's parser, which read them: `keda-llm tune: ...`, its --help
            parsers.get(args.command or "", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except _UsageError:
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    mod = _load(args.command, SUBCOMMANDS[args.command][0])
    if mod is None:
        return 2
    try:
        return int(mod.run(args))
    except ModuleNotFoundError as err:  # the simulator and the demo import their heavy parts late
        if not _missing_extra(args.command, err):
            raise
        return 2


if __name__ == "__main__":
    sys.exit(main())
