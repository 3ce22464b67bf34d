"""Every error tito raises for a user to act on, under one base class.

Core code (``tito/course``, ``tito/student``, ``tito/grading``, ``tito/site``) raises one of
these with a message that says what is wrong and how to fix it. The command line catches
``TitoError`` in one place (``tito/cli.py``) and prints the message as a failure (exit
code 2), so a command never needs ``except XError: raise Failure(...)`` of its own; it
catches an error only to add something to the message.
"""


class TitoError(Exception):
    """A problem the user can fix; the message names it and the fix."""


class UnknownModule(TitoError, LookupError):
    """A module number or name that the registry does not know."""


class NotebookError(TitoError):
    """A lesson or notebook that cannot be read; the message says which file and why."""


class ExportError(TitoError):
    """The lesson cannot be exported; the message names the cell and the fix."""


class WorkspaceError(TitoError):
    """Something about the workspace that the user must fix; the message says how."""


class ReleaseIntegrityError(TitoError):
    """The released notebook itself was changed; the message says which cell and the fix."""


class ReleaseError(TitoError):
    """nbgrader refused a lesson; the message carries nbgrader's own explanation."""


class GradingError(TitoError):
    """Something the instructor must fix; the message says what and how."""


class LessonError(TitoError):
    """A lesson the website cannot be made from; the message names the file and the fix."""


class SiteError(TitoError):
    """The site cannot be generated; the message names the file and the fix."""


class FailureSpecError(TitoError):
    """A planted mistake that cannot be planted; the message names the file and the fix."""


class RenderError(TitoError):
    """The site could not be rendered; the message says why and what to do."""


class BrowserError(TitoError):
    """Chromium is missing or printed no result."""
