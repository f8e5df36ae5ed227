"""asyncio access to memini: `connect` -> `AsyncRemoteStore` (a served store).

Every method of `memini.Store` is a coroutine on `AsyncRemoteStore`; see `memini.client`
for failures and what to do with a write that got no answer.
"""

from __future__ import annotations

from memini.client import AsyncRemoteStore
from memini.client import aconnect as connect

__all__ = ["AsyncRemoteStore", "connect"]
