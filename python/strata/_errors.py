"""The exceptions Strata raises (docs/python.md, "Errors")."""
from __future__ import annotations

__all__ = ["Error", "InputError", "OutOfMemoryError"]


class Error(RuntimeError):
    """A failure Strata reports on purpose that is not bad input (the CLI's exit 1)."""


class InputError(Error, ValueError):
    """Bad input: broken JSON, an unknown key or preset, a value out of range,
    a plan that breaks a validity rule (the CLI's exit 2).

    ``str(e)`` is the message the CLI prints after ``strata: error:``;
    ``file`` names the file (``"<dict>"``/``"<string>"`` for a scenario given
    as a dict or as JSON text, or the argument: ``"format"``, ``"to"``...),
    ``path`` the JSON path in dotted form (``plan.stage_layers[3]``; may be
    empty) and ``rule`` what is wrong.
    """

    def __init__(self, message: str, file: str = "", path: str = "", rule: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.path = path
        self.rule = rule

    def __reduce__(self):  # picklable with its fields (multiprocessing)
        return (type(self), (str(self), self.file, self.path, self.rule))


class OutOfMemoryError(Error):
    """A backend ran out of memory running a plan (validate): the pool, the
    bytes and the memory model's prediction are in the message."""
