"""The HTTP API's one error: a status and a message naming what is wrong (serving.server answers it as JSON)."""

from __future__ import annotations


class RequestError(ValueError):
    def __init__(self, status: int, message: str, error_id: str | None = None) -> None:
        super().__init__(message)
        self.status, self.error_id = status, error_id
