"""The guard graded code runs under, shared by both graders (`tito module complete` and the
instructor's `tito nbgrader autograde`). Its files import nothing of tito: they are copied
into the sandbox, where tito is not. ``protect.py``: the audit hook; ``snapshots.py``: the
snapshots of what the tests use; ``driver.py``: the process that runs a notebook's cells;
``kernel.py``: nbgrader's kernel."""
