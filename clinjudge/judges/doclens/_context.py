"""What the DocLens workflows ask of a run: the workflow contract plus the DocLens settings."""

from __future__ import annotations

from typing import Protocol

from clinjudge.judges.doclens._settings import DocLensSettings
from clinjudge.judges.workflows import WorkflowContext, WorkflowSettings


class DocLensRunSettings(WorkflowSettings, Protocol):
    """Run settings with a ``doclens`` block (``orchestration.RunConfig`` has one)."""

    @property
    def doclens(self) -> DocLensSettings: ...


class DocLensContext(WorkflowContext, Protocol):
    """A sample's context whose settings carry the DocLens block."""

    @property
    def config(self) -> DocLensRunSettings: ...
