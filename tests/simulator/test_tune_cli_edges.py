"""`keda-llm tune` at its edges, as a new platform engineer following docs/tune.md ran into them (2026-12-01):
each case failed before its fix (a traceback, a hang on Ctrl-C, a written file that was not YAML or not valid
PromQL, a flag's mistake silently replaced, a bad output path found only after the sweep, a hint about a flag
the command did not use).

The runs that reach a sweep take the first minute of azure2023-code with no lead-in, the 4-candidate `--quick`
grid, no oracle and one worker: about a second each.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from keda_llm.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
deploy_validate = pytest.importorskip("test_deploy_validate")

SLO = ["--slo-ttft", "2", "--slo-itl", "0.1"]
FAST = ["--window", "0:60", "--lead-in", "0", *SLO, "--quick", "--no-oracle", "--workers", "1", "--quiet"]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _one_line(capsys: pytest.CaptureFixture[str], rc: int) -> tuple[str, str]:
    """(what, hint) of the one error line a refusal prints; fails on anything else."""
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("keda-llm tune: error: "), lines[0]
    what, _, hint = lines[0].partition("; hint: ")
    return what, hint


@pytest.mark.parametrize(("argv", "message", "hint"), [
    # an unset shell variable (`--model "$MODEL"`) wrote the preset's model, which no engine of theirs labels
    (["--model", ""], "--model '': empty", "served model name"),
    (["--model", " my-model "], "blanks around the name", "served model name"),
    # a traceback from the manifests' validation; or a ScaledObject KEDA could never dial
    (["--scaler-address", ""], "--scaler-address '': not host:port", "keda-llm-scaler.keda-llm.svc:9090"),
    (["--scaler-address", "keda-llm-scaler"], "not host:port", "--scaler-address"),
    (["--scaler-address", "http://keda-llm-scaler:9090"], "not host:port", "--scaler-address"),
    # a traceback (maxReplicaCount beyond int32), or the oracle's table sized by it (2**31: 80 GiB)
    (["--max-replicas", "3000000000"], "--max-replicas 3000000000: at most 10,000", "--max-replicas 16"),
    (["--max-replicas", "20000"], "at most 10,000", "--max-replicas 16"),
    # a Kubernetes name of up to 253 characters, written; KEDA 2.20 refuses past 54 (HPA keda-hpa-NAME, a label)
    (["--name", "a" * 55], "55 characters, KEDA takes at most 54", "--name " + "a" * 54),
    # Path("") is the current folder: "--trace .: a directory", "--out .: a directory; e.g. --out out"
    (["--trace", ""], "unknown trace ''", "shipped trace"),
    (["--out", ""], "--out '': an empty file name", "--out scaledobject.yaml"),
    (["--plot", ""], "--plot '': an empty file name", "--plot frontier.png"),
])
def test_a_flag_given_wrong_is_one_line_before_the_sweep(argv: list[str], message: str, hint: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    given = dict(zip(argv[::2], argv[1::2], strict=True))
    trace = ["--trace", "azure-code-2023"] if "--trace" not in given else []
    rc = main(["tune", *trace, *argv, *FAST])
    what, said = _one_line(capsys, rc)
    assert message in what and hint in said, (what, said)


def test_seeds_past_any_use_are_refused_before_every_run_is_listed() -> None:
    """`--seeds 100000000` (a typo for 10) listed 400 million (candidate, seed) runs before the first ran."""
    import argparse

    from keda_llm.simulator.tune_cli import _Refused, add_arguments, build

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--trace", "azure-code-2023", *FAST, "--seeds", "1001"])
    with pytest.raises(_Refused, match="--seeds 1001: at most 1,000"):
        build(args)
    build(p.parse_args(["--trace", "azure-code-2023", *FAST, "--seeds", "1000"]))


def test_simulate_refuses_more_replicas_than_it_can_plan_for(tmp_path: Path) -> None:
    """`keda-llm simulate --max-replicas 2147483647` (or a ScaledObject's maxReplicaCount that high, which KEDA's
    schema takes) had the oracle allocate 80 GiB: the kernel killed it. Refused as tune refuses it."""
    import argparse

    from keda_llm.simulator.cli import add_arguments, build
    from keda_llm.simulator.control.manifest import scaledobject_manifest
    from keda_llm.simulator.tune import Knobs, Target, candidate

    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(ValueError, match="--max-replicas 2147483647: at most 10,000"):
        build(p.parse_args(["--trace", "azure-code-2023", "--window", "0:60", "--max-replicas", "2147483647"]))
    so = scaledobject_manifest(candidate(Knobs(), Target(MODEL, max_replicas=2**31 - 1), slo_itl_s=0.1,
                                         cold_start_s=150.0, slo_ttft_s=2.0))
    (tmp_path / "so.yaml").write_text(yaml.safe_dump(so))
    with pytest.raises(ValueError, match="maxReplicaCount 2147483647: at most 10,000"):
        build(p.parse_args(["--trace", "azure-code-2023", "--window", "0:60", "--scaledobject",
                            str(tmp_path / "so.yaml")]))


@pytest.mark.parametrize("name", ["spans.csv", "holdout.csv"])
def test_the_hint_follows_the_error_not_words_in_the_file_name(name: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A trace file named `spans.csv` missing a column was told to fix --since, which it never gave."""
    (tmp_path / name).write_text("timestamp,prompt,output_tokens\n0,1,1\n")
    what, said = _one_line(capsys, main(["tune", "--trace", str(tmp_path / name), *FAST]))
    assert "missing column 'prompt_tokens'" in what and "--prompt-column" in said, (what, said)


