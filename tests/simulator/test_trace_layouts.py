"""A user's copy of a public trace reads without naming its columns: the Azure traces, BurstGPT, Mooncake,
a gateway's OpenAI `usage` log (flat or as the API nests it), the OpenAI Batch output and LiteLLM's spend
logs, each in its publisher's own column names and time unit, whatever the case of the names."""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
from fuzzing import mutate_text

from keda_llm.simulator.cli import SpanError, add_trace_arguments, load_trace
from keda_llm.simulator.workload.traces import DATA, TraceError, load_shipped


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_trace_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([*argv, "--lead-in", "0"])


def test_the_full_azure_trace_reads_as_the_shipped_one(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv.gz"
    got = load_trace(_args("--trace", str(path)))
    want = load_shipped("azure2023-code")
    assert np.array_equal(got.arrival_s, want.arrival_s)
    assert np.array_equal(got.prompt_tokens, want.prompt_tokens)
    assert np.array_equal(got.output_tokens, want.output_tokens)
    assert "the Azure LLM inference trace's columns: TIMESTAMP (date-time)" in capsys.readouterr().err


def test_burstgpt_csv_in_its_own_columns(tmp_path: Path) -> None:
    f = tmp_path / "BurstGPT_1.csv"
    f.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "45,ChatGPT,1087,0,1087,Conversation log\n"
                 "118,GPT-4,417,276,693,API log\n")
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 40.0, 113.0]
    assert tr.prompt_tokens.tolist() == [472, 1087, 417] and tr.output_tokens.tolist() == [18, 0, 276]


def test_mooncake_jsonl_reads_milliseconds_and_its_block_hashes(tmp_path: Path) -> None:
    f = tmp_path / "toolagent_trace.jsonl.gz"
    rows = [{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]},
            {"timestamp": 3000, "input_length": 1200, "output_length": 12, "hash_ids": [0, 2, 3]}]
    with gzip.open(f, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 3.0]
    assert tr.prompt_tokens.tolist() == [6758, 1200]
    assert tr.hash_offsets is not None and tr.hash_values is not None
    assert tr.hash_offsets.tolist() == [0, 2, 5] and tr.hash_values.tolist() == [0, 1, 0, 2, 3]


def test_a_gateway_log_with_openai_usage_names(tmp_path: Path) -> None:
    f = tmp_path / "gateway.jsonl"
    f.write_text('{"created": 1764500000, "prompt_tokens": 30, "completion_tokens": 7, "model": "m"}\n'
                 '{"created": 1764500002, "prompt_tokens": 40, "completion_tokens": 9, "model": "m"}\n')
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 2.0] and tr.output_tokens.tolist() == [7, 9]


def test_openai_answers_with_usage_nested_as_the_api_returns_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "answers.jsonl"
    rows = [{"id": "chatcmpl-1", "object": "chat.completion", "created": 1764500000, "model": "m",
             "choices": [{"index": 0, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}},
            {"id": "chatcmpl-2", "object": "chat.completion", "created": 1764500003, "model": "m",
             "choices": [], "usage": {"prompt_tokens": 41, "completion_tokens": 0, "total_tokens": 41}}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 3.0]
    assert tr.prompt_tokens.tolist() == [30, 41] and tr.output_tokens.tolist() == [7, 0]
    assert "created (s), usage.prompt_tokens, usage.completion_tokens" in capsys.readouterr().err
    named = load_trace(_args("--trace", str(f), "--time-column", "created", "--prompt-column", "usage.total_tokens",
                             "--output-column", "usage.completion_tokens"))  # a flag names a nested field
    assert named.prompt_tokens.tolist() == [37, 41]
    # a line whose answer carries no usage (a failed call) is named, not read as zero tokens
    f.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"created": 1764500009, "error": {"message": "x"}}) + "\n")
    with pytest.raises(TraceError, match=r"line 2: missing field 'usage.prompt_tokens'"):
        load_trace(_args("--trace", str(f)))


def test_the_openai_batch_output_reads_each_answer_under_its_response_body(tmp_path: Path) -> None:
    f = tmp_path / "batch_output.jsonl"
    rows = [{"id": f"batch_req_{i}", "custom_id": f"r{i}", "error": None,
             "response": {"status_code": 200, "request_id": "x",
                          "body": {"object": "chat.completion", "created": 1764500000 + 5 * i,
                                   "usage": {"prompt_tokens": 100 + i, "completion_tokens": 10 * i}}}}
            for i in range(3)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 5.0, 10.0]
    assert tr.prompt_tokens.tolist() == [100, 101, 102] and tr.output_tokens.tolist() == [0, 10, 20]


