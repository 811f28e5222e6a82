"""Run every benchmark and write the performance report: ``docs/performance.md`` and its chart.

Each ``bench/<name>.py`` prints its figures next to a baseline measured in the same run and one or
more ``<name> ratio: <value>`` lines. This script runs them one after another (never two at once:
they share the two cores), keeps each one's whole output, and writes

* ``docs/performance.md``: the machine it ran on, a table of every ratio with the goal its line
  names, then per benchmark what it measures (its docstring's first paragraph), the command, its
  wall time and its output as printed;
* ``docs/performance.png``: every ratio against its goal, and the frames benchmark's row mode against
  frame mode (events and wall time).

A benchmark that fails is reported as failed with its output; the others still run. Timing never
fails this script: its exit status is 1 only when a benchmark could not run at all.

    make bench                                  # the local stack must be up; make bench starts it
    .venv/bin/python bench/report.py [--only ids,engine] [--out docs/performance.md]

Analysis that outlives one run (what limits each figure, the bugs measurements found) lives in
``docs/performance-notes.md``, which this script never touches.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Order: the cheap in-process figures first, the ones that start roles and load the emulators last.
BENCHES = (
    "ids", "http_client", "engine", "execute", "ingress", "distributed", "frames", "spool", "replay", "runtime",
    "coldstart", "peers",
)  # fmt: skip
_RATIO = re.compile(
    r"^(?P<name>[A-Za-z][\w .()+-]*? ratio(?: \([^)]*\))?):\s*(?P<value>[0-9]+(?:\.[0-9]+)?)(?P<rest>.*)$"
)
# bench/peers.py (ours against a peer): ``ratio start: 0.41``, ``latency ratio chain_step: 12.9``.
# bench/scale.py: ``ratio start_300k: 0.98``.
_PEER_RATIO = re.compile(r"^(?P<name>(?:latency )?ratio [a-z0-9_]+):\s*(?P<value>[0-9]+(?:\.[0-9]+)?)(?P<rest>.*)$")
# Its lines carry no goal (their form is fixed); the goals of issue #20's acceptance.
_PEER_GOALS = {
    "ratio start": (">=", 0.5),
    "ratio batch": (">=", 0.5),
    "ratio chain": (">=", 0.5),
    "ratio webhook": (">=", 0.5),
    "latency ratio chain_step": ("<=", 1.5),
    # bench/scale.py (issue #26's acceptance; run it with --only scale: it seeds 300k executions).
    "ratio start_300k": (">=", 0.95),
    "ratio projector_fold_to_write": (">=", 1.0),
    "ratio loop_last_to_first": ("<=", 1.1),
}
_GOAL = re.compile(r"(?:goal|target)\s*(?P<op>>=|<=|≥|≤)\s*(?P<value>[0-9.]+)")
_FRAMES_MODE = re.compile(
    r"^process: (?P<mode>row|frame), max_rows: \d+: .*?wall (?P<wall>[0-9.]+) s, .*?= (?P<events>\d+) events"
)


@dataclass
class Ratio:
    name: str
    value: float
    goal: float | None = None
    op: str = ">="

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        return self.value >= self.goal if self.op in (">=", "≥") else self.value <= self.goal


@dataclass
class Result:
    name: str
    command: str
    returncode: int
    seconds: float
    output: str
    ratios: list[Ratio] = field(default_factory=list)

    @property
    def goals(self) -> list[str]:
        """Lines that name a goal but are not ratios (``per task: 42.8 us (goal <= 100 us)``)."""
        return [
            line.strip() for line in self.output.splitlines() if _GOAL.search(line) and not _RATIO.match(line.strip())
        ]


def parse_ratios(output: str) -> list[Ratio]:
    """Every ``<name> ratio: <value>`` line, with the goal the line names, if any."""
    found = []
    for line in output.splitlines():
        match = _RATIO.match(line.strip()) or _PEER_RATIO.match(line.strip())
        if not match:
            continue
        goal = _GOAL.search(match.group("rest"))
        op, target = (
            (goal.group("op"), float(goal.group("value")))
            if goal
            else _PEER_GOALS.get(match.group("name"), (">=", None))
        )
        found.append(Ratio(match.group("name"), float(match.group("value")), target, op))
    return found


def parse_frames_modes(output: str) -> dict[str, dict[str, float]]:
    """``{"row": {"wall", "events"}, "frame": {...}}`` from the frames benchmark's mode lines."""
    modes = {}
    for line in output.splitlines():
        match = _FRAMES_MODE.match(line.strip())
        if match:
            modes[match.group("mode")] = {"wall": float(match.group("wall")), "events": float(match.group("events"))}
    return modes


