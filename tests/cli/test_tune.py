"""`keda-llm tune` end to end: the written ScaledObject is valid on every supported KEDA (and its HPA on every
supported Kubernetes), carries only metadata the scaler's own parser accepts, the plot is drawn, the exit
code says whether the target was met, and bad input is one line with a hint.

The run: the first 10 minutes of azure2023-code, 8B/H100, fast cold start, the 4-candidate `--quick` grid on
2 workers (each candidate about 0.3 CPU s). There every candidate meets the SLO for 66-68% of requests
(tests/simulator/test_tune_sweep.py has the sweep whose pick is checked point by point).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from keda_llm.cli import main
from keda_llm.scaler.config import key_specs, parse_metadata

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
deploy_validate = pytest.importorskip("test_deploy_validate")

RUN = ["tune", "--trace", "azure-code-2023", "--window", "0:600", "--preset", "llama-3.1-8b/h100", "--slo-ttft", "2",
       "--slo-itl", "0.1", "--cold-start", "fast", "--quick", "--workers", "2", "--mode", "detailed", "--quiet",
       "--model", "meta-llama/Llama-3.1-8B-Instruct", "--namespace", "llm", "--name", "llama-8b",
       "--deployment", "vllm-llama-8b"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path, Path]:
    tmp = tmp_path_factory.mktemp("tune")
    out, png = tmp / "so.yaml", tmp / "frontier.png"
    capture = pytest.MonkeyPatch()
    import io

    buf = io.StringIO()
    capture.setattr(sys, "stdout", buf)
    try:
        rc = main([*RUN, "--target", "0.6", "--out", str(out), "--plot", str(png), "--no-oracle"])
    finally:
        capture.undo()
    return rc, buf.getvalue(), out, png


def test_the_run_meets_its_target_and_says_so(written: tuple[int, str, Path, Path]) -> None:
    rc, stdout, out, png = written
    assert rc == 0
    assert "recommended:" in stdout and "frontier:" in stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = yaml.safe_load(out.read_text())
    assert doc["metadata"] == {"name": "llama-8b", "namespace": "llm"}
    assert doc["spec"]["scaleTargetRef"]["name"] == "vllm-llama-8b"
    assert doc["spec"]["triggers"][0]["metadata"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    header = [line for line in out.read_text().splitlines() if line.startswith("# ")]
    assert any("azure2023-code[0s,600s)" in h for h in header)
    assert any("llama-3.1-8b/h100" in h for h in header) and any("TTFT <= 2 s" in h for h in header)


@pytest.mark.parametrize("keda", ["2.17.3", "2.18.0", "newest"])
def test_the_scaledobject_validates_strictly_on_every_supported_keda(written: tuple[int, str, Path, Path],
                                                                      keda: str) -> None:
    assert list(deploy_validate.KEDA_ORDER) == ["2.17.3", "2.18.0", "newest"]  # the docs' list, as this test has it
    doc = yaml.safe_load(written[2].read_text())
    assert deploy_validate.keda_errors(doc, keda) == []


def test_every_candidate_of_the_full_grid_validates_on_every_supported_keda() -> None:
    """The run above writes one pick of the quick grid; any of the full grid's candidates (with --itl-scaling
    busy too, and every Prometheus wiring) may be the one written, so each must be valid on every KEDA the
    docs support, its HPA on the oldest and newest Kubernetes, and its metadata the scaler's. No simulation."""
    from dataclasses import replace as dc_replace

    from keda_llm.simulator.control.manifest import scaledobject_manifest
    from keda_llm.simulator.tune import FULL_GRID, Target, candidate

    grid = dc_replace(FULL_GRID, itl_scaling=("proportional", "busy"))
    targets = (Target("meta-llama/Llama-3.1-8B-Instruct", name="llama-8b", namespace="llm", deployment="vllm-llama-8b",
                      max_replicas=8, prometheus_address="http://prometheus-operated.monitoring.svc:9090"),
               Target("llama-3.1-70b", max_replicas=64))
    seen = 0
    for target in targets:
        for knobs in grid.candidates():
            doc = scaledobject_manifest(candidate(knobs, target, slo_itl_s=0.1, cold_start_s=206.3, slo_ttft_s=2.0))
            for keda in deploy_validate.KEDA_ORDER:
                assert deploy_validate.keda_errors(doc, keda) == [], (keda, knobs)
            hpa = deploy_validate.hpa_of(doc)
            for version in (deploy_validate.K8S_VERSIONS[0], deploy_validate.K8S_VERSIONS[-1]):
                assert deploy_validate.k8s_errors(hpa, version) == [], (version, knobs)
            parse_metadata(doc["spec"]["triggers"][0]["metadata"])
            seen += 1
    assert seen == 2 * 2 * len(FULL_GRID.candidates()) == 1440