def test_litellm_spend_logs_exported_from_its_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "spend_logs.csv"  # as psql's \copy writes LiteLLM_SpendLogs: a zone on each time
    f.write_text('request_id,call_type,spend,total_tokens,prompt_tokens,completion_tokens,"startTime","endTime",model\n'
                 "a,acompletion,0.1,130,100,30,2026-11-24 10:00:00.250+00,2026-11-24 10:00:02+00,m\n"
                 "b,acompletion,0.1,60,50,10,2026-11-24 11:00:01.250+01,2026-11-24 11:00:03+01,m\n")
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 1.0]  # 11:00 at +01 is 10:00 UTC
    assert tr.prompt_tokens.tolist() == [100, 50] and tr.output_tokens.tolist() == [30, 10]
    assert "the LiteLLM spend log's columns: startTime (date-time)" in capsys.readouterr().err


def test_names_read_whatever_their_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "upper.csv"  # the default names as a spreadsheet capitalised them
    f.write_text("Timestamp,Prompt_Tokens,OUTPUT_TOKENS\n0,1,2\n4,3,5\n")
    tr = load_trace(_args("--trace", str(f)))
    assert tr.arrival_s.tolist() == [0.0, 4.0] and tr.output_tokens.tolist() == [2, 5]
    g = tmp_path / "azure.csv"  # a public layout in other case
    g.write_text("timestamp,contexttokens,generatedtokens\n2023-11-16 18:17:03.0,100,200\n"
                 "2023-11-16 18:17:04.5,300,400\n")
    assert load_trace(_args("--trace", str(g))).arrival_s.tolist() == [0.0, 1.5]
    assert "TIMESTAMP" not in capsys.readouterr().err.replace("timestamp", "")  # the file's own spelling is said
    two = tmp_path / "two.csv"  # two columns that differ only in case: which is meant is not guessed, but said
    two.write_text("timestamp,prompt_tokens,Output_Tokens,output_tokens2,OUTPUT_TOKENS\n0,1,2,3,4\n")
    with pytest.raises(TraceError, match="'Output_Tokens', 'OUTPUT_TOKENS' all match 'output_tokens' apart from "
                                         "case: --output-column names the one to read"):
        load_trace(_args("--trace", str(two)))
    assert load_trace(_args("--trace", str(two), "--output-column", "OUTPUT_TOKENS")).output_tokens.tolist() == [4]
    # one column named by its flag: the others' default names still match case aside
    h = tmp_path / "named.csv"
    h.write_text("Timestamp,Prompt_Tokens,Out\n0,1,2\n4,3,5\n")
    assert load_trace(_args("--trace", str(h), "--output-column", "Out")).prompt_tokens.tolist() == [1, 3]


def test_an_exact_layout_wins_over_an_earlier_one_matched_apart_from_case(tmp_path: Path) -> None:
    # BurstGPT's `Timestamp` (seconds) is tried before OpenAI's `created`; here `Timestamp` is a date-time and
    # the file is in OpenAI's usage names exactly (found by a review: it was read as BurstGPT's, and refused)
    f = tmp_path / "gw.csv"
    f.write_text("Timestamp,created,prompt_tokens,completion_tokens\n"
                 "2026-11-24T10:00:00Z,1764500000,3,4\n2026-11-24T10:00:02Z,1764500002,5,6\n")
    assert load_trace(_args("--trace", str(f))).arrival_s.tolist() == [0.0, 2.0]


