"""`tito init --force` after the course has changed: bring the notebooks a student was
handed up to date in their given cells, without touching the student's work.

A notebook is updated only when the student changed nothing but their solution cells: it
then equals the release it came from once each solution cell is set aside. The new
notebook is the new release with the student's solution cells (by nbgrader id) put back,
so lesson text, given code, tests and demos are the course's current ones. Anything else,
a cell the student added, moved or edited outside their solutions, or an exercise the new
release dropped while it holds the student's code, leaves the notebook as it is; the
caller says why and what to do. The caller keeps a backup of every notebook it rewrites.
"""

from __future__ import annotations

import copy


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_solution(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def _outline(notebook) -> list[tuple]:
    """The notebook's cells as (type, source), each solution cell as its id alone."""
    return [("solution", _grade_id(c)) if _is_solution(c) else (c.cell_type, c.source)
            for c in notebook.cells]


def release_changed(old, new) -> bool:
    """Whether two releases of a module differ in any cell (type, source or nbgrader id)."""
    return ([(c.cell_type, c.source, _grade_id(c)) for c in old.cells]
            != [(c.cell_type, c.source, _grade_id(c)) for c in new.cells])


def code_changed(old, new) -> bool:
    """Whether the given code differs (the code cells that are not solutions), i.e. whether
    a package built from the old release lacks something of the new one."""
    def given(notebook):
        return [c.source for c in notebook.cells if c.cell_type == "code" and not _is_solution(c)]
    return given(old) != given(new)


def refresh_notebook(student, old, new):
    """(updated notebook, "") when `student`, handed out from release `old`, can take the
    given cells of release `new`; (None, why not) when it cannot; (None, "") when the
    release did not change.
    """
    if not release_changed(old, new):
        return None, ""
    if _outline(student) != _outline(old):
        return None, ("it has cells you added, moved or edited outside your solution cells, "
                      "and those are yours to keep")
    mine = {_grade_id(c): c for c in student.cells if _is_solution(c)}
    stubs = {_grade_id(c): c.source for c in old.cells if _is_solution(c)}
    kept = {_grade_id(c) for c in new.cells if _is_solution(c)}
    dropped = [gid for gid, cell in mine.items() if gid not in kept and cell.source != stubs[gid]]
    if dropped:
        return None, (f"the new release no longer has the exercise {', '.join(dropped)}, which "
                      "holds your code")
    updated = copy.deepcopy(new)
    updated.metadata = copy.deepcopy(student.metadata)  # the workspace's Jupyter kernel
    for cell in updated.cells:
        yours = mine.get(_grade_id(cell)) if _is_solution(cell) else None
        if yours is not None:
            cell.source = yours.source
            if cell.cell_type == "code" and yours.cell_type == "code":
                cell.outputs = copy.deepcopy(yours.outputs)
                cell.execution_count = yours.execution_count
    return updated, ""
