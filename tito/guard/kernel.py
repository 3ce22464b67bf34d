"""nbgrader's kernel under the guard: ipykernel, with ``protect.py`` and ``snapshots.py``
around every cell.

`tito nbgrader autograde` names this kernel; inside the sandbox it runs as::

    python -I -B /grading/guard/kernel.py CONFIG -f CONNECTION_FILE

CONFIG (JSON): ``package`` (the folder holding the prerequisite ``tinytorch``), ``helpers``
(modules the locked cells import), ``own_module``, ``trusted`` (the source of every locked
cell: the tests and the given code).

Before every cell is compiled, the kernel compares with what they were before any cell ran:
NumPy and its submodules, the builtins and the helpers (as the driver does), and IPython's
own machinery: the input transformers, the AST transformers, ``run_cell`` and the methods
around it, ``showtraceback``, the event callbacks. What a student's cell changed is put back
and reported, and the cell that would have run under the change fails: a test cannot be
silenced by a transformer that rewrites it, or by a ``run_cell`` that hides its errors. The
check runs from an audit hook (``compile``), which no cell can remove.

Not strict: IPython uses frames itself, so here the audit hook only records what a student's
code did (frames, the garbage collector, ctypes, processes, the network, files it reached
for); the instructor's second grading, in ``driver.py``, is the strict one.

Each finding is one line ``TITO-GUARD {"flag": ...}`` on the standard error nbgrader reads
(duplicated before ipykernel captures it into the notebook); `autograde` collects them.
"""

import json
import os
import sys

try:
    from . import protect, snapshots
except ImportError:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import protect  # type: ignore[no-redef]
    import snapshots  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "TITO-GUARD "
LIBRARIES = ("IPython", "ipykernel", "jupyter_client", "jupyter_core", "zmq", "tornado",
             "traitlets", "stack_data", "executing", "pure_eval", "comm", "debugpy",
             "matplotlib_inline", "asyncio", "matplotlib", "nest_asyncio")
SHELL_METHODS = ("run_cell", "run_cell_async", "run_code", "run_ast_nodes", "transform_cell",
                 "transform_ast", "showtraceback", "_showtraceback", "showsyntaxerror",
                 "should_run_async", "run_line_magic", "run_cell_magic", "ex", "ev")
SHELL_LISTS = ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")
# Names IPython and ipykernel change on their own between cells (history, input, display).
# IPython also deletes `__warningregistry__` before every cell (its pre_execute event): a
# locked cell that warned would otherwise look "redefined" by the next cell.
IPYTHON_NAMES = ("_", "__", "___", "_i", "_ii", "_iii", "_oh", "_ih", "_dh", "In", "Out",
                 "_exit_code", "input", "exit", "quit", "get_ipython", "display",
                 "__warningregistry__",
                 *[f"_i{n}" for n in range(1, 1000)], *[f"_{n}" for n in range(1, 1000)])


def _reporter(fd):
    write, dumps = os.write, json.dumps
    seen = set()

    def report(flag):
        if flag in seen:
            return
        seen.add(flag)
        data = ("\n" + PREFIX + dumps({"flag": flag}) + "\n").encode()
        try:
            while data:
                data = data[write(fd, data):]
        except OSError:
            pass

    return report


def _library_made(value, roots) -> bool:
    """Whether a callable (a transformer, an event callback, a method) is a library's."""
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    if code is None:
        module = getattr(value, "__module__", None) or getattr(type(value), "__module__", "")
        source = getattr(sys.modules.get(module), "__file__", "") or ""
        return source.startswith(roots)
    return code.co_filename.startswith(roots)


