"""Seconds per student of `tito nbgrader autograde`, one job against several.

Builds a course in a temporary folder, releases module 01 (or --module), collects --students
copies of the reference solution, and grades them all with `--jobs 1` and `--jobs N`,
alternating for --rounds rounds so that a noisy neighbour slows both alike. Prints each
run's wall-clock seconds per student, the median per setting and the ratio, how much of a
student's time the second grading took (the strict re-run in the sandbox, read from
logs/<module>/grading-<student>.json), and checks that both settings gave every student the
same per-test scores.

    .venv/bin/python benchmarks/autograde_jobs.py                 # 6 students, jobs 1 vs 2
    .venv/bin/python benchmarks/autograde_jobs.py --students 4 --rounds 1 --unsafe
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from tito.course.notebook import read_cells
from tito.course.registry import get_module
from tito.grading.course import Course

REPO = Path(__file__).resolve().parents[1]


def tito(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "tito", *args], cwd=cwd, capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"tito {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="01")
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--unsafe", action="store_true", help="grade without the sandbox")
    args = parser.parse_args()
    m = get_module(args.module)
    reference = {c.grade_id: c.source for c in read_cells(m.source) if c.nbgrader.get("solution")}
    with tempfile.TemporaryDirectory(prefix="autograde-jobs-") as tmp:
        base = Path(tmp)
        course = base / "course"
        tito("nbgrader", "init", "course", cwd=base)
        tito("nbgrader", "generate", m.key, cwd=course)
        tito("nbgrader", "release", m.key, cwd=course)
        notebook = nbformat.read(course / "release" / m.dirname / f"{m.slug}.ipynb",
                                 as_version=4)
        for cell in notebook.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if grade_id in reference:
                cell.source = reference[grade_id]
        paths = []
        for i in range(args.students):
            path = base / "subs" / f"s{i:03d}" / f"{m.slug}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(notebook, path)
            paths.append(str(path.parent))
        tito("nbgrader", "collect", m.key, *paths, cwd=course)
        extra = ["--unsafe"] if args.unsafe else []
        seconds: dict[int, list[float]] = {1: [], args.jobs: []}
        scores: dict[int, dict] = {}
        for r in range(args.rounds):
            order = (1, args.jobs) if r % 2 == 0 else (args.jobs, 1)
            for jobs in order:
                start = time.perf_counter()
                tito("nbgrader", "autograde", m.key, "--jobs", str(jobs), *extra, cwd=course)
                per_student = (time.perf_counter() - start) / args.students
                seconds[jobs].append(per_student)
                print(f"round {r + 1}, --jobs {jobs}: {per_student:.2f} s per student")
                second = [json.loads((course / "logs" / m.dirname / f"grading-{Path(p).name}.json")
                                     .read_text())["second"]["seconds"] for p in paths]
                print(f"    second grading: median {statistics.median(second):.2f} s per student")
                with Course(course).gradebook() as gb:
                    scores[jobs] = {
                        s: {g.name: g.score for g in
                            gb.find_submission_notebook(m.slug, m.dirname, s).grades}
                        for s in (Path(p).name for p in paths)}
    one, many = statistics.median(seconds[1]), statistics.median(seconds[args.jobs])
    sandbox = "unsandboxed" if args.unsafe else "sandboxed"
    print(f"module {m.key}, {args.students} students, {sandbox}, median over {args.rounds} "
          f"round(s): --jobs 1 {one:.2f} s/student, --jobs {args.jobs} {many:.2f} s/student, "
          f"speed-up {one / many:.2f}x")
    same = scores[1] == scores[args.jobs]
    print(f"per-test scores identical for --jobs 1 and --jobs {args.jobs}: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
