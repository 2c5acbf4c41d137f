"""The /metrics body: the registry's text and the families rendered as text by their owners
(api/http/group_metrics.py: 200,000 series of consumer group lag, 15 MB), sent without joining them into one body.

A body of 15 MB joined whole at every scrape cost a copy of it, and the first such scrape of the process touched
15 MB of fresh memory (3,600 minor page faults) for it. `PiecesResponse` sends the pieces as they are, gathered
into chunks of about CHUNK bytes joined as they are sent: each chunk is freed once the socket took it, so the next
one reuses its memory (a chunk stays under glibc's threshold for a fresh mapping once one has been freed). The body
is the same bytes as the join of the pieces; its Content-Length is their total.
"""

from __future__ import annotations

from collections.abc import Iterator

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

CHUNK = 256 * 1024


def chunks(pieces: list[bytes | bytearray], size: int = CHUNK) -> Iterator[bytes]:
    """The pieces' bytes in order, as chunks of about `size` bytes (a piece larger than `size` goes alone, not
    copied)."""
    run: list[bytes | bytearray] = []
    held = 0
    for p in pieces:
        if len(p) >= size:
            if run:
                yield b"".join(run)
                run, held = [], 0
            yield p if isinstance(p, bytes) else bytes(p)
            continue
        run.append(p)
        held += len(p)
        if held >= size:
            yield b"".join(run)
            run, held = [], 0
    if run:
        yield b"".join(run)


class PiecesResponse(Response):
    """A 200 whose body is `pieces` in order (Content-Length: their total), sent a chunk at a time."""

    def __init__(self, pieces: list[bytes | bytearray], media_type: str) -> None:
        self.pieces = pieces
        super().__init__(None, media_type=media_type,
                         headers={"content-length": str(sum(len(p) for p in pieces))})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        for chunk in chunks(self.pieces):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