def _ipython_checker(shell, kernel, roots, report):
    """Check (and put back) IPython's machinery; returns the function that does it."""
    _getattr, _vars, _type, _list, _dict = getattr, vars, type, list, dict
    cls = _type(shell)
    methods = {name: _getattr(cls, name, None) for name in SHELL_METHODS}
    own = {name for name in SHELL_METHODS if name in _vars(shell)}
    lists = {name: (_getattr(shell, name), _list(_getattr(shell, name)))
             for name in SHELL_LISTS if _getattr(shell, name, None) is not None}
    manager = shell.input_transformer_manager
    manager_lists = {name: (_getattr(manager, name), _list(_getattr(manager, name)))
                     for name in ("cleanup_transforms", "line_transforms", "token_transformers")
                     if _getattr(manager, name, None) is not None}
    events = shell.events.callbacks
    callbacks = {name: _list(found) for name, found in events.items()}
    kernel_cls = _type(kernel)
    kernel_methods = {name: _getattr(kernel_cls, name, None)
                      for name in ("do_execute", "execute_request")}
    singles = {"compile": shell.compile, "displayhook": shell.displayhook,
               "display_pub": shell.display_pub, "InteractiveTB": shell.InteractiveTB,
               "SyntaxTB": shell.SyntaxTB, "custom_exceptions": shell.custom_exceptions}

    def check():
        problems = []
        for name, original in methods.items():
            if _getattr(cls, name, None) is not original:
                problems.append(f"it replaced IPython's {name}")
                setattr(cls, name, original)
            if name in _vars(shell) and name not in own:
                problems.append(f"it replaced IPython's {name}")
                delattr(shell, name)
        for name, original in kernel_methods.items():
            if _getattr(kernel_cls, name, None) is not original:
                problems.append(f"it replaced the kernel's {name}")
                setattr(kernel_cls, name, original)
            if name in _vars(kernel):
                problems.append(f"it replaced the kernel's {name}")
                delattr(kernel, name)
        for table, holder in ((lists, shell), (manager_lists, manager)):
            for name, (the_list, items) in table.items():
                now = _getattr(holder, name, None)
                if now is not the_list:
                    problems.append(f"it replaced IPython's {name}")
                    setattr(holder, name, the_list)
                added = [t for t in the_list if not any(t is i for i in items)]
                gone = [i for i in items if not any(t is i for t in the_list)]
                if gone or any(not _library_made(t, roots) for t in added):
                    problems.append(f"it changed IPython's {name}")
                    the_list[:] = items + [t for t in added if _library_made(t, roots)]
        if shell.events.callbacks is not events:
            problems.append("it replaced IPython's event callbacks")
            shell.events.callbacks = events
        for name, items in callbacks.items():
            now = events.get(name, [])
            added = [c for c in now if not any(c is i for i in items)]
            gone = [i for i in items if not any(c is i for c in now)]
            if gone or any(not _library_made(c, roots) for c in added):
                problems.append(f"it changed IPython's {name} callbacks")
                events[name] = items + [c for c in added if _library_made(c, roots)]
            else:
                items[:] = _list(now)  # a library's new callback is part of the baseline now
        for name, original in singles.items():
            if _getattr(shell, name, None) is not original:
                problems.append(f"it replaced IPython's {name}")
                setattr(shell, name, original)
        return problems

    return check


def main(argv):
    report_fd = os.dup(2)  # before ipykernel sends fd 2 to the notebook
    config = json.load(open(argv[0], encoding="utf-8"))
    rest = argv[1:]
    report = _reporter(report_fd)
    sys.path.insert(0, config["package"])
    sys.path.append(os.getcwd())
    os.environ.setdefault("MPLBACKEND", "Agg")
    trusted = {text.strip() for text in config.get("trusted", [])}

    import linecache

    lines = linecache.cache

    def is_student_file(filename):
        entry = lines.get(filename)
        if entry and len(entry) > 2 and "".join(entry[2]).strip() in trusted:
            return False
        return None

    package_dir = os.path.join(config["package"], "tinytorch")
    roots = protect.library_roots([package_dir, HERE])
    guard = protect.make_guard(
        trusted_roots=roots, own_module=config.get("own_module", ""), strict=False,
        report=report, library_requesters=LIBRARIES,
        ctypes_packages=config.get("ctypes_packages", []), is_student_file=is_student_file)

    from ipykernel.kernelapp import IPKernelApp

    app = IPKernelApp.instance()
    app.initialize(rest)
    shell = app.shell
    modules = snapshots.watched_modules(config.get("helpers", []))
    ipython = _ipython_checker(shell, app.kernel, tuple(roots), report)
    state = {"before": None, "trusted": False, "checker": None}
    _dict = dict

    def around(event, args):
        # Before a cell's code is compiled: check and put back; the cell that would run
        # under a change fails. (IPython compiles each statement of a cell on its own.)
        if event != "compile" or len(args) < 2 or not isinstance(args[1], str):
            return
        name = args[1]
        if not (name.startswith("<ipython-input") or f"{os.sep}ipykernel_" in name):
            return
        if state["checker"] is None:
            # The baseline is taken as the first cell starts, before any cell's code ran:
            # IPython's builtins (get_ipython, exit, ...) are in place by then.
            state["checker"] = snapshots.make_checker(modules, shell.user_ns,
                                                    watch_sys_hooks=False, ignore=IPYTHON_NAMES)
            return
        try:
            problems = ipython() + state["checker"]["check"](names=True)
        except Exception as error:  # noqa: BLE001 - a state too broken to compare
            problems = [f"it left IPython in a state the grader cannot check ({error})"]
        if problems:
            for problem in dict.fromkeys(problems):
                report(problem)
            raise RuntimeError("this cell did not run: a cell before it changed what the "
                               "tests rely on (" + "; ".join(dict.fromkeys(problems)) + ")")

    def pre(info=None):
        source = getattr(info, "raw_cell", "") or ""
        state["trusted"] = source.strip() in trusted
        state["before"] = _dict(shell.user_ns) if state["trusted"] else None

    def post(result=None):
        if state["trusted"] and state["before"] is not None and state["checker"] is not None:
            state["checker"]["protect"](state["before"])
        state["before"] = None

    shell.events.register("pre_run_cell", pre)
    shell.events.register("post_run_cell", post)
    ipython()  # the two callbacks above are part of the baseline
    sys.addaudithook(around)
    guard["arm"]()
    app.start()


if __name__ == "__main__":
    main(sys.argv[1:])
