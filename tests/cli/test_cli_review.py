"""The command line as a demanding user meets it: a closed stdout, Ctrl-C and SIGTERM, empty and absurd values,
output paths that cannot be written. Each expected failure is one line with a hint (never a traceback), and
what a run computed is written before anything that may fail under it.

Each test here failed before its fix; the subprocess ones are the cases only a real process shows (a pipe
closed under it, a signal), on the shortest inputs: a minute or five of a shipped trace.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keda_llm import demo
from keda_llm.cli import main
from keda_llm.scaler import cli as scaler_cli

BROKEN_PIPE = 128 + signal.SIGPIPE  # the shell's status for a command a closed pipe ended
NOISE = ("Traceback", "Exception ignored", "BrokenPipeError")


def one_line(err: str, command: str) -> str:
    """The one line a refused command printed on stderr (and that it is only one, from this command)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keda-llm {command}:"), err
    return lines[0]


def run_closed_stdout(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`keda-llm ARGS | head -0`: the command's stdout is a pipe whose reader is gone before it writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "keda_llm.cli", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=timeout, check=False)
    finally:
        os.close(write_end)


# ---------------------------------------------------------------------------------- a closed stdout


class _ClosedPipe(io.StringIO):
    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("args", [["demo", "--print-scaledobject"], ["exporter", "--no-nvml", "--once"]])
def test_a_closed_stdout_ends_the_command_quietly(args: list[str], monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`keda-llm demo --print-scaledobject | head -0` was a BrokenPipeError traceback, and so was the exporter's
    --once; now the shell's status for a command a closed pipe ended, and nothing on stderr."""
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main([*args, *(["--log-level", "ERROR"] if args[0] == "exporter" else [])]) == BROKEN_PIPE
    assert capsys.readouterr().err == ""


def test_a_closed_stdout_in_a_real_process(tmp_path: Path) -> None:
    done = run_closed_stdout(["demo", "--print-scaledobject"], tmp_path, timeout=60)
    assert done.returncode == BROKEN_PIPE, done.stderr
    assert not any(n in done.stderr for n in NOISE), done.stderr


def test_simulate_writes_out_before_the_table_a_closed_stdout_cuts(tmp_path: Path) -> None:
    """`keda-llm simulate ... --out DIR | head -1`: the table was printed first, the closed pipe ended the
    command there (rich exits), and the run's results.json was never written."""
    out = tmp_path / "results"
    done = run_closed_stdout(["simulate", "--trace", "azure-code-2023", "--window", "0:60", "--lead-in", "0",
                              "--policies", "static", "--quiet", "--out", str(out)], tmp_path)
    assert not any(n in done.stderr for n in NOISE), done.stderr
    assert {p.name for p in out.iterdir()} >= {"results.json", "config.json", "replicas.png"}, done.stderr


TUNE = ["tune", "--trace", "azure-code-2023", "--window", "0:300", "--lead-in", "0", "--slo-ttft", "2",
        "--slo-itl", "0.1", "--quick", "--workers", "1", "--no-oracle", "--quiet"]


def test_tune_writes_its_files_before_a_closed_stdout_cuts_the_report(tmp_path: Path) -> None:
    """The sweep was lost: with --out, the report on stdout came first and a closed pipe ended the command
    before the ScaledObject was written; without --out, the plot came after the YAML on stdout and the broken
    pipe was reported as `check the --out/--plot path`."""
    so = tmp_path / "so.yaml"
    done = run_closed_stdout([*TUNE, "--out", str(so)], tmp_path)
    assert not any(n in done.stderr for n in NOISE), done.stderr
    assert "kind: ScaledObject" in so.read_text(), done.stderr

    png = tmp_path / "frontier.png"
    done = run_closed_stdout([*TUNE, "--plot", str(png)], tmp_path)
    assert done.returncode == BROKEN_PIPE, done.stderr
    assert "--out/--plot path" not in done.stderr and not any(n in done.stderr for n in NOISE), done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------- Ctrl-C and SIGTERM


def test_ctrl_c_a_command_does_not_handle_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C during `keda-llm simulate` was a KeyboardInterrupt traceback from inside the simulator."""
    from keda_llm.simulator import cli as sim_cli

    def interrupted(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_cli, "build", interrupted)
    assert main(["simulate", "--trace", "azure-code-2023"]) == 130
    assert one_line(capsys.readouterr().err, "simulate") == "keda-llm simulate: interrupted"


def test_the_demo_takes_sigterm_as_ctrl_c(tmp_path: Path) -> None:
    """SIGTERM (`kill`, `timeout`) ended the demo on the spot: no summary, and its temporary folder of stand-in
    weights (16 MiB) left in /tmp. Now it stops as on Ctrl-C, says which signal, and exits 128 + SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-m", "keda_llm.cli", "demo", "--duration", "30", "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    # the first status line: the run is under way
    out, err = _signal_when(proc, "stdout", lambda line: line.startswith("[") and "s]" in line, signal.SIGTERM, 60)
    assert proc.returncode == 128 + signal.SIGTERM, (out, err)
    assert "stopped early (SIGTERM)" in out, out
    assert not any(n in err for n in NOISE), err
    assert not list(tmp_path.glob("keda-llm-demo-*")), "the demo's temporary folder was left behind"


def test_ctrl_c_sets_takes_sigterm_too() -> None:
    flag, received = demo.threading.Event(), []
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with demo._ctrl_c_sets(flag, received):
            signal.raise_signal(signal.SIGTERM)
            assert flag.is_set() and received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_activator_names_the_signal_it_drains_on(tmp_path: Path) -> None:
    """Ctrl-C logged `SIGTERM: draining`."""
    proc = subprocess.Popen([sys.executable, "-m", "keda_llm.cli", "activator", "--listen", "127.0.0.1:0",
                             "--admin-listen", "127.0.0.1:0", "--model", "m", "--upstream", "http://127.0.0.1:9"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _, err = _signal_when(proc, "stderr", lambda line: "activator: proxy on" in line, signal.SIGINT, 30)
    assert proc.returncode == 0, err
    assert "SIGINT: draining" in err and "SIGTERM" not in err, err


# ---------------------------------------------------------------------------------- bad values and paths


@pytest.mark.parametrize("flag", ["--listen", "--config", "--interval", "--timeout"])
def test_the_exporter_refuses_an_empty_value(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--listen ""` served on the default :9400, `--config ""` ran without a file, `--interval ""` and
    `--timeout ""` took the defaults: each said nothing (an unset variable in `--listen "$ADDR"`)."""
    assert main(["exporter", "--no-nvml", "--once", flag, ""]) == 2
    line = one_line(capsys.readouterr().err, "exporter")
    assert f"{flag}: ''" in line and "hint:" in line


@pytest.mark.parametrize("until", ["nan", "inf", "-1", "1e30", "garbage", ""])
def test_tune_refuses_an_until_prometheus_cannot_hold(until: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--until nan` was "cannot convert float NaN to integer", 1e30 "the span 1e+30..1e+30 holds no whole
    minute", -1 a query for 1969: none named the flag. Refused before Prometheus is asked (none listens here)."""
    assert main(["tune", "--slo-ttft", "1", "--slo-itl", "0.1", "--from-prometheus", "http://127.0.0.1:9",
                 "--model", "m", f"--until={until}"]) == 2
    line = one_line(capsys.readouterr().err, "tune")
    assert line.startswith(f"keda-llm tune: error: --until {until!r}") and "hint:" in line, line
    assert "Prometheus at" not in line


@pytest.mark.parametrize("kind", ["a file", "under a file", "empty"])
def test_simulate_refuses_an_out_it_cannot_write_before_the_run(kind: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`--out /etc/passwd` (a file) or a folder that cannot be made ran the whole simulation, then failed with
    a FileExistsError/FileNotFoundError traceback: the run lost."""
    from keda_llm.simulator import cli as sim_cli

    a_file = tmp_path / "results.txt"
    a_file.write_text("x")
    out = {"a file": str(a_file), "under a file": str(a_file / "results"), "empty": ""}[kind]

    def no_run(*_: Any, **__: Any) -> Any:
        raise AssertionError("the trace was loaded: --out is checked before")

    monkeypatch.setattr(sim_cli, "load_trace", no_run)
    assert main(["simulate", "--trace", "azure-code-2023", "--window", "0:60", "--out", out]) == 2
    line = one_line(capsys.readouterr().err, "simulate")
    assert "--out" in line and "hint:" in line, line
    assert a_file.read_text() == "x"


def test_the_activator_says_which_flag_model_needs(capsys: pytest.CaptureFixture[str]) -> None:
    """`--model m` alone was refused under `--endpoints`, a flag that does not exist."""
    assert main(["activator", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--model", "m"]) == 2
    line = one_line(capsys.readouterr().err, "activator")
    assert "--upstream" in line and "--endpoints" not in line, line


def test_the_activator_refuses_a_scaled_object_it_would_drop(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`--scaled-object ns/so` beside a config file's models was dropped without a word: no wake for it."""
    cfg = tmp_path / "activator.yaml"
    cfg.write_text("models:\n  - name: a\n    endpoints: [{url: 'http://127.0.0.1:9'}]\n")
    assert main(["activator", "--config", str(cfg), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                 "--scaled-object", "ns/so"]) == 2
    assert "--scaled-object" in one_line(capsys.readouterr().err, "activator")


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_the_scaler_refuses_a_history_dir_it_cannot_write(kind: str, tmp_path: Path) -> None:
    """`--history-dir /etc/passwd` started with a warning, warned again every 5 minutes and kept no history."""
    a_file = tmp_path / "history"
    a_file.write_text("x")
    parser = argparse.ArgumentParser()
    scaler_cli.add_arguments(parser)
    args = parser.parse_args(["--no-kube", "--history-dir", str(a_file if kind == "a file" else a_file / "sub")])
    with pytest.raises(scaler_cli.StartError, match=r"--history-dir .*; hint: "):
        scaler_cli.settings_from_args(args)
    assert a_file.read_text() == "x"


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_a_preset_folder_is_refused_as_a_folder(command: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # resolve_preset took a folder for a preset's name: "unknown preset '<folder>'; known: ..."
    args = [command, "--trace", "azure2023-code", "--window", "0:60", "--preset", str(tmp_path)]
    if command == "tune":
        args += ["--slo-ttft", "2", "--slo-itl", "0.1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a folder; a preset file is one YAML file" in err[0] and "hint:" in err[0], err


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_a_per_minute_file_over_the_request_limit_is_not_told_to_use_since(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the loader's hint named tune's Prometheus flag (--since), which a file does not take
    f = tmp_path / "history.csv"
    f.write_text("minute,requests,prompt_tokens,output_tokens\n0,60000000,60000000,60000000\n"
                 "60,60000000,60000000,60000000\n")
    args = [command, "--trace", str(f), "--format", "minutes"]
    if command == "tune":
        args += ["--slo-ttft", "2", "--slo-itl", "0.1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "requests in all: at most" in err[0], err
    assert "--since" not in err[0] and "keep fewer of its minutes" in err[0]


@pytest.mark.parametrize(("argv", "prog", "message"), [
    (["tune", "--slo", "ttft=abc"], "keda-llm tune", "ambiguous option: --slo could match --slo-ttft, --slo-itl"),
    (["tune", "--trace", "azure-code-2023", "--slo-ttft", "abc", "--slo-itl", "0.1"], "keda-llm tune",
     "argument --slo-ttft: 'abc': not a duration"),
    (["tune", "--trace", "azure-code-2023"], "keda-llm tune", "the following arguments are required: --slo-ttft"),
    (["simulate", "--trace", "azure-code-2023", "--max-replicas", "two"], "keda-llm simulate",
     "argument --max-replicas: invalid int value: 'two'"),
    (["simulate", "--trace", "azure-code-2023", "--no-such-flag"], "keda-llm simulate",
     "unrecognized arguments: --no-such-flag"),
    (["no-such-command"], "keda-llm", "argument COMMAND: invalid choice: 'no-such-command'"),
])
def test_a_usage_error_is_one_line_with_a_hint(argv: list[str], prog: str, message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """argparse printed its usage block (21 lines for `tune`) above the message, and exited through SystemExit:
    not the one line `error: ...; hint: ...` and exit 2 every other expected failure is."""
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{prog}: error: {message}"), lines[0]
    assert lines[0].endswith(f"; hint: {prog} --help"), lines[0]


@pytest.mark.parametrize("command", ["simulate", "tune"])
@pytest.mark.parametrize(("ttft", "itl", "seconds"), [("2s", "100ms", (2.0, 0.1)), ("1500ms", "0.05", (1.5, 0.05)),
                                                      ("2", "0.1", (2.0, 0.1)), ("1m", "1e-1", (60.0, 0.1))])
def test_the_slo_flags_take_durations(command: str, ttft: str, itl: str, seconds: tuple[float, float]) -> None:
    """`--slo-ttft 2s` was "invalid float value: '2s'", where every other duration of the project reads Go's."""
    import importlib

    from keda_llm.cli import SUBCOMMANDS

    parser = argparse.ArgumentParser()
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    args = parser.parse_args(["--trace", "azure-code-2023", "--slo-ttft", ttft, "--slo-itl", itl])
    assert (args.slo_ttft, args.slo_itl) == pytest.approx(seconds)


def _signal_when(proc: subprocess.Popen[str], stream: str, ready: Any, sig: int, timeout: float) -> tuple[str, str]:
    """Read `proc`'s `stream` until a line `ready` accepts, send it `sig`, and return what it wrote after; killed
    if it is still running at the end."""
    try:
        lines = getattr(proc, stream)
        assert lines is not None
        for line in lines:
            if ready(line):
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out, err
