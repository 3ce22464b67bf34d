"""tito: the command line that runs the TinyTorch course."""

import sys

__version__ = "0.1.0"

# jsonschema, which nbformat imports, loads rfc3987_syntax when it is installed (Jupyter's
# `jsonschema[format-nongpl]` brings it), and that builds a Lark grammar at import: 1.3-2.2 s
# of CPU in every tito command that reads a notebook, about half of `tito module test 01`.
# It only checks the "iri" string format, which no notebook schema uses: tito's processes
# (the CLI and the nbgrader it starts) go without it. A process that imported it first keeps it.
sys.modules.setdefault("rfc3987_syntax", None)
