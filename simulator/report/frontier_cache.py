"""Frontier points on disk, so that a re-run simulates only the points whose inputs changed.

A frontier of every trace is hours of CPU; most of it is the anchor baselines, whose points do not move
when ours' policy does. Each point (and each trace's reference runs: the oracle, static and the lower
bound) is one small JSON file named for a digest of everything its result depends on:

- the trace: its name and a digest of its arrays (a window or a re-synthesis is another trace);
- the backtest: its repr (preset, SLO, seed, cold starts, mode, max replicas, ScaledObject, ...);
- the policy and the knob value;
- the source the simulation runs. Every point: the simulator's modules but its front ends and ours' wiring
  (see SHARED_SOURCES), the two scaler modules every controller uses (scaler/model.py,
  scaler/scaledobject.py), and the modules of common/ and activator/ those import, followed through every
  import statement at any depth (IMPORTED_ONLY: the simulator runs the activator's routing rule, never its
  server). Ours' points add simulator/control/policies.py and the modules of scaler/ (with theirs of
  common/) that the simulator's and ours' source import (OURS_IMPORTED: the policy and the service, not
  the gRPC server or the command line). So a change to ours' policy re-simulates ours' points only, a
  change to the simulator all of them, but for the fluid mode's own modules (FLUID_ONLY): a point run in
  the detailed mode never executes them, so a change to the fluid mode re-simulates the fluid traces'
  points only; and for the anchors' own modules (ANCHOR_MODULES): each keys only its anchors' points (with
  the modules of the anchors' package it imports), so a fix to one anchor re-simulates that anchor's points,
  not the oracles and the other policies; a change to a module no point imports (the activator's server,
  say) re-simulates nothing.

The scripts keep the entries in docs/data/ (committed: a fresh checkout regenerates the docs' tables from
them, simulating only what its changes moved; the whole store is CPU hours on a laptop).

A change that moves no result (a speedup, a refactor) still changes the digests: scripts/carry_points.py
re-simulates a sample of the entries it left stale, and only where every one comes out the same, bit for bit,
writes all of them again under the new key.

What the key leaves out: simulator/control/policies.py counts as ours' wiring only (it also dispatches the other
policies to their builders, which live in files the key does hold); a change there that moves another
policy needs `--fresh`. Entries are never deleted: `rm -r` the store, then one full run, rebuilds it
without the stale ones.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from keda_llm.simulator.report.frontier_point import Point
from keda_llm.simulator.run import Backtest
from keda_llm.simulator.workload.traces import Trace

#: source every point depends on (paths under the installed keda_llm package, folders or files), with the
#: IMPORTED_ONLY modules these import
SHARED_SOURCES = ("simulator", "scaler/model.py", "scaler/scaledobject.py")
#: parts whose modules count only where a point's source imports them, directly or through each other
IMPORTED_ONLY = ("common", "activator")
#: ours' points follow the imports into scaler/ too: the scaler's policy and service run in them, its gRPC
#: server, command line and Kubernetes client do not
OURS_IMPORTED = (*IMPORTED_ONLY, "scaler")
#: what of those does not compute a point: the sweep itself, this cache, the tuner and command lines, the caveat
#: on a fluid run's fidelity (read from a finished run), the informed reactive reference (replays an oracle's
#: schedule beside the sweep, never inside a point), and ours' wiring (in OURS_SOURCES instead)
NOT_A_POINT = ("simulator/report/frontier.py", "simulator/report/frontier_cache.py",
               "simulator/report/leave_one_out.py", "simulator/report/fidelity.py", "simulator/report/reactive.py",
               "simulator/tune.py",
               "simulator/tune_cli.py", "simulator/cli.py", "simulator/control/policies.py")
#: what only the fluid mode runs (simulator/run.py imports them for it alone): not in a detailed point's key
FLUID_ONLY = ("simulator/cluster/fluid.py", "simulator/cluster/fluid_kernel.py")
#: the anchors' package: its __init__.py (the registry every run imports) and base.py (their common loop) count for
#: every point; each anchor's own module counts for that anchor's points only, with the modules of the package it
#: imports (so an anchor built on another's module is keyed by both). simulator/pools.py imports dynamo.py for the
#: P/D table (scripts/pools_table.py), which keeps no entries here; no stored point runs pools.py.
ANCHORS_DIR = "simulator/control/anchors"
ANCHOR_MODULES = {"knative-kpa": "knative.py", "aibrix-kpa": "aibrix.py", "aibrix-apa": "aibrix.py",
                  "llmd-wva": "keda_driven.py", "llmd-wva-tokens": "keda_driven.py", "hpa-kv": "keda_driven.py",
                  "dynamo-load": "dynamo.py", "dynamo-sla": "dynamo.py", "dynamo-sla-constant": "dynamo.py",
                  "dynamo-sla-arima": "dynamo.py", "dynamo-sla-prophet": "dynamo.py", "ray-serve": "ray_serve.py"}
ANCHORS_COMMON = ("__init__.py", "base.py")
#: what ours' points depend on beyond SHARED_SOURCES (with the OURS_IMPORTED modules these and those import):
#: ours' wiring and default ScaledObject
OURS_SOURCES = ("simulator/control/policies.py",)
VERSION = 1  # of the entries' format


def _part_dir(part: str, root: Path | None) -> Path:
    """Where keda_llm's part (`simulator`, `scaler`, ...) lives: under `root`, else where Python imports it
    from (an editable install maps each part to its own folder, so the package's folder does not hold it)."""
    if root is not None:
        return root / part
    spec = importlib.util.find_spec(f"keda_llm.{part}")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"frontier cache: keda_llm.{part} is not an importable package")
    return Path(next(iter(spec.submodule_search_locations)))


