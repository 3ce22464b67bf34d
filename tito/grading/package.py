"""Grading module N against N's prerequisites only: the package the graded code imports.

Every module that N does not build on (N's own included) is a placeholder whose ImportError
names the module, so a submission cannot pass by importing the reference solution.
"""

from __future__ import annotations

from pathlib import Path

from ..course.registry import MODULES, Module, get_module, prerequisites

GRADING_PLACEHOLDER = "# PLACEHOLDER written by `tito nbgrader autograde`"
# What a kernel says when a notebook imports what grading does not provide (see below).
_NOT_PROVIDED = ("does not build on", "the module being graded", "comes from module")


def _placeholder(target: Module, graded: Module, provided: list[Module]) -> str:
    if target.number == graded.number:
        why = (f"tinytorch.{target.target} is module {target.key} ({target.title}), the module "
               "being graded: its code must be written in this notebook, not imported.")
    else:
        have = ", ".join(p.key for p in provided) or "none"
        why = (f"tinytorch.{target.target} is module {target.key} ({target.title}), which "
               f"module {graded.key} ({graded.title}) does not build on: grading {graded.key} "
               f"provides only its prerequisites (modules: {have}).")
    return f"{GRADING_PLACEHOLDER}\nraise ImportError({why!r})\n"


def prerequisite_package(m: Module, dest: Path) -> Path:
    """``dest/tinytorch``: the reference exports of ``prerequisites(m)`` only.

    Every other module's file (``m``'s own included) is a placeholder whose ImportError names
    the module; the package's ``__init__`` files say which module a missing name comes from.
    """
    from ..course.exporter import init_files, reference_export, reference_plan, write_plan

    provided = [get_module(n) for n in prerequisites(m.number)]
    dest.mkdir(parents=True, exist_ok=True)
    plan = reference_plan(only=provided, root=dest)
    present = {p.number: reference_export(p).names for p in provided}
    missing: dict[str, Module] = {}
    for other in MODULES:
        if other.number in present:
            continue
        plan[other.target_path] = _placeholder(other, m, provided)
        if other.written:
            for name in reference_export(other).names:
                if not any(name in names for names in present.values()):
                    missing.setdefault(name, other)
    plan.update(init_files(present, missing, f"grading module {m.key}: prerequisites only"))
    write_plan(dest, plan)
    return dest
