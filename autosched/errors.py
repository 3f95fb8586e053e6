"""One small exception hierarchy for user and programmer mistakes.

Bad candidates are *not* exceptions: they are measured results with a status (see records.py).
"""

from __future__ import annotations


class AutoschedError(Exception):
    """Base class of every error autosched raises on purpose."""


class UserInputError(AutoschedError):
    """Bad input from the user (CLI flags, files, names). The CLI prints it on one line and exits 2."""


class UnknownNameError(UserInputError):
    """A name that is not in a registry; the message lists the valid names."""

    def __init__(self, kind: str, name: str, valid: list[str] | tuple[str, ...]):
        super().__init__(f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(valid))}")
        self.kind, self.name, self.valid = kind, name, list(valid)


class DatabaseError(UserInputError):
    """A database that cannot be opened, is not an autosched database, or has an incompatible schema."""


class IncompatibleArtefactError(UserInputError):
    """A persisted artefact (search space, record, model) of another version than this code reads."""


class InvalidConfig(AutoschedError):
    """A knob combination that a search space cannot turn into a legal schedule (rejected before building)."""


class GraphError(AutoschedError):
    """A model that a required graph step (import, legalization, fusion, build) cannot handle: one line naming
    the model, the step and the operator."""


class ReferenceBuildError(AutoschedError):
    """A task whose unscheduled build (the reference its candidates are checked against) does not build: the
    task cannot be tuned; a model goes on with its other tasks."""