def test_a_per_minute_file_over_the_limit_is_not_told_about_since(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--since reads Prometheus; a --trace file over the request limit got its hint all the same."""
    (tmp_path / "m.csv").write_text("minute,requests,prompt_tokens,output_tokens\n1795514460,1e12,1,1\n")
    what, said = _one_line(capsys, main(["tune", "--trace", str(tmp_path / "m.csv"), *FAST]))
    assert "at most 100,000,000" in what and "--since" not in said, (what, said)


def test_save_history_is_checked_before_prometheus_is_asked(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from prometheus_server import refused_address

    rc = main(["tune", "--from-prometheus", f"http://{refused_address()}", "--model", "m",
               "--save-history", str(tmp_path / "nowhere" / "h.csv"), *SLO, "--quick", "--quiet"])
    what, said = _one_line(capsys, rc)
    assert "--save-history" in what and "no folder" in what and "mkdir -p" in said, (what, said)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a folder no file can be made in")
def test_an_out_folder_that_takes_no_file_is_refused_before_the_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    """Root passes os.access on any folder; /proc (or a read-only mount) still refuses the file: the sweep ran
    and its result was lost. The probe finds it first."""
    rc = main(["tune", "--trace", "azure-code-2023", *FAST, "--out", "/proc/scaledobject.yaml"])
    what, said = _one_line(capsys, rc)
    assert "--out /proc/scaledobject.yaml" in what and "folder you can write" in said, (what, said)


def test_an_existing_out_file_is_kept_by_the_probe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The write probe makes and removes a file of its own: nothing else appears or goes in the folder."""
    before = tmp_path / "old.yaml"
    before.write_text("kept\n")
    rc = main(["tune", "--trace", "azure-code-2023", *FAST, "--plot", str(tmp_path / "f.txt")])
    assert rc == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.yaml"] and before.read_text() == "kept\n"


@pytest.mark.parametrize(("trace_name", "model"), [
    ("new\nline.csv", MODEL),
    ("carriage\rreturn.csv", MODEL),
    ("line\u2028separator.csv", MODEL),
    (os.fsdecode(b"not-utf8-\xff.csv"), MODEL),
    ("plain.csv", "org/m\u2028x"),
])
def test_the_header_stays_comments_whatever_the_trace_or_model_is_named(trace_name: str, model: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The header's `Command:` line repeats the trace's file name: a name with a line break ended the comment
    there and the rest was read as YAML (kubectl: "expected '<document start>'"); a name that is not UTF-8 was
    a UnicodeEncodeError after the whole sweep. (stderr as the interpreter opens it: its errors escaped.)"""
    import io

    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    monkeypatch.setattr(sys, "stderr", err)
    path = tmp_path / trace_name
    try:
        path.write_text("timestamp,prompt_tokens,output_tokens\n0,100,20\n1,100,20\n")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system does not take that name")
    out = tmp_path / "so.yaml"
    rc = main(["tune", "--trace", str(path), "--model", model, *FAST, "--target", "0.5", "--out", str(out)])
    err.flush()
    assert rc in (0, 1), err.buffer.getvalue()  # type: ignore[attr-defined]
    text = out.read_text()
    head = text.partition("apiVersion:")[0]
    assert head and all(line.startswith("# ") for line in head.splitlines()), head
    doc = yaml.safe_load(text)
    assert doc["kind"] == "ScaledObject" and doc["spec"]["triggers"][0]["metadata"]["model"] == model
    assert "Command: keda-llm tune --trace" in head


def _label_value(query: str) -> str:
    """The `model` matcher's value of an activationQuery, unescaped as PromQL reads a double-quoted string."""
    start = query.index('model="') + len('model=')
    end = start + 1
    while query[end] != '"':
        end += 2 if query[end] == "\\" else 1
    return str(json.loads(query[start:end + 1]))


@pytest.mark.parametrize("model", ['org/m"x', "org\\m", MODEL])
def test_the_activation_query_matches_the_model_whatever_its_name(model: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A served name with a quote or a backslash ended the label matcher early: `{model="org/m"x"}` does not
    parse, and KEDA's activation at zero never fired. The file validates on every supported KEDA too."""
    out = tmp_path / "so.yaml"
    rc = main(["tune", "--trace", "azure-code-2023", "--model", model, *FAST, "--target", "0.5", "--out", str(out)])
    assert rc in (0, 1), capsys.readouterr().err
    doc = yaml.safe_load(out.read_text())
    meta = doc["spec"]["triggers"][0]["metadata"]
    assert meta["model"] == model
    query = meta["activationQuery"]
    assert _label_value(query) == model and query.endswith('"})'), query
    for keda in deploy_validate.KEDA_ORDER:
        assert deploy_validate.keda_errors(doc, keda) == [], keda


def test_ctrl_c_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the sweep was a traceback from wherever the simulation was."""
    import keda_llm.simulator.tune as tune_module

    def interrupted(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_module, "tune", interrupted)
    out = tmp_path / "so.yaml"
    try:
        rc = main(["tune", "--trace", "azure-code-2023", *FAST, "--out", str(out)])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the command as a traceback")
    err = capsys.readouterr().err
    assert rc == 130 and not out.exists()
    assert err.strip().splitlines()[-1].startswith("keda-llm tune: interrupted: nothing written; hint: "), err
    assert "Traceback" not in err


def test_ctrl_c_stops_a_pooled_sweep_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted, the pool's exit waited for every queued candidate to run (a full grid: minutes; with the
    workers' own Ctrl-C tracebacks, it hung); and each worker took the terminal's Ctrl-C itself. Now the
    points not started are cancelled, the workers ended, and only the parent hears Ctrl-C.

    The stand-in for a simulation (inherited by the forked workers) notes that it started and whether its
    process ignores SIGINT; the first candidate returns at once, the others as if they ran a while."""
    import keda_llm.simulator.tune as tune_module
    from keda_llm.simulator.hardware.presets import get_preset
    from keda_llm.simulator.report.summary import Slo
    from keda_llm.simulator.run import Backtest
    from keda_llm.simulator.workload.traces import load_shipped

    grid = tune_module.Grid(itl_fraction=(0.3, 0.4, 0.5, 0.7), kv_utilization=(0.6, 0.8), scale_down_delay=(None,),
                            mode=("hybrid",), min_replicas=(1,), ttft_fraction=(0.5, None))
    first = grid.candidates()[0]

    def stand_in(_trace: Any, _bt: Any, knobs: Any, manifest: dict[str, Any]) -> Any:
        ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        note = tmp_path / f"started-{os.getpid()}-{time.monotonic_ns()}"
        tmp = note.with_name("." + note.name)  # whole or absent when the test reads it (an empty read raced before)
        tmp.write_text(f"{os.getpid()} {ignored}")
        tmp.replace(note)
        if knobs != first:
            deadline = time.monotonic() + 1.0  # a simulation's length; nothing is timed against it
            while time.monotonic() < deadline and not (tmp_path / "never").exists():
                time.sleep(0.02)
        return tune_module.Point(knobs, manifest, 1.0, 1.0, 0, 0.0)

    def progress(_done: int, _total: int) -> None:
        raise KeyboardInterrupt  # as Ctrl-C arrives in the parent while it waits on the pool

    monkeypatch.setattr(tune_module, "run_point", stand_in)
    trace = load_shipped("azure2023-code").window(0, 60)
    bt = Backtest(get_preset("llama-3.1-8b/h100"), cold_start="fast", slo=Slo(2.0, 0.1), mode="detailed")
    with pytest.raises(KeyboardInterrupt):
        tune_module.tune(trace, bt, tune_module.Target(MODEL), grid=grid, workers=2, with_references=False,
                         progress=progress)
    notes = [p.read_text().split() for p in tmp_path.glob("started-*")]
    assert 1 <= len(notes) < len(grid.candidates()), len(notes)  # the queued ones never ran
    assert all(ignored == "True" for _, ignored in notes), notes
    for pid in {int(p) for p, _ in notes}:  # ended and reaped, not left running their point
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_run_still_writes_the_pick_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The checks above leave the ordinary run alone: a written, valid ScaledObject and the exit code."""
    out = tmp_path / "so.yaml"
    rc = main(["tune", "--trace", "azure-code-2023", *FAST, "--target", "0.5", "--out", str(out),
               "--scaler-address", "[fd00::1]:9090", "--max-replicas", "10000", "--name", "n" * 54])
    assert rc == 0, capsys.readouterr().err
    doc = yaml.safe_load(out.read_text())
    assert doc["spec"]["maxReplicaCount"] == 10000 and doc["metadata"]["name"] == "n" * 54
    assert doc["spec"]["triggers"][0]["metadata"]["scalerAddress"] == "[fd00::1]:9090"
    assert deploy_validate.keda_errors(doc, deploy_validate.KEDA_ORDER[-1]) == []
