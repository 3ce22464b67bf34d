"""nbgrader as tito runs it: nbgrader's own application, with four changes for grading.

``process.run_nbgrader`` starts ``python -m tito.grading.nbgrader_app ARGS`` (the instructor's
process, never a student's); it runs ``nbgrader ARGS`` with this configuration on top of
nbgrader's defaults (the course's ``nbgrader_config.py`` is still read after it):

- **a cell past its time limit that ignores the interrupt** (nbgrader 0.9.6 then aborts the
  whole notebook with CellTimeoutError: "not graded"): the kernel is ended, that cell gets a
  ``CellTimeoutError`` output and every code cell after it a ``NotRunError`` output, so that
  test and every one after it score zero and the rest of the notebook is graded. A kernel that
  dies (the memory limit, ``os._exit``) is treated the same way, with ``DeadKernelError``.
- **bounded output**: a cell's output beyond ``OUTPUT_LIMIT`` characters is dropped as it
  arrives (one line says so), so endless output grows neither nbgrader's memory nor the
  graded notebook.
- **deleted tests are put back**: a locked cell of the release missing from the submission is
  inserted where the release has it (from the gradebook's copy, hidden tests included) and
  graded like any other, as `tito module complete` does; it is marked in the cell's metadata
  (``tito.restored``), as is a locked cell nbgrader restored because it was edited.
- **feedback**: long outputs, sources and attachments are cut (``FEEDBACK_LIMIT``...), and
  math is written as MathML when ``latex2mathml`` is installed (it shows without MathJax,
  which needs the network); ``reports.feedback`` then names each test in the summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbformat.notebooknode import NotebookNode
from nbgrader.apps.baseapp import NbGrader
from nbgrader.apps.nbgraderapp import NbGraderApp
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    Execute,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    NbGraderPreprocessor,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)
from traitlets import Unicode
from traitlets.config import Config

OUTPUT_LIMIT = 200_000  # characters of output kept per cell while grading
FEEDBACK_LIMIT = 20_000  # characters of one cell's outputs shown in the feedback
ATTACHMENT_LIMIT = 1_000_000  # bytes of a markdown cell's attachments kept in the feedback
SOURCE_LIMIT = 100_000  # characters of one cell's source shown in the feedback


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def _size(output) -> int:
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    if output.get("output_type") == "error":
        return sum(len(t) for t in output.get("traceback", []))
    return sum(len(str(v)) for v in output.get("data", {}).values())


class GuardedExecute(Execute):
    """nbgrader's Execute, with the kernel ended at an unanswered time limit and the output
    of each cell bounded (see the module's docstring)."""

    def preprocess(self, nb, resources=None, km=None):
        self._ended = None
        self._written = 0
        self._cut = False
        return super().preprocess(nb, resources, km=km)

    def preprocess_cell(self, cell, resources, index):
        if self._ended is not None:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error("NotRunError", self._ended)]
                cell.execution_count = None
            return cell, resources
        self._written = 0
        self._cut = False
        try:
            return super().preprocess_cell(cell, resources, index)
        except Exception as error:  # noqa: BLE001 - nbclient's timeout and dead-kernel errors
            kind = type(error).__name__
            if kind not in ("CellTimeoutError", "DeadKernelError", "TimeoutError"):
                raise
            name = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"
            if kind == "DeadKernelError":
                said = ("the kernel died in this cell (the sandbox's memory limit, os._exit, or "
                        "a crash)")
                self._ended = f"not run: the kernel died in {name}"
                ename = "DeadKernelError"
            else:
                said = (f"this cell ran past the time limit ({self.timeout} s) and did not "
                        "stop when interrupted: the kernel was ended")
                self._ended = (f"not run: {name} ran past the time limit and the kernel was "
                               "ended")
                ename = "CellTimeoutError"
            self.log.error("%s: %s", name, said)
            cell.outputs = [o for o in cell.get("outputs", []) if o.get("output_type") != "error"]
            cell.outputs.append(_error(ename, said))
            try:
                from jupyter_core.utils import run_sync

                run_sync(self.km.shutdown_kernel)(now=True)
            except Exception:  # noqa: BLE001 - it may be gone already
                pass
            return cell, resources

    def output(self, outs, msg, display_id, cell_index):
        if self._cut:
            return None
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None:
            self._written += _size(out)
            if self._written > OUTPUT_LIMIT:
                self._cut = True
                if out in outs:
                    outs.remove(out)
                outs.append(NotebookNode(
                    output_type="stream", name="stdout",
                    text=f"\n[output past {OUTPUT_LIMIT:,} characters was dropped by the "
                         "grader]\n"))
        return out


class MarkRestoredCells(NbGraderPreprocessor):
    """Before nbgrader's OverwriteCells: mark each locked cell whose checksum differs (nbgrader
    then puts the original back) with ``tito.restored = "edited"``."""

    def preprocess_cell(self, cell, resources, index):
        from nbgrader import utils

        meta = cell.metadata.get("nbgrader", {})
        if meta.get("locked") or meta.get("grade"):
            try:
                changed = "checksum" in meta and utils.compute_checksum(cell) != meta["checksum"]
            except Exception:  # noqa: BLE001 - metadata broken beyond a checksum
                changed = True
            if changed:
                cell.metadata.setdefault("tito", {})["restored"] = "edited"
        return cell, resources


