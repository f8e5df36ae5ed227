"""uvicorn's httptools protocol with each answer sent in one write.

uvicorn writes an answer's status line and headers (``http.response.start``) and its body
(``http.response.body``) with two ``transport.write`` calls: two ``send`` syscalls, made
holding the GIL, and two wake-ups of the client, which reads the headers before its body is
there. Here the writes of one turn of the event loop are joined and sent once at its end
(`_OneSend`); a served call sends both messages in one turn, so its answer leaves in one
``send``. Measured with py-spy (``--gil``) under 4 client processes, 20k rows: the two
writes were 31% of the samples holding the GIL in the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["OneSendProtocol"]


class _OneSend:
    """A transport whose writes are held until the end of the loop's turn, then sent as one.

    Everything else goes to the wrapped transport; ``close`` sends what is held first (as a
    transport sends its buffer before closing).
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self._send)
        self._held.append(data)

    def _send(self) -> None:
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._send()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneSendProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through `_OneSend`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_OneSend(transport, self.loop))  # type: ignore[arg-type]
