"""The server's errors: each one HTTP status and one line of JSON in OpenAI's shape,
{"error": {"message", "type", "param", "code"}}, which its Python client raises as openai.APIStatusError."""

from __future__ import annotations

import json

ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    413: "invalid_request_error",
    499: "client_closed_request",
    500: "server_error",
    503: "server_overloaded",
    504: "timeout",
}


class ApiError(Exception):
    """A request the server answers with `status` and one JSON line naming the `param` at fault, if any."""

    def __init__(self, status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message.splitlines()[0] if message else "", param
        self.headers = headers or {}

    def body(self) -> bytes:
        """The one-line JSON body, ending in a newline."""
        error = {
            "message": self.message,
            "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
            "param": self.param,
            "code": self.status,
        }
        return (json.dumps({"error": error}, ensure_ascii=False) + "\n").encode()


def bad_request(param: str | None, message: str) -> ApiError:
    """400: `param: message` (the API's and the command line's one-line wording)."""
    return ApiError(400, f"{param}: {message}" if param else message, param)


class QueueFull(Exception):
    """The batcher holds as many requests as it may (ServeConfig.max_queue)."""


class ShuttingDown(Exception):
    """The server is stopping: it takes no new work, and work it could not finish in time is refused."""