def test_the_hpa_it_makes_validates_on_the_oldest_and_newest_kubernetes(written: tuple[int, str, Path, Path]) -> None:
    doc = yaml.safe_load(written[2].read_text())
    for version in (deploy_validate.K8S_VERSIONS[0], deploy_validate.K8S_VERSIONS[-1]):
        assert deploy_validate.k8s_errors(deploy_validate.hpa_of(doc), version) == [], version


def test_its_metadata_is_what_the_scaler_accepts(written: tuple[int, str, Path, Path]) -> None:
    doc = yaml.safe_load(written[2].read_text())
    (trigger,) = doc["spec"]["triggers"]
    assert trigger["type"] == "external-push"
    meta = trigger["metadata"]
    assert all(isinstance(v, str) for v in meta.values())  # KEDA's metadata is a map of strings
    cfg = parse_metadata(meta)  # the real parser: raises on an unknown key or a bad value
    assert cfg.model == "meta-llama/Llama-3.1-8B-Instruct"
    known = {spec.key for _, spec, _ in key_specs()} | {"scalerAddress"}
    assert set(meta) <= known


@pytest.mark.parametrize(("argv", "message", "hint"), [
    (["--trace", "no-such-file.csv"], "unknown trace", "shipped trace"),
    (["--trace", "{csv_bad_column}"], "missing column 'prompt_tokens'", "--prompt-column"),
    (["--trace", "{csv_empty}"], "no requests", "at least one request"),
    (["--trace", "azure-code-2023", "--window", "100000:100060"], "no request arrives", "at least one request"),
    (["--trace", "azure-code-2023", "--preset", "llama-9b/tpu"], "unknown preset", "presets: llama-3.1-70b"),
    ([], "give --trace or --from-prometheus", "--trace NAME|FILE"),
    (["--trace", "azure-code-2023", "--target", "99"], "--target 99", "0.99"),
    (["--trace", "azure-code-2023", "--seeds", "0"], "--seeds 0: must be >= 1", "e.g. --seeds 1"),
    (["--trace", "azure-code-2023", "--phases", "0"], "--phases 0: must be >= 1", "e.g. --phases 1"),
    (["--trace", "azure-code-2023", "--phases", "61"], "--phases 61: at most 60", "e.g. --phases 6"),
    (["--trace", "azure-code-2023", "--max-replicas", "0"], "--max-replicas 0: must be >= 1", "e.g. --max-replicas 1"),
    (["--trace", "azure-code-2023", "--holdout", "2h"], "shorter than the trace", "--holdout"),
    (["--trace", "azure-code-2023", "--holdout", "30s"], "at least 60 s", "at least a minute"),
    (["--trace", "azure-code-2023", "--holdout", "soon"], "is not a span", "--holdout takes"),
    (["--trace", "azure-code-2023", "--holdout", "0s"], "the span must be > 0", "--holdout takes"),
    (["--trace", "azure-code-2023", "--window", "3000:3400", "--holdout", "5m", "--lead-in", "0"],
     "no request arrives in the part before it", "--holdout takes"),
    (["--from-prometheus", "http://127.0.0.1:9", "--model", "m", "--since", "soon"], "is not a span", "--since"),
    (["--from-prometheus", "http://127.0.0.1:9"], "needs --model", "served model name"),
    (["--from-prometheus", "{refused}", "--model", "m"], "Prometheus at", "check the URL"),
    # found by a review as a new user would run it (2026-11-30)
    (["--trace", "{csv_epoch_ms}"], "after the year 5000", "--time-unit"),
    (["--trace", "{csv_unsorted}"], "timestamps not sorted", "--sort"),
    (["--trace", "{csv_huge_tokens}"], "tokens in one request", "--help lists the flags"),
    (["--trace", "{a_directory}"], "a directory", "--trace takes a file"),
    (["--trace", "{corrupt_gz}"], "cannot read it", "--trace takes a file"),
    (["--trace", "{minutes_without_requests}"], "no requests in any minute", "at least one request"),
    (["--trace", "azure-code-2023", "--out", "{missing_folder}/so.yaml"], "no folder", "mkdir -p"),
    (["--trace", "azure-code-2023", "--plot", "{a_directory}"], "a directory", "takes a file name"),
    (["--trace", "azure-code-2023", "--seed", "-1"], "--seed -1", "from 0"),
    # found by a second review as a new user would run it (2026-11-30, later)
    (["--trace", "azure-code-2023", "--prometheus-address", "prometheus.monitoring:9090"],
     "not an http:// or https:// URL", "http://prometheus.monitoring:9090"),
    (["--trace", "azure-code-2023", "--plot", "{tmp}/plot.txt"], ".txt is not an image format", ".png"),
    (["--trace", "azure-code-2023", "--plot", "{tmp}/frontier"], "no image suffix", ".png"),
    (["--trace", "{minutes_ms}"], "is not Unix seconds", "Unix seconds or ISO 8601"),
    (["--trace", "azure-code-2023", "--rate-scale", "1e6"], "is more than 100,000,000", "--help"),
    (["--trace", "azure-code-2023", "--stretch", "1e300"], "days; at most 400", "--help"),
    (["--trace", "azure-code-2023", "--stretch", "inf"], "must be finite", "--help"),
    (["--trace", "azure-code-2023", "--name", "My_SO"], "not a Kubernetes name", "--name my-so"),
    (["--trace", "azure-code-2023", "--namespace", "LLM"], "not a Kubernetes name", "--namespace llm"),
    (["--trace", "azure-code-2023", "--deployment", "a/b"], "not a Kubernetes name", "--deployment a-b"),
    (["--trace", "azure-code-2023", "--save-history", "{tmp}/h.csv"], "needs --from-prometheus", "drop it"),
    (["--trace", "azure-code-2023", "--since", "3d"], "needs --from-prometheus", "drop it"),
    (["--trace", "{minutes_named_time}", "--format", "minutes"], "a per-minute history needs",
     "add or rename the one named"),
    # found by a third review as a new user would run it (2026-12-03)
    (["--trace", "{minutes_no_tokens}"], "requests but no tokens in any minute", "llm_prompt_tokens_total"),
    (["--trace", "{minutes_no_output_column}"], "missing column 'output_tokens'", "add or rename the one named"),
    (["--trace", "{csv_nan_tokens}"], "not a whole number of tokens", "finite numbers >= 0"),
    (["--trace", "{minutes_repeated}"], "minutes not rising", "one row a minute"),
    (["--trace", "{minutes_named_time}".replace("named_time", "ok"), "--sort"], "--sort sorts request rows",
     "--help"),
    (["--trace", "{csv_ok}", "--hash-column", "hash_ids"], "--hash-column reads a JSONL field", "--help"),
])
def test_bad_input_is_one_line_with_a_hint(argv: list[str], message: str, hint: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from prometheus_server import refused_address

    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,prompt,output_tokens\n0,1,1\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("timestamp,prompt_tokens,output_tokens\n")
    (tmp_path / "ms.csv").write_text("timestamp,prompt_tokens,output_tokens\n1795514400173,10,5\n")
    (tmp_path / "unsorted.csv").write_text("timestamp,prompt_tokens,output_tokens\n5,10,5\n2,10,5\n")
    (tmp_path / "huge.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,100000000000,5\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "corrupt.csv.gz").write_bytes(b"\x1f\x8b\x08\x00not gzip at all")
    (tmp_path / "zero.csv").write_text("minute,requests,prompt_tokens,output_tokens\n2026-11-24T10:00:00Z,0,0,0\n")
    (tmp_path / "min_ms.csv").write_text("minute,requests,prompt_tokens,output_tokens\n1795514460000,118,127735,330\n")
    (tmp_path / "min_time.csv").write_text("time,requests,prompt_tokens,output_tokens\n1795514460,118,127735,330\n")
    (tmp_path / "min_ok.csv").write_text("minute,requests,prompt_tokens,output_tokens\n1795514460,118,127735,330\n")
    (tmp_path / "ok.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,10,5\n")
    (tmp_path / "min_notok.csv").write_text("minute,requests,prompt_tokens,output_tokens\n0,10,0,0\n60,12,0,0\n")
    (tmp_path / "min_noout.csv").write_text("minute,requests,prompt_tokens\n0,10,1000\n")
    (tmp_path / "nan.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,10,5\n1,NaN,5\n")
    (tmp_path / "min_rep.csv").write_text("minute,requests,prompt_tokens,output_tokens\n0,1,10,5\n0,1,10,5\n")
    subs = {"{csv_bad_column}": str(bad), "{csv_empty}": str(empty), "{refused}": f"http://{refused_address()}",
            "{csv_epoch_ms}": str(tmp_path / "ms.csv"), "{csv_unsorted}": str(tmp_path / "unsorted.csv"),
            "{csv_huge_tokens}": str(tmp_path / "huge.csv"), "{a_directory}": str(tmp_path / "adir"),
            "{corrupt_gz}": str(tmp_path / "corrupt.csv.gz"), "{minutes_without_requests}": str(tmp_path / "zero.csv"),
            "{minutes_ms}": str(tmp_path / "min_ms.csv"), "{minutes_named_time}": str(tmp_path / "min_time.csv"),
            "{minutes_ok}": str(tmp_path / "min_ok.csv"), "{csv_ok}": str(tmp_path / "ok.csv"),
            "{minutes_no_tokens}": str(tmp_path / "min_notok.csv"),
            "{minutes_no_output_column}": str(tmp_path / "min_noout.csv"),
            "{csv_nan_tokens}": str(tmp_path / "nan.csv"), "{minutes_repeated}": str(tmp_path / "min_rep.csv")}
    argv = [subs.get(a, a).replace("{missing_folder}", str(tmp_path / "nowhere")).replace("{tmp}", str(tmp_path))
            for a in argv]
    rc = main(["tune", *argv, "--slo-ttft", "2", "--slo-itl", "0.1", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("keda-llm tune: error: "), lines[0]
    what, _, said = lines[0].partition("; hint: ")
    assert message in what and hint in said, lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("slo", [["--slo-ttft", "7201", "--slo-itl", "0.1"], ["--slo-ttft", "inf", "--slo-itl", "0.1"],
                                 ["--slo-ttft", "2", "--slo-itl", "1e-9"], ["--slo-ttft", "nan", "--slo-itl", "0.1"],
                                 ["--slo-ttft", "0", "--slo-itl", "0.1"]])
def test_an_slo_no_scaledobject_can_carry_is_refused_before_the_sweep(slo: list[str],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["tune", "--trace", "azure-code-2023", *slo, "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "the TTFT SLO must be" in err and "hint: e.g. --slo-ttft 2" in err


def test_printed_yaml_is_alone_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --out the ScaledObject goes to stdout alone (`> so.yaml`, `| kubectl apply -f -`), the frontier
    and the verdict to stderr."""
    rc = main([*RUN, "--target", "0.6", "--no-oracle"])
    out, err = capsys.readouterr()
    assert rc == 0
    doc = yaml.safe_load(out)
    assert doc["kind"] == "ScaledObject" and "frontier:" not in out
    assert "frontier:" in err and "recommended:" in err


def test_a_short_trace_is_tuned_with_a_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main([*RUN, "--window", "0:120", "--target", "0.5", "--no-oracle", "--out", str(tmp_path / "so.yaml")])
    err = capsys.readouterr().err
    assert rc in (0, 1)
    assert "warning: " in err and "says little" in err


def test_the_header_command_reads_the_trace_as_it_was_read() -> None:
    import argparse

    from keda_llm.simulator.tune_cli import _command, add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--trace", "my.csv", "--sort", "--time-unit", "ms", "--time-column", "ts",
                         "--stretch", "2", "--rate-scale", "0.5", "--lead-in", "600", "--slo-ttft", "2",
                         "--slo-itl", "0.1"])
    cmd = _command(args)
    assert "--phases" not in cmd and "--seeds" not in cmd  # at their defaults: left out
    many = ["--trace", "my.csv", "--slo-ttft", "2", "--slo-itl", "0.1", "--seeds", "3", "--phases", "6"]
    assert "--seeds 3 --phases 6" in _command(p.parse_args(many))
    for part in ("--sort", "--time-unit ms", "--time-column ts", "--stretch 2", "--rate-scale 0.5", "--lead-in 600"):
        assert part in cmd, cmd
    # history from Prometheus: the span's end is written as a time, so the command reads the same span later
    args = p.parse_args(["--from-prometheus", "http://p:9090", "--model", "m", "--slo-ttft", "2", "--slo-itl", "0.1"])
    args.until_resolved = 1795514400.0
    assert "--since 7d --until 2026-11-24T10:00:00Z" in _command(args)


def test_without_the_sim_extra_it_names_the_extra() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packaging"))
    from test_extras import _run  # the [sim] extra hidden from a child process, as for `simulate`

    code, err = _run("tune", "--trace", "azure-code-2023", "--window", "0:60", "--slo-ttft", "2", "--slo-itl", "0.1",
                     "--quick")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "pip install -e '.[sim]'" in lines[0], err


def test_a_cluster_of_fewer_than_three_replicas_is_swept_without_min_replicas_it_cannot_hold() -> None:
    """`--max-replicas 2` crashed the full grid: its minReplicaCount 3 is not a ScaledObject KEDA takes."""
    import argparse

    from keda_llm.simulator.tune_cli import add_arguments, build

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--trace", "azure-code-2023", "--window", "0:600", "--max-replicas", "2",
                         "--slo-ttft", "2", "--slo-itl", "0.1"])
    _, _, target, grid, _ = build(args)
    assert target.max_replicas == 2 and grid.min_replicas == (1, 2)
    assert all(k.min_replicas <= 2 for k in grid.candidates())


def test_trace_files_as_spreadsheets_and_gateways_export_them(tmp_path: Path) -> None:
    """A byte-order mark before a `#` comment line (spreadsheet exports), CRLF line ends, and a gzip file named
    `.GZ` (or with no suffix) read like the plain file."""
    import gzip

    from keda_llm.simulator.workload.traces import is_minutes_csv, load_csv, load_jsonl, load_minutes_csv

    rows = "timestamp,prompt_tokens,output_tokens\r\n0,10,5\r\n1.5,20,6\r\n"
    (tmp_path / "bom.csv").write_bytes("\ufeff# exported from the gateway\r\n".encode() + rows.encode())
    plain = load_csv(tmp_path / "bom.csv", "timestamp", "prompt_tokens", "output_tokens")
    assert plain.prompt_tokens.tolist() == [10, 20]
    for name in ("UPPER.CSV.GZ", "nosuffix"):
        (tmp_path / name).write_bytes(gzip.compress(rows.encode()))
        got = load_csv(tmp_path / name, "timestamp", "prompt_tokens", "output_tokens")
        assert got.prompt_tokens.tolist() == [10, 20]
    (tmp_path / "bom.jsonl").write_bytes('\ufeff{"timestamp": 0, "prompt_tokens": 3, "output_tokens": 1}\n'.encode())
    jsonl = load_jsonl(tmp_path / "bom.jsonl", "timestamp", "prompt_tokens", "output_tokens")
    assert jsonl.prompt_tokens.tolist() == [3]
    minutes = "\ufeff# from Prometheus\nminute,requests,prompt_tokens,output_tokens\n1795514460,3,300,30\n"
    (tmp_path / "min.csv").write_bytes(minutes.encode())
    assert is_minutes_csv(tmp_path / "min.csv")
    assert len(load_minutes_csv(tmp_path / "min.csv")) == 3
