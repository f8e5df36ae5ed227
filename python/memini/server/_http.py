"""uvicorn's httptools protocol with each answer sent in one write, and a time limit on
request headers.

uvicorn writes an answer's status line and headers (``http.response.start``) and its body
(``http.response.body``) with two ``transport.write`` calls: two ``send`` syscalls, made
holding the GIL, and two wake-ups of the client, which reads the headers before its body is
there. Here the writes of one turn of the event loop are joined and sent once at its end
(`_OneSend`); a served call sends both messages in one turn, so its answer leaves in one
``send``. Measured with py-spy (``--gil``) under 4 client processes, 20k rows: the two
writes were 31% of the samples holding the GIL in the server.

uvicorn times out idle keep-alive connections but not a request whose headers trickle in:
1,100 connections sending one header byte at a time held the server's connections for the
whole run. Here a request's headers must arrive within ``header_timeout`` seconds of its
first byte (or of the connection's opening), else the connection is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["OneSendProtocol", "with_header_timeout"]


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
    """uvicorn's httptools protocol writing through `_OneSend`, closing a connection whose
    request headers take longer than ``header_timeout`` seconds (`with_header_timeout`)."""

    header_timeout: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_OneSend(transport, self.loop))  # type: ignore[arg-type]
        self._start_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def _start_header_timer(self) -> None:
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def with_header_timeout(seconds: float) -> type[OneSendProtocol]:
    """`OneSendProtocol` with its own ``header_timeout`` (uvicorn builds the protocol from
    its class alone)."""
    return type("OneSendProtocol", (OneSendProtocol,), {"header_timeout": seconds})
