"""The per-minute input (traces.load_minutes_csv) and the one synthesis it shares with the Azure 2024 trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keda_llm.simulator.workload.traces import TraceError, is_minutes_csv, load_azure_2024_minutes, load_minutes_csv


def _write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_2024_is_unchanged_by_the_shared_synthesis() -> None:
    """Values recorded from the loader before synthesize_minutes was split out of it (seed 0, first 30 minutes)."""
    t = load_azure_2024_minutes("code", minutes=30)
    assert len(t) == 41049
    assert t.prompt_tokens[:5].tolist() == [488, 5697, 978, 968, 752]
    assert np.allclose(t.arrival_s[:3], [0.0114001, 0.01330198, 0.01804141])


def test_minutes_become_requests_inside_their_minute_with_the_minute_mean_tokens(tmp_path: Path) -> None:
    p = _write(tmp_path, "# my model, exported\nminute,requests,prompt_tokens,output_tokens\n"
                         "2026-11-24T10:00:00Z,3,3000,600\n"
                         "2026-11-24T10:01:00Z,2,400,40\n"
                         "2026-11-24T10:03:00Z,1,7,9\n")  # 10:02 missing: a minute without requests
    assert is_minutes_csv(p)
    t = load_minutes_csv(p, token_sigma=0)
    assert len(t) == 6
    minute = (t.arrival_s // 60).astype(int).tolist()
    assert minute == [0, 0, 0, 1, 1, 3]
    assert t.prompt_tokens.tolist() == [1000, 1000, 1000, 200, 200, 7]
    assert t.output_tokens.tolist() == [200, 200, 200, 20, 20, 9]


def test_unix_seconds_and_fractional_counts(tmp_path: Path) -> None:
    """A rate x 60 is fractional: over many minutes the whole parts plus the fractions' draws add up."""
    rows = "".join(f"{1_700_000_040 + 60 * i},2.5,250,50\n" for i in range(400))
    t = load_minutes_csv(_write(tmp_path, "minute,requests,prompt_tokens,output_tokens\n" + rows), token_sigma=0)
    counts = np.bincount((t.arrival_s // 60).astype(int), minlength=400)
    assert set(counts.tolist()) == {2, 3}
    assert abs(len(t) - 1000) < 60  # 400 x 2.5, binomial spread sd 10
    assert set(t.prompt_tokens.tolist()) == {83, 125}  # 250 / 3 or / 2 per request, rounded


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty file"),
    ("minute,requests,prompt_tokens,output_tokens\n", "no minutes"),
    ("minute,requests,prompt\n0,1,2\n", "missing column 'prompt_tokens'"),
    ("minute,requests,prompt_tokens,output_tokens\n60,1,1,1\n0,1,1,1\n", "line 3, column minute: minutes not rising"),
    ("minute,requests,prompt_tokens,output_tokens\n0,1,1,1\n90,1,1,1\n", "not a whole number of minutes"),
    ("minute,requests,prompt_tokens,output_tokens\n0,-1,1,1\n", "line 2, column requests: not a finite number >= 0"),
    ("minute,requests,prompt_tokens,output_tokens\n0,1,x,1\n", "column prompt_tokens: not a number"),
    ("minute,requests,prompt_tokens,output_tokens\nyesterday,1,1,1\n", "not a date-time"),
    ("minute,requests,prompt_tokens,output_tokens\n0,1,1\n", "line 2: 3 fields, header has 4"),
])
def test_bad_minutes_files_name_the_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_minutes_csv(_write(tmp_path, text))


def test_a_minutes_header_reads_whatever_its_case(tmp_path: Path) -> None:
    p = _write(tmp_path, "Minute,Requests,Prompt_Tokens,OUTPUT_TOKENS\n2026-11-24T10:00:00Z,2,400,40\n")
    assert is_minutes_csv(p)
    assert load_minutes_csv(p, token_sigma=0).prompt_tokens.tolist() == [200, 200]
    two = _write(tmp_path, "minute,Requests,REQUESTS,prompt_tokens,output_tokens\n0,1,2,3,4\n")
    with pytest.raises(TraceError, match="'Requests', 'REQUESTS' all match 'requests' apart from case"):
        load_minutes_csv(two)


def test_a_request_csv_is_not_taken_for_minutes(tmp_path: Path) -> None:
    assert not is_minutes_csv(_write(tmp_path, "timestamp,prompt_tokens,output_tokens\n0,1,1\n"))


def test_simulate_reads_a_minutes_file_by_its_header_or_by_format(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`--format auto` knows a per-minute history by its header; `--format csv` reads it as requests and says
    which column is missing."""
    from keda_llm.cli import main

    p = _write(tmp_path, "minute,requests,prompt_tokens,output_tokens\n0,2,200,20\n60,1,100,10\n")
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(p), "--policies", "static", "--mode", "detailed", "--quiet",
                 "--out", str(out)]) == 0
    import json

    assert json.loads((out / "config.json").read_text())["requests"] == 3
    capsys.readouterr()
    assert main(["simulate", "--trace", str(p), "--format", "csv", "--policies", "static", "--quiet"]) == 2
    assert "missing column 'timestamp'" in capsys.readouterr().err
