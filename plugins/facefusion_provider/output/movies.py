"""An MP4's index (its moov, parsed) read from any store by two small ranged reads: the join plans an output from
these alone (``index_join``), and the stored sound is cut by them (``sound``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from facefusion_provider import storage

if TYPE_CHECKING:
    from facefusion_provider.output.mp4join import MovieFile

INDEX_READ_BYTES = 256 * 1024  # the ranged reads of a remote MP4's index: its head, then its moov


def movie_file(uri: str) -> MovieFile | None:
    """An input's moov and its parsed index, read by two small ranged reads on S3; None where it is not plain MP4."""
    # numpy (0.2-0.3 s to import here) loads where an index is read, not when the worker's CLI starts
    from facefusion_provider.media.mp4index import parse_movie, read_moov
    from facefusion_provider.output.mp4join import MovieFile

    with storage.open_input(uri, block_size=INDEX_READ_BYTES) as handle:
        found = read_moov(handle)
    movie = None if found is None else parse_movie(*found)
    return None if found is None or movie is None else MovieFile(found[0], found[1], movie)
