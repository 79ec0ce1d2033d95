"""The README stays true to the code: the generated metadata table, the metric names, the test command."""

from __future__ import annotations

import re
from pathlib import Path

from keda_llm.common.vocabulary import ENGINE_METRICS, GPU_METRICS
from keda_llm.scaler.config import render_reference

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_metadata_reference_is_the_generated_one() -> None:
    m = re.search(r"<!-- generated:metadata-reference -->\n(.*?)<!-- /generated:metadata-reference -->", README, re.S)
    assert m is not None, "README lost its generated metadata table markers"
    assert m.group(1).strip() == render_reference().strip(), \
        "run `python -m keda_llm.scaler.config` and paste its table"


def test_every_exported_metric_is_documented() -> None:
    for metric in ENGINE_METRICS + GPU_METRICS:
        assert f"`{metric.name}`" in README or metric.name in README, metric.name


def test_ci_runs_the_readme_test_command() -> None:
    first_screen = README.split("## ", 1)[0]
    commands = re.findall(r"^(python3 -m venv .*)$", first_screen, re.M)
    assert len(commands) == 2, commands
    test_cmd = commands[1].split("&& ", 2)[-1]  # after the venv set-up
    assert (ROOT / ".ci" / "run").read_text().count(test_cmd) == 1, test_cmd


def test_readme_scaledobject_examples_are_valid() -> None:
    """Every ScaledObject the README shows passes KEDA's CRD and the scaler's own metadata parser."""
    from keda_llm.scaler.config import parse_metadata
    from keda_llm.simulator.control.scaledobject import parse_scaledobjects

    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if "kind: ScaledObject" in b]
    assert blocks, "the README lost its worked ScaledObject example"
    for block in blocks:
        for settings in parse_scaledobjects(block, "README.md"):
            for trigger in settings.triggers:
                parse_metadata(trigger.metadata)


def test_the_exporter_config_block_parses_as_written() -> None:
    """The README's commented exporter config, exactly as shown: every key, the empty defaults included."""
    import yaml

    from keda_llm.exporter.config import parse_config

    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if b.startswith("listen:")]
    assert len(blocks) == 1, "the README lost its exporter config block"
    cfg = parse_config(yaml.safe_load(blocks[0]), {"NODE_NAME": "gpu-node-1"})
    (target,) = cfg.targets
    assert target.engine is None and target.pod == "10.0.0.7:8000" and target.model == "llama-3-8b"


def test_the_simulate_example_runs_as_written(tmp_path: Path) -> None:
    """The console block under the simulator section, run from a folder holding the repository's deploy/."""
    import shlex
    import subprocess
    import sys

    (block,) = re.findall(r"```console\n\$ (keda-llm simulate .*?)```", README, re.S)
    argv = shlex.split(block.replace("\\\n", " "))
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")
    proc = subprocess.run([sys.executable, "-m", "keda_llm.cli", *argv[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "results" / "results.json").is_file() and (tmp_path / "results" / "replicas.png").is_file()
