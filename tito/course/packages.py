"""Parts of the student's package that milestones and benchmarks use once they exist.

A module that is not completed is simply absent from the package, or half there: `tito
export` of an unfinished lesson writes its early cells only. So "is module 17 there?"
means "does it import, and does it have the name its last cell defines?".
"""

from __future__ import annotations

import importlib


def completed(module_path, needs):
    """The module at `module_path` if it imports and defines `needs`, else None."""
    try:
        module = importlib.import_module(module_path)
    except (ImportError, AttributeError):  # absent, or its own imports are not there yet
        return None
    return module if hasattr(module, needs) else None


def acceleration():
    """tinytorch.perf.acceleration when module 17 is completed, else None."""
    return completed("tinytorch.perf.acceleration", "use_fast_kernels")
