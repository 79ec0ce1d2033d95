"""The images the manifests run, against deploy/Dockerfile and the docs: one image per part, named for its
Dockerfile target and the project's version; the base pinned by tag (or tag and a full digest, never a
partial or invented one) with its digest-refresh command documented for exactly that tag.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from test_deploy_manifests import DEPLOY, KUSTOMIZATIONS, ROOT, build

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
README = (DEPLOY / "README.md").read_text()
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
REQUIRES_PYTHON = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
#: The base ARG: an official python slim tag, optionally @sha256 with all 64 hex digits.
BASE_ARG = re.compile(r"^ARG PYTHON_IMAGE=(?P<tag>python:(?P<py>3\.\d+)-slim)(?P<digest>@sha256:[0-9a-f]{64})?$", re.M)
REFRESH = re.compile(r"docker buildx imagetools inspect (?P<tag>\S+) --format '\{\{json \.Manifest\.Digest\}\}' "
                     r"\| tr -d '\"'")


def base_arg() -> re.Match[str]:
    m = BASE_ARG.search(DOCKERFILE)
    assert m, "deploy/Dockerfile: ARG PYTHON_IMAGE must be python:<3.x>-slim[@sha256:<64 hex>]"
    return m


def test_every_stage_builds_from_the_pinned_base_or_an_earlier_stage() -> None:
    base_arg()
    stages: list[str] = []
    for line in re.findall(r"^FROM .*$", DOCKERFILE, re.M):
        m = re.fullmatch(r"FROM (\S+) AS (\S+)", line)
        assert m, f"every stage is named: {line!r}"
        assert m.group(1) == "${PYTHON_IMAGE}" or m.group(1) in stages, f"{line!r}: not the pinned base"
        stages.append(m.group(2))
    assert {"exporter", "scaler", "activator"} <= set(stages)


def test_the_digest_refresh_command_is_documented_for_the_dockerfiles_tag() -> None:
    tag = base_arg().group("tag")
    for where, text in (("deploy/Dockerfile", DOCKERFILE), ("deploy/README.md", README)):
        tags = [m.group("tag") for m in REFRESH.finditer(text)]
        assert tags == [tag], f"{where}: the refresh command must name {tag}, found {tags}"
    assert f"--build-arg PYTHON_IMAGE=\"{tag}@$digest\"" in README


def test_the_base_python_satisfies_the_project() -> None:
    py = tuple(int(x) for x in base_arg().group("py").split("."))
    minimum = re.fullmatch(r">=\s*(\d+)\.(\d+)", REQUIRES_PYTHON)
    assert minimum, REQUIRES_PYTHON
    assert py >= (int(minimum.group(1)), int(minimum.group(2)))


def test_the_pattern_accepts_a_full_digest_and_refuses_a_partial_one() -> None:
    full = "ARG PYTHON_IMAGE=python:3.11-slim@sha256:" + "ab" * 32
    assert BASE_ARG.search(full)
    assert not BASE_ARG.search("ARG PYTHON_IMAGE=python:3.11-slim@sha256:abc123")
    assert not BASE_ARG.search("ARG PYTHON_IMAGE=python:latest")


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_each_workload_runs_its_parts_image_at_the_projects_version(directory: Path) -> None:
    for obj in build(directory):
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for c in obj["spec"]["template"]["spec"]["containers"]:
            part = c["args"][0]  # the image's ENTRYPOINT is keda-llm; the first argument is the part
            assert c["image"] == f"keda-llm-{part}:{VERSION}", (obj["metadata"]["name"], c["image"])
            assert re.search(rf"^FROM core AS {part}$", DOCKERFILE, re.M), f"no Dockerfile target {part}"
            assert f"--target {part} -t keda-llm-{part}:{VERSION}" in README or (
                f"--target $part -t keda-llm-$part:{VERSION}" in README), "README's build line"
