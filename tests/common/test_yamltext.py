"""Every YAML a user writes is read one way (common/yamltext.py), and every way it can fail is each reader's
own error in one line: PyYAML raises a plain ValueError for a timestamp that is not a date and a
RecursionError for deep nesting, and four of the five readers let them out as tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from keda_llm.activator.config import ConfigError as ActivatorConfigError
from keda_llm.activator.config import load as load_activator
from keda_llm.common.yamltext import YAMLTextError, load, load_all
from keda_llm.exporter.config import ConfigError as ExporterConfigError
from keda_llm.exporter.config import load_config as load_exporter
from keda_llm.scaler.schedule import parse_windows
from keda_llm.simulator.control.scaledobject import ScaledObjectError, parse_scaledobjects
from keda_llm.simulator.hardware.preset_file import PresetFileError, load_preset_file

BAD = {
    "a date that is none": "name: 2024-13-45\n",
    "a day past the month": "when: 2024-02-30 10:00:00\n",
    "nested too deeply": "[" * 20_000,
    "not YAML": "a: [1\n",
    "a Python object": "!!python/object/apply:os.system ['true']\n",
}


@pytest.mark.parametrize("text", list(BAD.values()), ids=list(BAD))
def test_the_one_reading_raises_one_line(text: str) -> None:
    for read in (load, load_all):
        with pytest.raises(YAMLTextError) as err:
            read(text)
        assert str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", list(BAD.values()), ids=list(BAD))
def test_every_reader_of_a_users_yaml_raises_its_own_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "file.yaml"
    path.write_text(text)
    for read, error in ((lambda: load_exporter(path, env={}), ExporterConfigError),
                        (lambda: load_activator(str(path)), ActivatorConfigError),
                        (lambda: parse_scaledobjects(text, str(path)), ScaledObjectError),
                        (lambda: load_preset_file(path), PresetFileError),
                        (lambda: parse_windows(text), ValueError)):
        with pytest.raises(error):
            read()


def test_empty_documents_are_none_or_left_out() -> None:
    assert load("") is None and load_all("---\n---\na: 1\n") == [{"a": 1}]
