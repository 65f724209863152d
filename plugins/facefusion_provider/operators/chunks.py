"""What a ``swap-chunk`` operator knows on every backend: the one chunk of ``plan``'s list that it works on."""

from __future__ import annotations

from typing import Any


class SwapChunkMixin:
    """The chunk of a mapped ``swap-chunk`` task, ``{"index": 7, "start": 448, "end": 512, "label": "frames 448-511"}``.

    Listed before the backend's worker operator, so its ``chunk_index`` replaces the worker operator's ``None``; each
    operator keeps its own ``__init__`` (Airflow applies ``default_args`` only to an ``__init__`` a class defines).
    """

    chunk: dict[str, Any]

    @property
    def chunk_index(self) -> int:
        return int(self.chunk["index"])