class RestoreDeletedCells(NbGraderPreprocessor):
    """After OverwriteCells: every locked cell of the release missing from the submission is
    put back where the release has it, from the gradebook's copy (``tito.restored = "deleted"``)."""

    course_root = Unicode("", help="The course folder (its release/ gives the cells' order).").tag(
        config=True)

    def preprocess(self, nb, resources):
        import nbformat
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        notebook_id, assignment = info["notebook"], info["assignment"]
        with Gradebook(info["db_url"]) as gb:
            master = gb.find_notebook(notebook_id, assignment)
            points = {c.name: float(c.max_score) for c in master.grade_cells}
            locked = {c.name: (c.cell_type, c.source, c.checksum) for c in master.source_cells
                      if c.locked}
        present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
        missing = [name for name in locked if name not in present]
        if not missing:
            return nb, resources
        release = Path(self.course_root) / "release" / assignment / f"{notebook_id}.ipynb"
        order: list[str] = []
        metadata: dict = {}
        if release.is_file():
            for c in nbformat.read(release, as_version=4).cells:
                gid = c.metadata.get("nbgrader", {}).get("grade_id")
                if gid:
                    order.append(gid)
                    metadata[gid] = dict(c.metadata.get("nbgrader", {}))
        for name in sorted(missing, key=lambda n: order.index(n) if n in order else len(order)):
            cell_type, source, checksum = locked[name]
            meta = metadata.get(name) or {"grade": name in points, "grade_id": name,
                                          "locked": True, "schema_version": 3,
                                          "solution": False, "task": False}
            meta["checksum"] = checksum
            if name in points:
                meta["points"] = points[name]
            if cell_type == "code":
                cell = nbformat.v4.new_code_cell(source)
            else:
                cell = nbformat.v4.new_markdown_cell(source)
            cell.metadata["nbgrader"] = meta
            cell.metadata["tito"] = {"restored": "deleted"}
            earlier = order[:order.index(name)] if name in order else []
            position = 0
            for i, c in enumerate(nb.cells):
                if c.metadata.get("nbgrader", {}).get("grade_id") in earlier:
                    position = i + 1
            nb.cells.insert(position, cell)
            self.log.warning("locked cell %s was missing from the submission: put back", name)
        return nb, resources


class BoundedFeedback(NbGraderPreprocessor):
    """Feedback of a bounded size, with math that shows without the network."""

    def preprocess_cell(self, cell, resources, index):
        if len(cell.source) > SOURCE_LIMIT:
            cell.source = cell.source[:SOURCE_LIMIT] + (
                f"\n... ({len(cell.source) - SOURCE_LIMIT:,} more characters not shown)")
        if cell.cell_type == "markdown":
            attachments = cell.get("attachments") or {}
            if sum(len(str(v)) for v in attachments.values()) > ATTACHMENT_LIMIT:
                cell.attachments = {}
                cell.source += "\n\n*(attachments larger than the feedback allows were left out)*"
            cell.source = mathml(cell.source)
        if cell.cell_type == "code" and cell.get("outputs"):
            kept, used = [], 0
            for out in cell.outputs:
                size = _size(out)
                if used + size > FEEDBACK_LIMIT:
                    kept.append(NotebookNode(
                        output_type="stream", name="stdout",
                        text=f"\n[further output not shown: past {FEEDBACK_LIMIT:,} characters]\n"))
                    break
                kept.append(out)
                used += size
            cell.outputs = kept
        return cell, resources


class HiddenTestsLeftOut(NbGraderPreprocessor):
    """Feedback without the hidden test cases (``reports.hide_hidden_tests``)."""

    def preprocess_cell(self, cell, resources, index):
        from .reports import hide_hidden_tests

        hide_hidden_tests(cell)
        return cell, resources


def mathml(markdown: str) -> str:
    """``$...$`` and ``$$...$$`` in ``markdown`` as MathML, when latex2mathml is installed."""
    try:
        from latex2mathml.converter import convert
    except ImportError:
        return markdown
    import re

    def one(match, display):
        try:
            return convert(match.group(1).strip(),
                           display="block" if display else "inline")
        except Exception:  # noqa: BLE001 - leave what it cannot read as it was
            return match.group(0)

    text = re.sub(r"\$\$(.+?)\$\$", lambda m: one(m, True), markdown, flags=re.S)
    return re.sub(r"(?<![\\$])\$([^$\n]+?)\$", lambda m: one(m, False), text)


def tito_config(root: str = "") -> Config:
    c = Config()
    c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec,
                                          MarkRestoredCells, OverwriteCells,
                                          RestoreDeletedCells, CheckCellMetadata]
    c.Autograde.autograde_preprocessors = [GuardedExecute, IgnorePattern,
                                           ClearMetadataPreprocessor, LimitOutput,
                                           SaveAutoGrades, AssignLatePenalties,
                                           CheckCellMetadata]
    c.RestoreDeletedCells.course_root = root
    c.GenerateFeedback.preprocessors = [GetGrades, HiddenTestsLeftOut, BoundedFeedback,
                                        CSSHTMLHeaderPreprocessor]
    return c


def main(argv: list[str]) -> None:
    root = next((a.split("=", 1)[1] for a in argv if a.startswith("--CourseDirectory.root=")), "")
    config = tito_config(root)
    NbGrader.build_extra_config = lambda self: config
    NbGraderApp.launch_instance(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
