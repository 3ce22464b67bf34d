"""Reading lessons: jupytext sources and student notebooks, as one kind of object.

A lesson is a list of cells. Code cells may carry directives on their first lines:

    #| default_exp core.tensor     the export target of the whole module
    #| export                      this cell goes into the package (names in __all__)
    #| exporti                     exported too, but internal: not re-exported

and nbgrader metadata (``grade``, ``grade_id``, ``points``, ``solution``, ``locked``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import NotebookError
from .solutions import is_marker

_DIRECTIVE = re.compile(r"^#\|\s*(\w+)\s*(.*?)\s*$")


@dataclass
class Cell:
    index: int  # position in the notebook, counting every cell from 0
    kind: str  # "code" or "markdown"
    source: str
    nbgrader: dict
    origin: str = ""  # when run: "release" (a locked cell from the release) or "yours"

    @property
    def directives(self) -> dict[str, str]:
        found = {}
        for line in self.source.splitlines():
            match = _DIRECTIVE.match(line)
            if match:
                found[match.group(1)] = match.group(2)
            elif line.strip():
                break  # directives only at the top of a cell
        return found

    @property
    def is_export(self) -> bool:
        """``#| export`` (public API) or ``#| exporti`` (exported, kept out of ``__all__``)."""
        return self.kind == "code" and ("export" in self.directives or "exporti" in self.directives)

    @property
    def is_public_export(self) -> bool:
        return self.kind == "code" and "export" in self.directives

    @property
    def is_graded(self) -> bool:
        return self.kind == "code" and bool(self.nbgrader.get("grade"))

    @property
    def grade_id(self) -> str:
        return self.nbgrader.get("grade_id", f"cell-{self.index}")

    @property
    def points(self) -> float:
        return float(self.nbgrader.get("points", 0))

    def code(self, keep_solution_markers: bool = False) -> str:
        """The source without directive lines (and without solution markers)."""
        lines = []
        for line in self.source.splitlines():
            if _DIRECTIVE.match(line):
                continue
            if not keep_solution_markers and is_marker(line):
                continue
            lines.append(line)
        return "\n".join(lines).strip("\n")


class _Node(dict):
    """A notebook, cell or metadata dict read as attributes, like nbformat's NotebookNode."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _node(value):
    if isinstance(value, dict):
        return _Node({k: _node(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_node(v) for v in value]
    return value


def read_ipynb(path: Path):
    """An ``.ipynb`` (format 4) read with the json module: nbformat takes seconds to import
    (its schema validator), and grading needs only the cells, their sources and metadata."""
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text)
    if (not isinstance(data, dict) or data.get("nbformat") != 4
            or not isinstance(data.get("cells"), list)):
        raise ValueError("not a version-4 Jupyter notebook (no 'nbformat': 4 and 'cells' list)")
    for cell in data["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise ValueError("a cell without a valid cell_type")
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        if not isinstance(source, str):
            raise ValueError("a cell whose source is not text")
        cell["source"] = source
        if not isinstance(cell.get("metadata", {}), dict) or not isinstance(
                cell.get("metadata", {}).get("nbgrader", {}) or {}, dict):
            raise ValueError("a cell whose metadata is not a JSON object")
        cell.setdefault("metadata", {})
    return _node(data)


def load_notebook(path: Path):
    """Read a ``.py`` lesson (jupytext) or an ``.ipynb`` notebook; never writes."""
    path = Path(path)
    if not path.is_file():
        raise NotebookError(f"{path} does not exist.")
    if path.suffix != ".py":
        try:
            return read_ipynb(path)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise NotebookError(
                f"{path} is not a valid notebook (it is not readable JSON: {error}). "
                "The file was left as it is."
            ) from None
        except ValueError as error:
            raise NotebookError(
                f"{path} is not a valid notebook ({error}). The file was left as it is."
            ) from None
    import nbformat  # imported here: it takes a second or more, and many commands never need it

    try:
        import jupytext

        return jupytext.read(path)
    except (json.JSONDecodeError, nbformat.reader.NotJSONError) as error:
        raise NotebookError(
            f"{path} is not a valid notebook (it is not readable JSON: {error}). "
            "The file was left as it is."
        ) from None
    except Exception as error:  # nbformat validation and jupytext parse errors
        raise NotebookError(
            f"{path} could not be read as a notebook: {error}. The file was left as it is."
        ) from None


def cells_of(notebook) -> list[Cell]:
    cells = []
    for i, cell in enumerate(notebook.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
        cells.append(Cell(i, cell.cell_type, cell.source, dict(meta)))
    return cells


def read_cells(path: Path) -> list[Cell]:
    return cells_of(load_notebook(path))


def default_exp(cells: list[Cell]) -> str | None:
    for cell in cells:
        if cell.kind == "code" and "default_exp" in cell.directives:
            return cell.directives["default_exp"]
    return None


GRADING_FLAGS = ("grade", "solution", "locked", "task")


def to_ipynb(path: Path):
    """A lesson source as a notebook with a python3 kernelspec, ready for nbgrader.

    Cells that are neither graded, solutions, locked nor tasks are ordinary cells to
    nbgrader; their metadata (kept in lessons only to name them, e.g. ``analysis-speed``)
    is dropped, since nbgrader looks such cells up in its gradebook and cannot find them.
    """
    notebook = load_notebook(path)
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is not None and not any(meta.get(flag) for flag in GRADING_FLAGS):
            del cell.metadata["nbgrader"]
    notebook.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3", "language": "python",
    }
    notebook.metadata.setdefault("language_info", {"name": "python"})
    return notebook