def summary_of(path: Path) -> str:
    """The first paragraph of a script's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def machine() -> list[tuple[str, str]]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return [
        ("date (UTC)", datetime.now(UTC).strftime("%Y-%m-%d %H:%M")),
        ("cores", str(os.cpu_count())),
        ("CPU", cpu),
        ("memory", memory),
        ("system", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("Python", platform.python_version()),
        ("load average at start (1, 5, 15 min)", load),
    ]


def run(name: str, echo: bool) -> Result:
    script = ROOT / "bench" / f"{name}.py"
    command = f".venv/bin/python bench/{name}.py"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if echo:
            print(f"  {name}: {line}", end="", flush=True)
    proc.wait()
    output = "".join(lines)
    return Result(name, command, proc.returncode, time.perf_counter() - started, output, parse_ratios(output))


def chart(results: list[Result], path: Path) -> bool:
    """The PNG: every ratio against its goal; the frames modes side by side. False without matplotlib."""
    try:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ratios = [(f"{r.name}: {q.name}", q) for r in results for q in r.ratios]
    frames = next((parse_frames_modes(r.output) for r in results if r.name == "frames"), {})
    has_frames = {"row", "frame"} <= frames.keys()
    fig, axes = plt.subplots(1, 2 if has_frames else 1, figsize=(13 if has_frames else 8, 0.45 * len(ratios) + 2.5))
    left = axes[0] if has_frames else axes
    labels = [label for label, _ in ratios]
    values = [q.value for _, q in ratios]
    colors = ["#4c9f70" if q.met else "#c8553d" if q.met is False else "#7f8c9a" for _, q in ratios]
    rows = range(len(ratios))
    left.hlines(rows, [min(v, 1.0) for v in values], [max(v, 1.0) for v in values], color=colors, linewidth=3)
    left.scatter(values, rows, color=colors, zorder=3)
    left.axvline(1.0, color="#7f8c9a", linestyle="--", linewidth=1)
    for i, (_, q) in enumerate(ratios):
        left.annotate(f"{q.value:g}", (q.value, i), textcoords="offset points", xytext=(6, 4), fontsize=7)
        if q.goal is not None:
            left.plot([q.goal, q.goal], [i - 0.35, i + 0.35], color="black", linewidth=2)
    left.set_yticks(list(rows), labels, fontsize=8)
    left.set_xscale("log")
    left.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _pos: f"{x:g}"))
    left.invert_yaxis()
    left.set_title("figure ÷ same-run baseline (dashed: = baseline; black: goal; green met, red missed)", fontsize=9)
    if has_frames:
        right = axes[1]
        kinds = ("events", "wall")
        for offset, mode, color in ((-0.2, "row", "#c8553d"), (0.2, "frame", "#4c9f70")):
            right.bar([i + offset for i in range(2)], [frames[mode][k] for k in kinds], 0.4, label=mode, color=color)
        right.set_xticks(range(2), ["command.* + frame.* events", "wall time (s)"])
        right.set_yscale("log")
        right.legend(title="process:")
        right.set_title("frames benchmark: row mode (max_rows 1) vs frame mode (max_rows 50)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(results: list[Result], facts: list[tuple[str, str]], image: str | None) -> str:
    out = [
        "# Performance",
        "",
        "Written by `make bench` (`bench/report.py`): every benchmark in `bench/` run one after another on",
        "the machine below, each figure next to a baseline measured in the same run. Benchmarks never fail",
        "CI on timing. What limits each figure, and what earlier measurements found, is in",
        "[performance-notes.md](performance-notes.md).",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in facts],
        "",
        "## Ratios",
        "",
        "| benchmark | figure | value | goal | |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if r.returncode != 0:
            out.append(f"| {r.name} | (failed, exit {r.returncode}) | | | |")
        for q in r.ratios:
            goal = f"{q.op} {q.goal:g}" if q.goal is not None else ""
            mark = {True: "met", False: "**missed**", None: ""}[q.met]
            out.append(f"| {r.name} | {q.name} | {q.value:g} | {goal} | {mark} |")
        out += [f"| {r.name} | {line.replace('|', '/')} | | | |" for line in r.goals]
    missed = sorted({r.name for r in results for q in r.ratios if q.met is False})
    if missed:
        out += [
            "",
            f"Missed goals ({', '.join(missed)}): where each such path's floor is, with its profile and what "
            "would move it, is in [performance-notes.md](performance-notes.md) under that benchmark's heading.",
        ]
    if image:
        out += ["", f"![ratios and frame modes]({image})"]
    for r in results:
        script = ROOT / "bench" / f"{r.name}.py"
        out += [
            "",
            f"## `bench/{r.name}.py`",
            "",
            summary_of(script),
            "",
            f"`{r.command}` — {r.seconds:.0f} s" + ("" if r.returncode == 0 else f", **failed (exit {r.returncode})**"),
            "",
            "```",
            shown(r),
            "```",
        ]
    return "\n".join(out) + "\n"


def shown(result: Result, tail: int = 40) -> str:
    """The output as printed; of a failed benchmark, its last ``tail`` lines (the traceback's end)."""
    lines = result.output.rstrip().splitlines()
    if result.returncode != 0 and len(lines) > tail:
        lines = [f"... ({len(lines) - tail} lines before)", *lines[-tail:]]
    return "\n".join(lines) or "(no output)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--only", help="comma-separated benchmark names (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--quiet", action="store_true", help="do not echo each benchmark's output")
    args = parser.parse_args(argv)
    names = [n for n in (args.only.split(",") if args.only else BENCHES) if n]
    unknown = [n for n in names if not (ROOT / "bench" / f"{n}.py").exists()]
    if unknown:
        parser.error(f"no such benchmark: {', '.join(unknown)}")
    facts = machine()
    results = []
    for name in names:
        print(f"bench/{name}.py ...", flush=True)
        results.append(run(name, echo=not args.quiet))
    image = args.out.with_suffix(".png")
    drawn = chart(results, image)
    args.out.write_text(render(results, facts, image.name if drawn else None))
    print(f"wrote {args.out}" + (f" and {image}" if drawn else " (no chart: matplotlib is not installed)"))
    return 1 if any(r.returncode != 0 and not r.output for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
