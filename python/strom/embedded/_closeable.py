"""The context-manager protocol shared by the embedded log's handles."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import TypeVar

_T = TypeVar("_T", bound="Closeable")


class Closeable(ABC):
    """``with handle: …`` calls ``handle.close()`` on the way out."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
