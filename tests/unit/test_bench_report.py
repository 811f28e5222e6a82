"""bench/report.py reads the ratios and the frames modes out of the benchmarks' printed output and
writes the report; these tests feed it output in the exact form the benchmarks print."""

from __future__ import annotations

from pathlib import Path

from bench.report import Result, parse_frames_modes, parse_ratios, render

FRAMES_OUTPUT = """\
process: row, max_rows: 1: status completed, wall 84.20 s, command.* 6012 + frame.* 12003 = 18015 events, \
claim requests 3008, frames 3000 (1.00 rows/frame), rows saved 45000 (fixture 45000: equal)
process: frame, max_rows: 50: status completed, wall 21.05 s, command.* 20 + frame.* 301 = 321 events, \
claim requests 68, frames 60 (50.00 rows/frame), rows saved 45000 (fixture 45000: equal)
events ratio: 56.12 (target >= 10)
wall ratio: 4.00 (target >= 2)
claim requests ratio: 44.24
claim ratio: 0.121 (goal >= 0.15)
"""


def test_ratio_lines_are_read_with_the_goal_they_name() -> None:
    ratios = {r.name: r for r in parse_ratios(FRAMES_OUTPUT + "ingress ratio: 0.41\nspool write ratio: 0.95\n")}
    assert set(ratios) == {
        "events ratio",
        "wall ratio",
        "claim requests ratio",
        "claim ratio",
        "ingress ratio",
        "spool write ratio",
    }
    assert (ratios["events ratio"].value, ratios["events ratio"].goal, ratios["events ratio"].met) == (56.12, 10, True)
    assert (ratios["claim ratio"].goal, ratios["claim ratio"].met) == (0.15, False)
    assert ratios["ingress ratio"].goal is None and ratios["ingress ratio"].met is None


def test_the_peer_ratio_lines_are_read_with_the_goals_of_the_hot_path() -> None:
    output = (
        "ratio start: 0.42\nratio batch: 0.61\nratio chain: 0.27\nratio webhook: 0.33\nlatency ratio chain_step: 1.49\n"
    )
    ratios = {r.name: r for r in parse_ratios(output)}
    assert {name: (r.value, r.op, r.goal, r.met) for name, r in ratios.items()} == {
        "ratio start": (0.42, ">=", 0.5, False),
        "ratio batch": (0.61, ">=", 0.5, True),
        "ratio chain": (0.27, ">=", 0.5, False),
        "ratio webhook": (0.33, ">=", 0.5, False),
        "latency ratio chain_step": (1.49, "<=", 1.5, True),
    }


def test_lines_that_only_mention_a_ratio_are_not_figures() -> None:
    assert parse_ratios("ratio to baseline: 11.1x the direct tool call\nthe ratio: n/a\n") == []
    assert [r.name for r in parse_ratios("ids ratio (4 threads): 0.34\n")] == ["ids ratio (4 threads)"]


def test_the_frames_modes_are_read_from_their_lines() -> None:
    assert parse_frames_modes(FRAMES_OUTPUT) == {
        "row": {"wall": 84.20, "events": 18015.0},
        "frame": {"wall": 21.05, "events": 321.0},
    }


def test_the_report_has_the_machine_every_ratio_and_every_output() -> None:
    results = [
        Result("frames", ".venv/bin/python bench/frames.py", 0, 120.0, FRAMES_OUTPUT, parse_ratios(FRAMES_OUTPUT)),
        Result("ingress", ".venv/bin/python bench/ingress.py", 1, 3.0, "boom\n", []),
    ]
    text = render(results, [("cores", "2")], "performance.png")
    assert "| cores | 2 |" in text
    assert "| frames | claim ratio | 0.121 | >= 0.15 | **missed** |" in text
    assert "| frames | events ratio | 56.12 | >= 10 | met |" in text
    assert "| ingress | (failed, exit 1) | | | |" in text
    assert "![ratios and frame modes](performance.png)" in text
    assert FRAMES_OUTPUT.splitlines()[0] in text and "boom" in text


def test_goal_lines_that_are_not_ratios_are_listed_and_a_failure_shows_its_last_lines() -> None:
    engine = "per task: 42.8 us (noop loop; goal <= 100 us)\nratio to baseline: 10.9x\n"
    failed = "".join(f"line {i}\n" for i in range(100))
    results = [
        Result("engine", "e", 0, 1.0, engine, parse_ratios(engine)),
        Result("spool", "s", 1, 1.0, failed, []),
    ]
    text = render(results, [], None)
    assert "| engine | per task: 42.8 us (noop loop; goal <= 100 us) | | | |" in text
    assert "line 99" in text and "line 59" not in text and "(60 lines before)" in text
    assert Path("bench/frames.py").exists()
