"""What a run of a notebook's cells gives back: one result per cell, and the whole report.

The classes live in ``tito/guard/results.py`` (``tito/guard/runs.py``, the driver that makes
them, re-exports them; the instructor's second grading uses them too); they are named here for
the student's side.
"""

from ..guard.runs import CellResult, RunReport

__all__ = ["CellResult", "RunReport"]
