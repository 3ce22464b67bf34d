"""What graded code must leave alone, checked from inside the process that runs it.

One guard for both graders: the process that runs `tito module complete` and the instructor's
second grading (``driver.py``), and nbgrader's own kernel during `tito nbgrader autograde`
(``kernel.py``). This file imports nothing of tito: it is copied into the sandbox, where
tito is not. ``ctypes_packages_for`` and ``scrub_environment``, at the end, are tito's side:
what the graders give the guard and the environment they start it in.

Two parts:

- **an audit hook** (``sys.addaudithook``; it cannot be removed) that, while a student's code
  is on the call stack, refuses what would let it reach the grader's state or change what the
  tests run: frames (``sys._getframe``, a traceback's or a generator's frame), the garbage
  collector's lists of objects, ctypes, trace and profile functions, new audit hooks, swapping
  the code or defaults of a function it did not write, new processes, reading the course's
  reference solution or the process's own memory, and importing the module being graded. A
  refusal the student's code catches is still recorded, and reported after the cell.
- **snapshots** of NumPy (every submodule), the builtins and the given helpers, taken before any
  student code runs; after every cell each name must still be the same object. What changed
  is named and put back. They are in ``snapshots.py``, copied beside this file.

Everything the checks call is bound here, when the guard is made, before any student code runs:
a cell that replaces ``builtins.vars`` or ``os.path.realpath`` changes what the student's own
code sees, not what the guard uses.

Whose code is running is read from each frame's file name: a cell the grader trusts (a locked
cell of the release) has a label the driver gives it, a library has a file under the Python
installation or the package under test; anything else (a student's cell, code the student
compiled) is the student's.
"""

from __future__ import annotations

import builtins
import os
import sys

# Events refused while a student's code is on the stack, with the one-line reason a student
# sees. Each names what was refused and why, without saying how it could have been used.
FRAMES = "it looked into the call stack (frames), which graded code may not do"
REASONS = {
    "sys._getframe": FRAMES,
    "sys._current_frames": FRAMES,
    "sys._current_exceptions": FRAMES,
    "gc.get_objects": "it searched the interpreter's objects (gc), which graded code may not do",
    "gc.get_referrers": "it searched the interpreter's objects (gc), which graded code may not do",
    "gc.get_referents": "it searched the interpreter's objects (gc), which graded code may not do",
    "sys.settrace": "it installed a trace or profile function (sys.settrace/setprofile)",
    "sys.setprofile": "it installed a trace or profile function (sys.settrace/setprofile)",
    "sys.addaudithook": "it added an audit hook (sys.addaudithook), which graded code may not do",
    "sys.monitoring.register_callback": "it installed a monitoring callback (sys.monitoring)",
    "marshal.loads": "it loaded compiled code (marshal), which graded code may not do",
    "marshal.load": "it loaded compiled code (marshal), which graded code may not do",
}
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
CODE_ATTRIBUTES = {"__code__", "__defaults__", "__kwdefaults__"}
PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                  "os.fork", "os.forkpty", "os.startfile", "pty.spawn", "_winapi.CreateProcess"}
NETWORK_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}

# Library functions that ask for a frame for themselves (a module's name, a warning's caller,
# a traceback's lines): allowed although a student's code called them. The second value says
# whether the function hands the frame back to its caller: then only a caller in the same
# file (the library's own code) is allowed, never a student's cell.
_STDLIB = os.path.dirname(os.path.abspath(os.__file__))
ALLOWED_REQUESTERS = {
    (os.path.join(_STDLIB, "collections", "__init__.py"), "namedtuple"): False,
    (os.path.join(_STDLIB, "typing.py"), "_caller"): False,
    (os.path.join(_STDLIB, "enum.py"), "_create_"): False,
    (os.path.join(_STDLIB, "warnings.py"), "warn"): False,
    (os.path.join(_STDLIB, "logging", "__init__.py"), "<lambda>"): True,
    (os.path.join(_STDLIB, "logging", "__init__.py"), "findCaller"): False,
    (os.path.join(_STDLIB, "traceback.py"), "extract_stack"): False,
    (os.path.join(_STDLIB, "traceback.py"), "format_stack"): False,
    (os.path.join(_STDLIB, "traceback.py"), "print_stack"): False,
    (os.path.join(_STDLIB, "traceback.py"), "clear_frames"): False,
    (os.path.join(_STDLIB, "traceback.py"), "walk_stack"): True,
    (os.path.join(_STDLIB, "traceback.py"), "walk_tb"): True,
    (os.path.join(_STDLIB, "traceback.py"), "_walk_tb_with_full_positions"): True,
}
# Installed libraries' functions of the same kind (file name, function): they use the frame
# themselves and hand back a name, never the frame.
LIBRARY_REQUESTERS = {("_index_tricks_impl.py", "__getitem__"),  # np.r_ with a string key
                      ("typing_extensions.py", "_caller")}  # a TypedDict's module name


