"""The web page at `/`: one static HTML file (static/index.html, no build step) that uploads a file or a
microphone recording to /v1/audio/translations and shows the translation and its subtitle cues, with SRT and VTT
downloads."""

from __future__ import annotations

from pathlib import Path

from starlette.responses import FileResponse
from starlette.routing import Route

STATIC = Path(__file__).parent / "static"


def page_routes() -> list[Route]:
    async def index(request) -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    return [Route("/", index, methods=["GET"])]
