"""Wall-clock seconds of `tito system doctor` and `tito module complete` in a student workspace.

Makes a workspace in a temporary folder (`tito init`, about 20 s), hands out --module and
fills its solution cells with the reference solution, then times each command --repeat
times as a student runs it (a fresh `python -m tito` process each time). With
--compare-with DIR, the same workspace is timed with the tito of another checkout too (its
folder first on PYTHONPATH, e.g. the main branch), alternating run by run so that a noisy
neighbour slows both alike; the ratio is printed. --tito LABEL=PATH times an installed
`tito` instead (a student build's, from `tito dist student` installed in a virtual
environment); the first one given makes the workspace. The machine's load average is
printed beside every figure: on a shared machine the absolute times drift with it.

    .venv/bin/python benchmarks/student_path.py                          # doctor and complete 01
    .venv/bin/python benchmarks/student_path.py --compare-with /path/to/main --repeat 5
    .venv/bin/python benchmarks/student_path.py --tito new=venv-a/bin/tito \
        --tito old=venv-b/bin/tito
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCTOR_TARGET = 2.0  # seconds, issue #23: "at most 2 s where nothing is wrong"


def run(args: list[str], cwd: Path, version) -> tuple[float, subprocess.CompletedProcess]:
    """Run tito ``args``; ``version`` is None (this checkout), a checkout folder to put first
    on PYTHONPATH, or ("exe", path) for an installed tito."""
    env = dict(os.environ, COLUMNS="200")
    command = [sys.executable, "-m", "tito"]
    if isinstance(version, tuple):
        command = [version[1]]
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
    elif version is not None:
        paths = [str(version), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(paths).rstrip(os.pathsep)
    start = time.perf_counter()
    done = subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    return time.perf_counter() - start, done


def fill_with_reference(ws: Path, key: str) -> None:
    from tito.course.notebook import read_cells
    from tito.course.registry import get_module

    m = get_module(key)
    reference = {c.grade_id: c.source for c in read_cells(m.source) if c.nbgrader.get("solution")}
    path = ws / m.notebook_relpath
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in reference:
            cell["source"] = reference[grade_id]
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="01")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare-with", type=Path, default=None,
                        help="another checkout of the course, timed on the same workspace")
    parser.add_argument("--tito", action="append", default=[], metavar="LABEL=PATH",
                        help="an installed tito to time instead of this checkout's (repeatable)")
    args = parser.parse_args()
    versions: dict = {"this tito": None}
    if args.tito:
        versions = {}
        for item in args.tito:
            label, _, path = item.partition("=")
            versions[label] = ("exe", str(Path(path).resolve()))
    if args.compare_with is not None:
        versions["--compare-with"] = args.compare_with.resolve()
    first = next(iter(versions.values()))
    with tempfile.TemporaryDirectory(prefix="student-path-") as tmp:
        base = Path(tmp)
        os.environ["JUPYTER_DATA_DIR"] = str(base / "jupyter")  # the workspace's kernel goes here
        ws = base / "course"
        print(f"tito init {ws} ... ({load()})", flush=True)
        seconds, done = run(["init", str(ws)], base, first)
        if done.returncode != 0:
            sys.exit(done.stdout + done.stderr)
        print(f"  {seconds:.1f} s", flush=True)
        run(["module", "start", args.module], ws, first)
        fill_with_reference(ws, args.module)
        commands = {"tito system doctor": ["system", "doctor"],
                    f"tito module complete {args.module}": ["module", "complete", args.module]}
        results: dict[tuple[str, str], list[float]] = {}
        for label, command in commands.items():
            for _ in range(args.repeat):
                for version, checkout in versions.items():
                    seconds, done = run(command, ws, checkout)
                    ok = "ok" if done.returncode == 0 else f"exit {done.returncode}"
                    print(f"{label:<26} {version:<15} {seconds:6.2f} s  ({ok}; {load()})",
                          flush=True)
                    results.setdefault((label, version), []).append(seconds)
        print()
        print(f"{'command':<26} {'version':<15} {'median':>8} {'min':>8}")
        for (label, version), times in results.items():
            print(f"{label:<26} {version:<15} {statistics.median(times):7.2f}s {min(times):7.2f}s")
        labels = list(versions)
        if len(labels) == 2:  # the first against the second
            for label in commands:
                new = statistics.median(results[(label, labels[0])])
                old = statistics.median(results[(label, labels[1])])
                print(f"{label}: {labels[1]} {old:.2f} s, {labels[0]} {new:.2f} s: "
                      + (f"{old / new:.1f}x faster" if new < old else f"{new / old:.1f}x slower"))
        doctor = statistics.median(results[("tito system doctor", labels[0])])
        verdict = "met" if doctor <= DOCTOR_TARGET else "NOT met"
        print(f"doctor target (<= {DOCTOR_TARGET:g} s where nothing is wrong), {labels[0]}: "
              f"{verdict}, median {doctor:.2f} s ({load()})")


if __name__ == "__main__":
    main()
