"""`tito nbgrader ...`: grade a class with nbgrader itself, from lesson to gradebook."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.measure import Measurement

from ..course.registry import COURSE_ROOT, Module, get_module, prerequisites, written_modules
from ..grading import assignment, sandbox
from ..grading import autograde as autograding
from ..grading import collect as collecting
from ..grading import reports as reporting
from ..grading.course import (
    CONFIG_NAME,
    COURSE_FOLDERS,
    DEFAULT_COURSE_ID,
    DEFAULT_TIMEOUT,
    Course,
    init_course,
)
from ..grading.results import CellScore, StudentResult
from .ui import Failure, console, table


def _module(ref: str) -> Module:
    m = get_module(ref)
    if not m.written:
        raise Failure(f"Module {m.key} ({m.title}) is not written yet: there is nothing to grade.")
    return m


def _course(ctx: click.Context) -> Course:
    start = ctx.obj
    if start is not None and not (Path(start) / CONFIG_NAME).is_file():
        raise Failure(f"{start} is not an nbgrader course (no {CONFIG_NAME}); "
                      "make one with `tito nbgrader init DIR`.")
    return Course.require(start)


def _points(x: float) -> str:
    return f"{x:g}"


@click.group("nbgrader")
@click.option("--course", "course_dir", type=click.Path(file_okay=False, path_type=Path),
              help="The course folder (default: where nbgrader_config.py is, here or above).")
@click.pass_context
def nbgrader(ctx, course_dir):
    """Instructors: grade students' notebooks with nbgrader (init, generate, release,
    collect, autograde, feedback, report)."""
    ctx.obj = course_dir.resolve() if course_dir else None


# ---- init -----------------------------------------------------------------------------------
@nbgrader.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--course-id", default=DEFAULT_COURSE_ID, show_default=True,
              help="nbgrader's course id.")
@click.option("--timeout", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT,
              show_default=True, help="Per-cell time limit when autograding, in seconds.")
@click.option("--force", is_flag=True,
              help="Rewrite nbgrader_config.py of an existing course (nothing is deleted).")
def init(directory, course_id, timeout, force):
    """Create an nbgrader course folder in DIRECTORY."""
    course = init_course(directory, course_id, timeout, force)
    console.print(f"[green]✓[/] nbgrader course in {course.root} (course id {course_id})")
    console.print(f"  {CONFIG_NAME}: root, gradebook.db, per-cell time limit {timeout} s")
    console.print(f"  folders: {', '.join(f + '/' for f in COURSE_FOLDERS)}")
    console.print(f"Next: `cd {directory}` then `tito nbgrader generate 01`")


# ---- generate / release ---------------------------------------------------------------------
@nbgrader.command()
@click.argument("number")
@click.option("--lesson", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Use this lesson file instead of the course's modules/NN_slug/slug.py.")
@click.option("--force", is_flag=True, help="Replace a source notebook that was edited by hand.")
@click.pass_context
def generate(ctx, number, lesson, force):
    """Source notebook of module NUMBER from its lesson, with its nbgrader metadata checked."""
    m = _module(number)
    course = _course(ctx)
    made = assignment.generate(course, m, lesson, force)
    origin = lesson or m.source.relative_to(COURSE_ROOT)
    state = " (unchanged)" if made.unchanged else ""
    console.print(f"[green]✓[/] {course.rel(made.path)}{state} from {origin}: "
                  f"{made.tests} graded tests ({_points(made.points)} points), "
                  f"{made.solutions} solution cells; nbgrader metadata checked")
    console.print(f"Next: `tito nbgrader release {m.key}`")


@nbgrader.command()
@click.argument("number")
@click.option("--force", is_flag=True, help="Release again over an existing release.")
@click.pass_context
def release(ctx, number, force):
    """Student notebook of module NUMBER with `nbgrader generate_assignment` (and the gradebook)."""
    m = _module(number)
    course = _course(ctx)
    console.print(f"nbgrader generate_assignment {m.dirname} ...")
    run = assignment.release(course, m, force)
    with course.gradebook() as gb:
        master = gb.find_notebook(m.slug, m.dirname)
        n_tests = len(master.grade_cells)
        n_locked = sum(c.locked for c in master.source_cells)
        points = sum(float(c.max_score) for c in master.grade_cells)
    console.print(f"[green]✓[/] {course.rel(course.release_notebook(m))}: solutions replaced by "
                  f"nbgrader ({run.seconds:.0f} s); gradebook has {n_tests} graded tests "
                  f"({_points(points)} points) and checksums of {n_locked} locked cells")
    console.print("Hand that notebook to students; put what they return in a folder and run "
                  f"`tito nbgrader collect {m.key} FOLDER/*`")


# ---- collect --------------------------------------------------------------------------------
@nbgrader.command()
@click.argument("number")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--student", help="Student id for a single PATH (default: from its name).")
@click.pass_context
def collect(ctx, number, paths, student):
    """Copy submissions of module NUMBER into submitted/<student>/.

    Each PATH is a student's folder (the id is the folder's name) or a notebook file (the id
    is the file's name, or its folder's name for a file called like the module's notebook).
    """
    m = _module(number)
    course = _course(ctx)
    done, skipped = collecting.collect(course, m, list(paths), student)
    if done:
        t = table("student", "from", "to",
                  title=f"Collected {len(done)} submission(s) of {m.dirname}")
        for c in done:
            t.add_row(c.student, str(c.source),
                      course.rel(c.target) + (" (replaced)" if c.replaced else ""))
        console.print(t)
    for s in skipped:
        console.print(f"  [red]✗ skipped[/] {s.path}: {s.reason}", markup=True)
    if skipped:
        console.print(f"[yellow]{len(skipped)} path(s) skipped[/], {len(done)} collected.")
        raise SystemExit(1)
    console.print(f"Next: `tito nbgrader autograde {m.key}`")


# ---- autograde ------------------------------------------------------------------------------
def _summary_line(r: StudentResult) -> str:
    if r.status != "graded":
        return f"  [red]✗ {r.student}[/]: {r.status} [dim]({r.seconds:.0f} s)[/]"
    colour = "green" if r.score == r.max_score else ("yellow" if r.score else "red")
    return (f"  [{colour}]{r.student}[/]: {_points(r.score)}/{_points(r.max_score)} points, "
            f"{r.passed}/{len(r.tests)} tests passed [dim]({r.seconds:.0f} s)[/]")


def _details(r: StudentResult, timeout: int | None = None) -> None:
    limit = f" ({timeout} s)" if timeout else ""
    tests = {t.name for t in r.tests}
    for name in r.timed_out:
        effect = "scored 0" if name in tests else "not a test; later cells ran without it"
        console.print(f"      [magenta]⏱ {name}[/] stopped at the time limit{limit}: {effect}")
    if r.ended:
        console.print(f"      [magenta]⏱ {escape(r.ended)}[/]: the kernel was ended; that test "
                      "and every test after it scored 0 (status: timed out)")
    for change in r.locked_changes:
        console.print(f"      [bold red]⚠ {change.explain()}[/]")
    if r.awaiting:
        console.print("      [yellow]✎ awaiting manual grading:[/] "
                      + escape(", ".join(r.awaiting)))
    for flag in r.flags:
        console.print(f"      [bold red]⚑ flagged: {escape(flag)}[/]")
    for dropped in (r.second or {}).get("dropped", [])[:5]:
        console.print(f"      [dim]not run by the second grading (not a definition): "
                      f"{escape(dropped)}[/]")
    failed = [t.name for t in r.tests if t.score < t.max_score and t.name not in r.timed_out]
    if failed and r.status == "graded":
        lost = "every test" if len(failed) == len(r.tests) else ", ".join(failed)
        console.print(f"      [dim]lost points: {lost}[/]")
    if r.error:
        for line in r.error.splitlines()[-12:]:
            console.print(f"      {line}", markup=False, style="red")


@nbgrader.command()
@click.argument("number")
@click.option("--timeout", type=click.IntRange(min=1),
              help="Per-cell time limit for this run, in seconds (default: nbgrader_config.py).")
@click.option("--student", "students", multiple=True, help="Grade only this student (repeatable).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Students graded at once, each in its own sandbox.")
@click.option("--memory", type=click.IntRange(min=256), default=sandbox.Limits.memory_mb,
              show_default=True, help="Memory (address space) limit of a student's kernel, MiB.")
@click.option("--processes", type=click.IntRange(min=16), default=sandbox.Limits.processes,
              show_default=True, help="Processes and threads a student's kernel may run.")
@click.option("--unsafe", is_flag=True,
              help="Grade without the sandbox (where bubblewrap is missing, e.g. macOS): "
                   "students' code then runs with your rights.")
@click.pass_context
def autograde(ctx, number, timeout, students, jobs, memory, processes, unsafe):
    """Run `nbgrader autograde` on every submission of module NUMBER.

    Each student's notebook runs in a sandbox (bubblewrap: no network, nothing of the course
    visible, memory and process limits) whose `tinytorch` holds only the module's
    prerequisites. A student whose notebook crashes nbgrader or hangs is reported and the
    others are still graded; a cell that runs past the time limit is interrupted and scores
    zero; code that imports what it should write, or reaches for the course, is flagged.
    """
    m = _module(number)
    course = _course(ctx)
    settings = course.settings()
    if not course.release_notebook(m).is_file():
        raise Failure(f"module {m.key} is not released in this course: run `tito nbgrader "
                      f"release {m.key}` first (it records the tests in the gradebook).")
    submitted = course.students(m)
    chosen = list(students) or submitted
    missing = [s for s in chosen if s not in submitted]
    if missing:
        raise Failure(f"no submission of {m.dirname} for {', '.join(missing)} in submitted/ "
                      f"(there are: {', '.join(submitted) or 'none'}).")
    if not chosen:
        raise Failure(f"no submissions of {m.dirname} in submitted/: run `tito nbgrader "
                      f"collect {m.key} PATH...` first.")
    limit = timeout or settings["timeout"] or DEFAULT_TIMEOUT
    source = "this run's --timeout" if timeout else CONFIG_NAME
    limits = sandbox.Limits(memory_mb=memory, processes=processes)
    run = autograding.prepare_run(course, m, unsafe, limits)
    provided = ", ".join(f"{n:02d}" for n in prerequisites(m.number)) or "none"
    jobs = min(jobs, len(chosen))
    console.print(f"Autograding {m.dirname} for {len(chosen)} student(s) with nbgrader, "
                  f"time limit {limit} s per cell ({source}), {jobs} at a time ...")
    console.print(f"  tinytorch in the grading kernel: prerequisites of {m.key} only "
                  f"(modules: {provided})")
    if run.sandboxed:
        console.print(f"  sandbox: bubblewrap, no network, course folder invisible, "
                      f"{memory} MiB memory, {processes} processes per student")
    else:
        console.print("  [bold red]--unsafe: no sandbox[/]: students' code runs with your "
                      "rights and can read and change the course folder")
    with run:
        results = autograding.autograde_all(
            course, m, chosen, limit, run, jobs,
            done=lambda r: (console.print(_summary_line(r)), _details(r, limit)))
    bad = [r for r in results if r.status != "graded"]
    flagged = [r for r in results if r.locked_changes]
    reaching = [r for r in results if r.flags]
    graded = len(results) - len(bad)
    console.print(f"{graded} graded, {len(bad)} not graded"
                  + (f", {len(flagged)} with changed locked cells" if flagged else "")
                  + (f", {len(reaching)} flagged for review" if reaching else "")
                  + f". Next: `tito nbgrader feedback {m.key}`, `tito nbgrader report`")
    if bad:
        raise SystemExit(1)


# ---- feedback -------------------------------------------------------------------------------
@nbgrader.command()
@click.argument("number")
@click.pass_context
def feedback(ctx, number):
    """HTML feedback for every autograded student of module NUMBER (`generate_feedback`)."""
    m = _module(number)
    course = _course(ctx)
    console.print(f"nbgrader generate_feedback {m.dirname} ...")
    run, made, ungraded = reporting.feedback(course, m)
    for student, path in made.items():
        if path:
            console.print(f"  [green]✓[/] {student}: {course.rel(path)}")
        else:
            console.print(f"  [red]✗[/] {student}: nbgrader made no feedback")
    for student in ungraded:
        console.print(f"  [yellow]-[/] {student}: not autograded, no feedback "
                      f"(`tito nbgrader autograde {m.key} --student {student}`)")
    if not run.ok:
        console.print(run.errors(), markup=False, style="red")
    if not run.ok or not all(made.values()):
        raise SystemExit(1)
    console.print(f"{len(made)} feedback file(s) in feedback/ to return to students.")


# ---- report ---------------------------------------------------------------------------------
def _report_table(title: str, headers: list[str], total: float, rows: list[list[str]]):
    t = table("student", *headers, f"total\n/{_points(total)}", title=title)
    for column in t.columns:
        column.overflow = "fold"
    t.columns[0].no_wrap = True
    for row in rows:
        t.add_row(*row)
    return t


def _cell(score: CellScore | None) -> str:
    if score is None:
        return "[dim]-[/]"
    text = _points(score.score) + ("*" if score.needs_manual else "")
    if score.score >= score.max_score:
        return f"[green]{text}[/]"
    return f"[yellow]{text}[/]" if score.score > 0 else f"[red]{text}[/]"


@nbgrader.command()
@click.argument("numbers", nargs=-1)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Where `nbgrader export` writes the CSV (default: grades.csv in the course).")
@click.pass_context
def report(ctx, numbers, csv_path):
    """Scores per student and per graded test (gradebook), and nbgrader's CSV export."""
    course = _course(ctx)
    chosen = [_module(n) for n in numbers]
    csv_path = (csv_path or course.root / "grades.csv").resolve()
    reporting.export_csv(course, csv_path, chosen)
    reports = reporting.report(course, chosen or written_modules())
    if not reports:
        console.print("No released module in the gradebook yet: `tito nbgrader release N`.")
    for rep in reports:
        names = [name for name, _ in rep.tests]
        short = [n.removeprefix("test_unit_") for n in names]
        total = sum(p for _, p in rep.tests)
        title = (f"{rep.module.dirname}: {len(rep.students)} student(s), "
                 f"{len(names)} graded tests")
        rows, notes = [], []
        for r in rep.students:
            by_name = {s.name: s for s in r.tests}
            said = []
            if r.status != "graded":
                said.append("not graded: run `tito nbgrader autograde "
                            f"{rep.module.key} --student {r.student}`")
            if r.stale:
                said.append("submitted again after grading: autograde again")
            if r.timed_out:
                said.append("stopped at the time limit: " + ", ".join(r.timed_out))
            if r.ended:
                said.append(f"{r.ended}: the kernel was ended; it and every later test scored 0")
            if r.awaiting:
                said.append("awaiting manual grading: " + ", ".join(r.awaiting))
            said += [c.explain() for c in r.locked_changes]
            said += [f"flagged: {flag}" for flag in r.flags]
            notes += [(r.student, text) for text in said]
            graded = r.status == "graded"
            rows.append([r.student + (" [yellow]![/]" if said else ""),
                         *[_cell(by_name.get(n)) if graded else "[dim]-[/]" for n in names],
                         _points(r.score) if graded else "[dim]not graded[/]"])
        # Test names as headers when they fit the terminal, else numbers and a legend: the
        # table stays readable at any width (COLUMNS), nothing is cut off.
        headers = [f"{s}\n/{_points(p)}" for s, (_, p) in zip(short, rep.tests)]
        t = _report_table(title, headers, total, rows)
        legend = False
        wide = console.options.update(max_width=10**5)
        if Measurement.get(console, wide, t).maximum > console.width:
            t = _report_table(title, [f"#{i}\n/{_points(p)}" for i, (_, p)
                                      in enumerate(rep.tests, 1)], total, rows)
            legend = True
        console.print(t)
        if legend:
            for i, (name, points) in enumerate(rep.tests, 1):
                console.print(f"  #{i} {name} ({_points(points)} points)")
        if any(s.needs_manual for r in rep.students for s in r.tests):
            console.print("  [dim]* zero until graded by hand in nbgrader (formgrader)[/]")
        for student, text in notes:
            console.print(f"  [yellow]![/] {escape(student)}: {escape(text)}")
    console.print(f"CSV (nbgrader export): {csv_path}; one row per student and assignment, "
                  "`not graded` (not 0) where no notebook was graded, and a status column")
