"""Snapshots of what the tests rely on, compared after every cell of graded code.

The second half of the guard (the audit hook is ``protect.py``): ``watched_modules`` names the
modules whose names the tests use (NumPy and its submodules, the builtins, the standard modules
the graders use, the given helpers); ``make_checker`` snapshots them before any student code
runs and, after each cell, names what changed and puts it back. Like ``protect.py``, this file
imports nothing of tito: it is copied into the sandbox, where tito is not.
"""

from __future__ import annotations

import builtins
import os
import sys

_MISSING = object()


def make_checker(modules: dict, namespace: dict | None = None, watch_sys_hooks: bool = True,
                 ignore: tuple = ()):
    """Snapshots of ``modules`` (name -> module) taken now; returns the functions that compare.

    ``check(names=True)``: what changed since, as sentences, each change put back (a name
    rebound, deleted, or added to NumPy or the builtins, a watched module replaced or removed
    in ``sys.modules``, a trace function left installed; with
    ``names``, a protected name of ``namespace`` rebound). ``protect(before)``: names that a
    trusted cell bound in ``namespace`` (compared with the dict ``before`` it ran) become
    protected. ``add(name, module)``: a module to watch from now on. ``ignore``: names (of
    a module, of the builtins or of ``namespace``) that their owner changes on its own
    (IPython's ``_i``, ``Out``, ``input``...).
    """
    _vars = builtins.vars
    _isinstance = builtins.isinstance
    _module_type = type(sys)
    _gettrace, _getprofile = sys.gettrace, sys.getprofile
    _settrace, _setprofile = sys.settrace, sys.setprofile
    _dict = dict
    _list = list
    watched: dict = {}
    imported: dict = {}  # name -> the module ``sys.modules`` held for it when watched
    protected: dict = {}
    ignored = frozenset(ignore)
    hooks = (_gettrace(), _getprofile())

    _callable, _float = builtins.callable, float

    _modules = sys.modules  # the dict itself: ``from x import y`` reads x from it

    def add(name, module):
        # What a test relies on: functions, classes and modules (a module's data, such as
        # module 01's random generator, is the library's to change), and NumPy's constants.
        watched[name] = (module, {k: v for k, v in _vars(module).items()
                                  if (_callable(v) or _isinstance(v, _module_type)
                                      or (name == "numpy" and _isinstance(v, _float)))
                                  and k not in ignored})
        if _modules.get(name) is module:
            imported[name] = module

    for name, module in modules.items():
        add(name, module)

    strict_additions = ("builtins", "numpy")

    def check(names=True):
        problems = []
        for name, module in _list(imported.items()):
            # a module swapped in sys.modules: a test's `from tinytorch.core.tensor import
            # hidden_cases` (or a later `import numpy`) would get the student's stand-in
            if _modules.get(name) is not module:
                problems.append(f"it replaced sys.modules[{name!r}]")
                _modules[name] = module
        for name, (module, before) in _list(watched.items()):
            now = _vars(module)
            for key, value in before.items():
                current = now.get(key, _MISSING)
                if current is not value:
                    problems.append(f"it replaced {name}.{key}")
                    now[key] = value
            if name in strict_additions:
                for key in [k for k in now if k not in before and k not in ignored]:
                    if _callable(now[key]) and not _isinstance(now[key], _module_type):
                        problems.append(f"it added {name}.{key}")
                        del now[key]
        if names and namespace is not None:
            for key, value in protected.items():
                if namespace.get(key, _MISSING) is not value:
                    problems.append(f"it redefined `{key}`, which a locked cell of the release "
                                    "defines")
                    namespace[key] = value
        if watch_sys_hooks and (_gettrace(), _getprofile()) != hooks:
            problems.append("it installed a trace or profile function (sys.settrace/setprofile)")
            _settrace(hooks[0])
            _setprofile(hooks[1])
        return problems

    def protect(before):
        if namespace is None:
            return
        for key, value in namespace.items():
            if (key not in before or before[key] is not value) and key not in ignored:
                protected[key] = value

    return {"check": check, "protect": protect, "add": add}


def watched_modules(helpers=()) -> dict:
    """The modules whose names the tests rely on: NumPy and every submodule loaded, the
    builtins, the standard modules the graders use, and ``helpers`` (imported here when they
    can be: a placeholder's ImportError is the test's business, not the guard's)."""
    import importlib

    import numpy

    for sub in ("numpy.testing", "numpy.linalg", "numpy.random", "numpy.fft"):
        try:
            importlib.import_module(sub)
        except Exception:  # noqa: BLE001 - a NumPy without it: nothing to watch
            pass
    found = {"builtins": builtins, "json": sys.modules["json"] if "json" in sys.modules
             else importlib.import_module("json"), "os": os, "os.path": os.path}
    for name in ("io", "traceback", "math", "json.encoder"):
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            pass
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "numpy" or name.startswith("numpy.")):
            found[name] = module
    del numpy
    for name in helpers:
        try:
            found[name] = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - see above
            pass
    return found