def _files(root: Path | None, entries: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for entry in entries:
        part, _, rest = entry.partition("/")
        base = _part_dir(part, root)
        path = base / rest if rest else base
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in found:
            rel = f"{part}/{p.relative_to(base).as_posix()}"
            if "__pycache__" in rel or rel.endswith(".pyc") or rel in skip:
                continue
            out.append((rel, p))
    return out


def _module(rel: str) -> str:
    """`common/times.py` -> keda_llm.common.times; a package's __init__.py is the package."""
    parts = rel.removesuffix(".py").split("/")
    return ".".join(["keda_llm", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _imports(rel: str, path: Path) -> set[str]:
    """Every keda_llm name an import statement of the file names, at any depth (a lazy import inside a
    function counts: it may run), as `a.b` and, for `from a import b`, `a.b` too (a module or not)."""
    module = _module(rel)
    package = module if rel.endswith("__init__.py") else module.rpartition(".")[0]
    out: set[str] = set()
    try:
        tree = ast.parse(path.read_bytes(), filename=rel)
    except (SyntaxError, ValueError) as err:  # ValueError: a NUL byte; a bad encoding is a SyntaxError
        raise RuntimeError(f"frontier cache: cannot read the imports of {path} ({err}); a point's key follows "
                           "them: fix the file or move it out of the package") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("keda_llm.")}


def _imported(files: list[tuple[str, Path]], root: Path | None, parts_followed: tuple[str, ...] = IMPORTED_ONLY,
              from_parts: tuple[str, ...] | None = None) -> list[tuple[str, Path]]:
    """The modules of `parts_followed` that `files` reach through import statements, followed through each
    other, with their packages' __init__.py (importing a module runs them) and the files other than modules
    in the folders reached (data a module may read). `from_parts`: follow imports only out of files of these
    parts (all: None)."""
    seen: dict[str, Path] = {}
    todo = [(rel, p) for rel, p in files if rel.endswith(".py")]
    while todo:
        rel, path = todo.pop()
        if from_parts is not None and rel.split("/")[0] not in from_parts:
            continue
        for name in _imports(rel, path):
            parts = name.split(".")[1:]
            if not parts or parts[0] not in parts_followed:
                continue
            base = _part_dir(parts[0], root)
            candidates = [base / "__init__.py"]  # the part's own package, then each module or package down the path
            for i in range(2, len(parts) + 1):
                stem = base.joinpath(*parts[1:i])
                candidates += [stem.with_suffix(".py"), stem / "__init__.py"]
            for c in candidates:
                if c.is_file():
                    crel = f"{parts[0]}/{c.relative_to(base).as_posix()}"
                    if crel not in seen:
                        seen[crel] = c
                        todo.append((crel, c))
    data = {f"{rel.rpartition('/')[0]}/{d.name}": d for rel, p in seen.items() for d in p.parent.iterdir()
            if d.is_file() and d.suffix not in (".py", ".pyc")}
    return sorted({**seen, **data}.items())


def source_digest(entries: tuple[str, ...], skip: tuple[str, ...] = (), root: Path | None = None) -> str:
    """A digest of the files' paths and contents under `root` (default: the keda_llm parts that run)."""
    return _digest(_files(root, entries, skip))


def _digest(files: list[tuple[str, Path]]) -> str:
    h = hashlib.sha256()
    for rel, p in sorted(dict(files).items()):
        h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _anchor_own(root: Path | None) -> tuple[str, ...]:
    """Every file of the anchors' package but ANCHORS_COMMON (paths under keda_llm)."""
    return tuple(rel for rel, _ in _files(root, (ANCHORS_DIR,)) if rel.rpartition("/")[2] not in ANCHORS_COMMON)


def _anchor_files(policy: str, root: Path | None) -> list[tuple[str, Path]]:
    """The modules of the anchors' package that `policy`'s points run: its own (ANCHOR_MODULES) and, followed
    through each other, those it imports."""
    folder = _part_dir("simulator", root) / ANCHORS_DIR.partition("/")[2]
    prefix = "keda_llm." + ANCHORS_DIR.replace("/", ".") + "."
    seen: dict[str, Path] = {}
    todo = [ANCHOR_MODULES[policy]]
    while todo:
        name = todo.pop()
        rel, path = f"{ANCHORS_DIR}/{name}", folder / name
        if rel in seen or name in ANCHORS_COMMON or not path.is_file():
            continue
        seen[rel] = path
        todo += [m[len(prefix):].split(".")[0] + ".py" for m in _imports(rel, path) if m.startswith(prefix)]
    return list(seen.items())


def point_files(kind: str, root: Path | None = None, detailed: bool = False) -> list[tuple[str, Path]]:
    """The files a point's result depends on: `shared` (every policy's, but the anchors' own modules), an
    anchor's name (ANCHOR_MODULES: those and the anchor's own) or `ours` (the shared ones and ours' own), as
    (path under keda_llm, file), sorted; `detailed`: without FLUID_ONLY."""
    files = _files(root, SHARED_SOURCES, NOT_A_POINT + (FLUID_ONLY if detailed else ()) + _anchor_own(root))
    if kind in ANCHOR_MODULES:
        files += _anchor_files(kind, root)
    if kind == "ours":
        files += _files(root, OURS_SOURCES)
        return sorted(dict(files + _imported(files, root, OURS_IMPORTED)).items())
    # the scaler modules every point runs (SHARED_SOURCES) import others of scaler/ too (model.py: seasonal.py);
    # the simulator's own imports of scaler/ are ours' wiring, not followed here
    files += _imported(files, root, OURS_IMPORTED, from_parts=("scaler",))
    return sorted(dict(files + _imported(files, root)).items())


def policy_sources(policy: str, root: Path | None = None, mode: str | None = None) -> str:
    """The digest of the source `policy`'s points depend on: ours', an anchor's or every other policy's; in
    the `detailed` mode without FLUID_ONLY (any other mode, or None: with it)."""
    kind = policy if policy == "ours" or policy in ANCHOR_MODULES else "shared"
    return _sources(kind, root, mode == "detailed")



@functools.cache
def _sources(kind: str, root: Path | None, detailed: bool = False) -> str:
    """Hashed once per process (PointCache does it on creation): the code that runs is the code that was
    imported, whatever is edited on disk after."""
    return _digest(point_files(kind, root, detailed))


def trace_digest(trace: Trace) -> str:
    """The trace's name and arrays, and its lead-in's (a window run after its lead-in is another run)."""
    h = hashlib.sha256(trace.name.encode())
    for a in (trace.arrival_s, trace.prompt_tokens, trace.output_tokens, trace.hash_offsets, trace.hash_values):
        h.update(b"-" if a is None else a.tobytes())
    if trace.lead is not None:
        h.update(f"|lead {trace.lead_s!r}|".encode() + trace_digest(trace.lead).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class References:
    """A trace's reference runs, as the frontier needs them (simulator.report.frontier.frontier)."""

    feasible_share: float
    target_over_all: float
    oracle_attainment: float
    oracle_gpu_hours: float
    oracle_status: str
    static_attainment: float
    static_gpu_hours: float
    bound_gpu_hours: float
    cpu_s: float
    #: the oracle's pods (ready_at, remove_at, cold_start_s) where it was planned on from a policy's schedule
    #: (simulator.report.frontier.oracle_from_points); empty: the plan from scratch
    oracle_pods: tuple[tuple[float, float, float], ...] = ()
    #: whether planning on from that schedule's own saved nothing more (the plan is not continued again)
    oracle_settled: bool = False
    #: the plan from scratch's GPU-hours where the oracle is another plan (0: it is that plan)
    scratch_gpu_hours: float = 0.0
    #: the policies' points planned on from (`policy@knob`), kept or not: not tried again
    oracle_starts: tuple[str, ...] = ()


def _keyed(backtest: Backtest) -> str:
    """The backtest as the store keys it: its repr, and the gauges' timing where it is not the default (kept
    out of the repr so that the entries written before the field existed keep their keys)."""
    return repr(backtest) + ("" if backtest.gauges == "leading" else f"|gauges={backtest.gauges}")


class PointCache:
    """The points of one trace and backtest under `root` (docs/data/frontier-points in the scripts). A point run
    with another seed (a multi-seed frontier) is the backtest with that seed: its own entry, and the
    backtest's own seed reads the entries a one-seed run wrote."""

    def __init__(self, root: Path, trace: Trace, backtest: Backtest, *, fresh: bool = False,
                 sources_root: Path | None = None) -> None:
        self.root = root
        self.fresh = fresh  # read nothing, overwrite what is there
        #: whose source keys the entries: None, the code that runs; a checkout, another revision's
        #: (scripts/carry_points.py reads the entries an earlier source wrote)
        self.sources_root = sources_root
        self.trace_name = trace.name
        self.backtest = backtest
        self.prefix = f"{VERSION}|{trace.name}|{trace_digest(trace)}|"
        self.base = f"{self.prefix}{_keyed(backtest)}"
        self.hits = 0
        self.misses = 0
        self.mode = backtest.resolved_mode(trace)  # in the backtest's repr too, but "auto" resolves by the trace
        for policy in ("ours", "other", *ANCHOR_MODULES):  # hashed now, while the files are the code that runs
            policy_sources(policy, sources_root, mode=self.mode)

    def _path(self, kind: str, key: str, seed: int | None = None) -> Path:
        base = self.base if seed is None or seed == self.backtest.seed else \
            f"{self.prefix}{_keyed(replace(self.backtest, seed=seed))}"
        digest = hashlib.sha256(f"{base}|{key}".encode()).hexdigest()[:40]
        return self.root / kind / f"{digest}.json"

    def _point_key(self, policy: str, knob: float) -> str:
        return f"{policy}|{knob!r}|{policy_sources(policy, self.sources_root, mode=self.mode)}"

    def get(self, policy: str, knob: float, seed: int | None = None) -> Point | None:
        """The cached point (run with `seed`, default the backtest's), marked `cached`, or None."""
        data = None if self.fresh else _read(self._path("points", self._point_key(policy, knob), seed))
        if data is None:
            self.misses += 1
            return None
        self.hits += 1
        return Point(knob, data["attainment"], data["gpu_hours"], data["cpu_s"], cached=True)

    def put(self, policy: str, point: Point, seed: int | None = None) -> None:
        _write(self._path("points", self._point_key(policy, point.knob), seed),
               {"trace": self.trace_name, "policy": policy, "knob": point.knob, "attainment": point.attainment,
                "gpu_hours": point.gpu_hours, "cpu_s": point.cpu_s,
                "seed": self.backtest.seed if seed is None else seed})

    def _refs_key(self, oracle_target: float) -> str:
        return f"references|{oracle_target!r}|{policy_sources('oracle', self.sources_root, mode=self.mode)}"

    def get_references(self, oracle_target: float) -> References | None:
        data = None if self.fresh else _read(self._path("references", self._refs_key(oracle_target)))
        if data is None:
            return None
        data.pop("trace", None)
        pods = tuple(tuple(q) for q in data.pop("oracle_pods", ()))
        starts = tuple(data.pop("oracle_starts", ()))
        return References(**data, oracle_pods=pods, oracle_starts=starts)

    def put_references(self, oracle_target: float, refs: References) -> None:
        _write(self._path("references", self._refs_key(oracle_target)),
               {"trace": self.trace_name, **refs.__dict__})


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RuntimeError(f"frontier cache entry {path} is unreadable ({e}); delete it or run with --fresh") from e
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    """Atomically (a temporary file, then a rename): runs that share the cache never read half an entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
    tmp.replace(path)