class Refused(PermissionError):
    """What the guard raises in a student's code: a PermissionError, so `except OSError` sees it."""


def library_roots(extra=()) -> list[str]:
    """Folders whose code is the Python installation's (the standard library, site-packages)."""
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, _STDLIB}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.add(paths[key])
    roots.update(str(e) for e in extra)
    return sorted({os.path.join(os.path.realpath(r), "") for r in roots if r})


def make_guard(*, trusted_roots=(), forbidden_roots=(), own_module="", strict=True,
               report=None, ctypes_packages=(), library_requesters=(), is_student_file=None):
    """Install the audit hook; return its controls as a dict of functions.

    ``trusted_roots``: folders whose code is trusted (the Python installation, the package
    under test, this guard). Code compiled by the grader from a trusted cell is trusted by
    identity (``trust_code``). ``forbidden_roots``: folders no code may read (the course's
    reference solution). ``own_module``: the dotted name of the module being graded, which may
    not be imported while grading.

    ``strict`` (the driver): once armed, what could reach the grader's state is refused
    whoever asks, unless the asker is one of the library functions listed above: a student's
    object can run code at any moment (a destructor, a callback), so the grader's own frames
    are never safe to hand out. Not strict (nbgrader's kernel, where IPython uses frames
    itself): only what happens while a student's code is on the stack is refused, and
    nothing is raised: each event is only recorded. ``report(sentence)``: called at once for
    each (the kernel's log). ``ctypes_packages``: top-level packages that may use ctypes on a
    student's behalf (numba's compiler, in the module that teaches it). ``library_requesters``:
    folder names (``IPython``) whose code may ask for frames. ``is_student_file(filename)``:
    True/False overrides the verdict on a file name (nbgrader's kernel names its cells).

    Controls: ``arm()`` (from then on the hook acts, for good), ``in_cell(bool)`` (a cell is
    running: libraries it calls may use frames for themselves), ``take()`` (the refusals since
    the last call), ``trust_code(code)`` (a trusted cell's code object, with its nested ones),
    ``is_student(code)``.
    """
    import _thread

    _getframe = sys._getframe
    _realpath = os.path.realpath
    _fsdecode = os.fsdecode
    _exists = os.path.lexists
    _dirname = os.path.dirname
    _isinstance = builtins.isinstance
    _id = builtins.id
    _str, _bytes, _type = str, bytes, type
    _getattr = builtins.getattr
    _get_ident = _thread.get_ident
    _pathlike = os.PathLike
    sep = os.sep
    function_type = _type(make_guard)
    code_type = _type(make_guard.__code__)

    roots = tuple(sorted({os.path.join(form, "") for r in trusted_roots
                          for form in (os.path.abspath(r), _realpath(r))}))
    forbidden = tuple(os.path.join(_realpath(f), "") for f in forbidden_roots)
    own = own_module
    ctypes_dirs = tuple(f"{sep}{p}{sep}" for p in ctypes_packages)
    library_dirs = tuple(f"{sep}{p}{sep}" for p in library_requesters)
    ctypes_dir = os.path.join(_realpath(os.path.dirname(os.__file__)), "ctypes", "")
    state = {"armed": False, "in_cell": False}
    violations: list[str] = []
    busy: set = set()
    trusted_codes: dict = {}  # id -> code object (kept alive, so an id is never reused)
    file_verdicts: dict = {}
    allowed = dict(ALLOWED_REQUESTERS)
    allowed_codes: dict = {}  # the grader's own functions that may ask for a frame

    def file_is_student(filename) -> bool:
        hit = file_verdicts.get(filename)
        if hit is not None:
            return hit
        verdict = is_student_file(filename) if is_student_file is not None else None
        if verdict is None:
            verdict = not (filename.startswith("<frozen ")
                           or (filename.startswith(roots) and not filename.startswith("<")))
        file_verdicts[filename] = verdict
        return verdict

    def is_student(code) -> bool:
        if _id(code) in trusted_codes:
            return False
        return file_is_student(code.co_filename)

    def student_on_stack(frame) -> bool:
        while frame is not None:
            if is_student(frame.f_code):
                return True
            frame = frame.f_back
        return False

    def from_importlib(frame) -> bool:
        return frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")

    def requester_allowed(frame) -> bool:
        code = frame.f_code
        if _id(code) in allowed_codes:
            return True
        hands_back = allowed.get((code.co_filename, code.co_name))
        if hands_back is None:
            name = code.co_filename
            if (name.rpartition(sep)[2], code.co_name) in LIBRARY_REQUESTERS:
                return not file_is_student(name)
            return bool(library_dirs) and not file_is_student(name) and any(
                d in name for d in library_dirs)
        if not hands_back:
            return True
        caller = frame.f_back
        return caller is not None and caller.f_code.co_filename == code.co_filename

    def fail(reason):
        violations.append(reason)
        if report is not None:
            report(reason)
        if strict:
            raise Refused(reason)

    def path_of(arg):
        if _isinstance(arg, (_str, _bytes, _pathlike)):
            try:
                return _fsdecode(arg)
            except Exception:  # noqa: BLE001 - an odd path object: not a path we judge
                return None
        return None

    def own_memory(full: str) -> bool:
        # /proc/self/mem, /proc/<pid>/mem, map_files, and a pipe reopened through /proc/*/fd
        if not full.startswith("/proc/"):
            return False
        parts = full.split("/")
        return len(parts) >= 4 and parts[3] in ("mem", "map_files", "fd", "pagemap")

    def trusted_filename(filename) -> bool:
        if not _isinstance(filename, _str):
            return False
        return filename.startswith(roots) and _exists(filename)

    def judge(event, args, frame):
        # ``frame``: the Python frame that caused the event (the hook's caller).
        if event == "open":
            path = path_of(args[0]) if args else None
            if path is None:
                return
            full = _realpath(path)
            if forbidden and (full.startswith(forbidden) or full + sep in forbidden):
                fail(f"it read {full}, which holds the course's reference solution")
            elif own_memory(full) or own_memory(path):
                fail(f"it opened {path}, the grading process's own memory or files")
            elif not strict and not _exists(_dirname(full)) and student_on_stack(frame):
                # the kernel: a folder the sandbox does not have (the course, a home folder).
                # A new file in a folder that exists is the student's own (a checkpoint
                # written to a temporary folder), and a missing one there is their typo.
                fail(f"it tried to open {path}, which is not in the sandbox")
            return
        if event in PROCESS_EVENTS:
            fail(f"it started a process ({event})")
            return
        if event == "import":
            name = args[0] if args else ""
            if own and _isinstance(name, _str) and (name == own or name.startswith(own + ".")):
                fail(f"it imported {name}, the module being graded: its code must be written "
                     "in this notebook")
            return
        student = student_on_stack(frame)
        if not strict and not student:
            return
        # Frames and the interpreter's objects: refused while a student's code is on the
        # stack; in the driver also when a cell (not a library) asks, and between cells,
        # when only the grader runs (a student's object could fire then, from a destructor).
        library = not is_student(frame.f_code) and _id(frame.f_code) not in trusted_codes
        risky = student or (strict and (not library or not state["in_cell"]))
        if event in REASONS:
            if event.startswith("marshal."):
                if not from_importlib(frame):
                    fail(REASONS[event])
            elif event.startswith(("sys._getframe", "sys._current")) and requester_allowed(frame):
                return
            elif risky:
                fail(REASONS[event])
        elif event == "object.__getattr__":
            if risky and not requester_allowed(frame):
                fail(FRAMES)
        elif event == "object.__setattr__":
            target, name = args[0], args[1]
            if name in CODE_ATTRIBUTES and _isinstance(target, function_type):
                home = target.__code__.co_filename
                if library and frame.f_code.co_filename == home:
                    return  # a library setting up its own functions (pyparsing at import)
                if not is_student(target.__code__):
                    fail(f"it changed {name} of {target.__qualname__}, which the tests use")
        elif event == "function.__new__":
            code = args[0] if args else None
            if _isinstance(code, code_type) and _id(code) in trusted_codes:
                fail("it rebuilt a function of the tests from its code, which graded code "
                     "may not do")
        elif event.startswith("ctypes."):
            # who asked: the first frame outside ctypes itself, which must be trusted
            asker = frame
            while asker is not None and asker.f_code.co_filename.startswith(ctypes_dir):
                asker = asker.f_back
            name = asker.f_code.co_filename if asker is not None else ""
            if from_importlib(asker):
                return  # a module being imported (ctypes itself, a library) loads its library
            if asker is None or is_student(asker.f_code) or (
                    _id(asker.f_code) not in trusted_codes
                    and not (ctypes_dirs and any(d in name for d in ctypes_dirs))
                    and not (package_roots and name.startswith(package_roots))):
                fail("it called C functions through ctypes, which graded code may not do")
        elif event in ("compile", "code.__new__"):
            filename = args[1] if len(args) > 1 else None
            if _isinstance(filename, _bytes):
                filename = _fsdecode(filename)
            if trusted_filename(filename) and not from_importlib(frame):
                fail(f"it compiled code under the name of {filename}")
        elif event in NETWORK_EVENTS and not strict:
            fail(f"it tried the network ({event})")

    package_roots = tuple(r for r in roots if not r.startswith(tuple(
        os.path.join(_realpath(p), "") for p in library_roots())))

    watched_events = set(REASONS) | PROCESS_EVENTS | NETWORK_EVENTS | {
        "open", "import", "compile", "code.__new__", "function.__new__"}

    def hook(event, args):
        if not state["armed"]:
            return
        if event not in watched_events and not event.startswith(("object.", "ctypes.")):
            return
        if event == "object.__getattr__" and (len(args) < 2 or args[1] not in FRAME_ATTRIBUTES):
            return
        if event == "object.__setattr__" and (len(args) < 2 or (
                args[1] not in CODE_ATTRIBUTES)):
            return
        if event == "import" and not own:
            return
        ident = _get_ident()
        if ident in busy:
            return
        busy.add(ident)
        try:
            frame = _getframe(1)
            judge(event, args, frame)
        finally:
            busy.discard(ident)
            frame = None

    sys.addaudithook(hook)

    def arm():
        state["armed"] = True

    def in_cell(running: bool):
        state["in_cell"] = running

    def note(reason):
        violations.append(reason)
        if report is not None:
            report(reason)

    def allow_requester(code):
        allowed_codes[_id(code)] = code

    def take():
        found = list(dict.fromkeys(violations))
        violations.clear()
        return found

    def trust_code(code):
        stack = [code]
        while stack:
            item = stack.pop()
            trusted_codes[_id(item)] = item
            stack.extend(c for c in item.co_consts if _isinstance(c, code_type))

    return {"arm": arm, "take": take, "trust_code": trust_code, "is_student": is_student,
            "note": note, "allow_requester": allow_requester, "in_cell": in_cell}


def ctypes_packages_for(sources) -> list[str]:
    """Libraries that may call ctypes on behalf of the graded code: threadpoolctl (reads BLAS
    threads) and numba's compiler (numba, llvmlite). numba is allowed for every lesson, not
    only those whose text says "numba": module 17's compiled kernels reach later lessons
    (module 20's events) through the student's package, and a word in a cell was never a
    barrier (a comment could carry it). ``sources`` is kept for callers' symmetry."""
    del sources
    return ["threadpoolctl", "numba", "llvmlite"]


def scrub_environment(env: dict) -> dict:
    """``env`` without what changes how Python starts or runs the tests: PYTHONOPTIMIZE
    (asserts compiled out), PYTHONPATH and PYTHONHOME, PYTHONSTARTUP, PYTHONINSPECT, the user's
    site folder, a sitecustomize found through them. Every other variable is kept."""
    return {k: v for k, v in env.items()
            if not k.startswith("PYTHON") and k not in ("__PYVENV_LAUNCHER__",)}
