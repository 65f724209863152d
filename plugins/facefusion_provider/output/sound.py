"""The work's stored sound (``sound.bin``): the target's sound as a join lays it out, stored once beside the frames so
that every merge reads one file instead of the target's many small sound chunks (a muxer interleaves them between
frames: reaching them reads the whole target)."""

from __future__ import annotations

import hashlib
from typing import Any

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.output.movies import movie_file
from facefusion_provider.work.layout import WorkLayout


def store_sound(layout: WorkLayout, target_uri: str) -> int:
    """Stores the target's sound in the work; a standing worker does this while the frames are worked. Returns the
    bytes stored (0: nothing to store)."""
    from facefusion_provider.media.mp4index import UnsupportedLayoutError  # numpy: see ``output.movies``
    from facefusion_provider.output.mp4join import sound_ranges

    target = movie_file(target_uri)
    try:
        ranges = [] if target is None else sound_ranges(target)
    except UnsupportedLayoutError:
        return 0
    if not ranges:
        return 0
    return storage.compose(layout.sound_file, [storage.ByteSlice(target_uri, a, b) for a, b in ranges]).size


def stored_sound(layout: WorkLayout, size: int) -> storage.ByteSlice | None:
    """The stored sound where it holds exactly the ``size`` bytes the join copies from the target."""
    name = layout.sound_file.rsplit("/", 1)[-1]  # listed URIs may quote a local path otherwise than the layout
    found = [item for item in storage.list_files(layout.sound_file) if item.uri.rsplit("/", 1)[-1] == name]
    if not size or not found or found[0].size != size:
        return None
    return storage.ByteSlice(layout.sound_file, 0, size)


def encoded_sound_uri(identity: dict[str, Any]) -> str | None:
    """The work's own encoded sound (``worker.prepare``: the voice of lip sync, or the target's re-encoded), which the
    output carries instead of the target's; None: the target's sound is copied as it is."""
    sound = identity.get("sound")
    return str(sound["uri"]) if isinstance(sound, dict) and "uri" in sound else None


def check_sound(identity: dict[str, Any], data: bytes) -> None:
    """The work's encoded sound holds the bytes prepare stored (its sha256 in the identity)."""
    sound = identity["sound"]
    if hashlib.sha256(data).hexdigest() != sound.get("sha256"):
        raise InvalidWorkError(
            f"{sound['uri']}: the work's sound is damaged (checksum differs); prepare the work again"
        )