def test_a_layout_is_found_past_a_failed_first_call_and_past_a_wide_object(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    ok = {"created": 1764500001, "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    f = tmp_path / "first_failed.jsonl"
    f.write_text(json.dumps({"created": 1764500000, "error": {"message": "rate limited"}}) + "\n"
                 + json.dumps(ok) + "\n")
    with pytest.raises(TraceError, match=r"line 1: missing field 'usage.prompt_tokens'$"):  # found, then refused
        load_trace(_args("--trace", str(f)))
    assert "usage.prompt_tokens" in capsys.readouterr().err
    later = tmp_path / "later_failed.jsonl"
    later.write_text(json.dumps(ok) + "\n" + json.dumps({"created": 1764500009, "error": None}) + "\n")
    with pytest.raises(TraceError, match=r"line 2: missing field 'usage.prompt_tokens' \(the lines before have it\)"):
        load_trace(_args("--trace", str(later)))
    wide = tmp_path / "wide.jsonl"  # a metadata object of 2,000 keys before `usage`: past file_fields' listing
    wide.write_text(json.dumps({"created": 1764500000, "metadata": {f"k{i}": i for i in range(2000)},
                                "usage": {"prompt_tokens": 7, "completion_tokens": 2}}) + "\n")
    assert load_trace(_args("--trace", str(wide))).prompt_tokens.tolist() == [7]


def test_flags_win_over_a_layout_and_the_default_names_win_over_both(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "both.csv"  # the default names and Azure's, with different values
    f.write_text("timestamp,prompt_tokens,output_tokens,TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "0,1,2,2023-11-16 18:17:03.0,100,200\n10,3,4,2023-11-16 18:17:05.0,300,400\n")
    assert load_trace(_args("--trace", str(f))).prompt_tokens.tolist() == [1, 3]
    assert capsys.readouterr().err == ""  # nothing guessed
    got = load_trace(_args("--trace", str(f), "--time-column", "TIMESTAMP", "--time-unit", "datetime",
                           "--prompt-column", "ContextTokens", "--output-column", "GeneratedTokens"))
    assert got.arrival_s.tolist() == [0.0, 2.0] and got.prompt_tokens.tolist() == [100, 300]
    partial = tmp_path / "azure.csv"
    partial.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,100,200\n")
    with pytest.raises(TraceError, match="missing column 'timestamp'"):  # a column named: no guessing
        load_trace(_args("--trace", str(partial), "--time-column", "timestamp"))


def test_a_time_unit_given_overrides_the_layouts_and_keeps_its_columns(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a review: `--time-unit s` typed on a Mooncake-shaped file was read as the layout's ms, because a
    flag given at its default value could not be told from no flag."""
    f = tmp_path / "mc.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                 '{"timestamp": 30, "input_length": 10, "output_length": 5}\n')
    assert load_trace(_args("--trace", str(f))).arrival_s.tolist() == [0.0, 0.03]
    assert load_trace(_args("--trace", str(f), "--time-unit", "s")).arrival_s.tolist() == [0.0, 30.0]
    assert "timestamp (s, as --time-unit says)" in capsys.readouterr().err


def test_a_file_in_no_known_layout_still_names_the_missing_column(tmp_path: Path) -> None:
    f = tmp_path / "odd.csv"
    f.write_text("when,in,out\n0,1,2\n")
    with pytest.raises(TraceError, match="missing column 'timestamp'"):
        load_trace(_args("--trace", str(f)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TraceError):
        load_trace(_args("--trace", str(empty)))


def test_fuzz_files_in_a_public_layout_give_a_trace_or_a_trace_error(tmp_path: Path) -> None:
    bodies = {".csv": ["TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
                       "2023-11-16 18:17:04.0319600,3180,8\n",
                       "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                       "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n"],
              ".jsonl": ['{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}\n'
                         '{"timestamp": 3000, "input_length": 12, "output_length": 2, "hash_ids": [2]}\n',
                         '{"created": 1764500000, "prompt_tokens": 30, "completion_tokens": 7}\n',
                         '{"created": 1764500000, "usage": {"prompt_tokens": 30, "completion_tokens": 7}}\n'
                         '{"created": 1764500001, "usage": {"prompt_tokens": 9, "completion_tokens": 1}}\n',
                         '{"response": {"body": {"created": 1764500000, "usage": {"prompt_tokens": 3, '
                         '"completion_tokens": 1}}}}\n']}
    rng = random.Random(20261130)
    outcomes = {"trace": 0, "error": 0}
    for n in range(3000):
        suffix = rng.choice(list(bodies))
        path = tmp_path / f"t{n}{suffix}"
        path.write_text(mutate_text(rng, rng.choice(bodies[suffix])), encoding="utf-8", errors="surrogatepass")
        try:
            load_trace(_args("--trace", str(path)))
            outcomes["trace"] += 1
        except TraceError as err:
            assert str(path) in str(err) or "no request" in str(err) or isinstance(err, SpanError)
            outcomes["error"] += 1
    assert outcomes["trace"] > 100 and outcomes["error"] > 1000  # the mutations reach both paths
