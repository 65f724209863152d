"""The merge's index join: an MP4 output planned from the segments' and the target's moov boxes alone
(``output.mp4join``), as pieces to compose; the segments' bytes are never read here (on S3, S3 copies them)."""

from __future__ import annotations

import base64
import functools
import logging
import posixpath
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.output.movies import movie_file
from facefusion_provider.output.sound import check_sound, encoded_sound_uri, stored_sound
from facefusion_provider.storage.prefetch import Prefetch
from facefusion_provider.work.layout import WorkLayout
from facefusion_provider.work.records import Segment, SegmentMarker, WorkSpec, segment_label

if TYPE_CHECKING:
    from facefusion_provider.output.mp4join import MovieFile

logger = logging.getLogger(__name__)

INDEX_JOIN_EXTENSIONS = frozenset({"mp4", "m4v"})  # outputs joined from the segments' indexes when they allow it
INDEX_READS_AT_ONCE = 32  # index reads in flight at once, within the S3 client's connection pool


@dataclass(frozen=True)
class JoinPlan:
    """An output planned from its inputs' indexes: the pieces to compose and the seconds planning them took."""

    pieces: list[storage.Piece]
    index_s: float


def join_refusal(spec: WorkSpec, output_uri: str) -> str | None:
    """Why the output cannot be joined from indexes whatever the files hold (its container, a trim, a rotation)."""
    extension = posixpath.splitext(urlparse(output_uri).path)[1][1:].lower()
    if extension not in INDEX_JOIN_EXTENSIONS:
        return f"a .{extension} output is remuxed"
    if (spec.frame_start, spec.frame_end) != (0, spec.probe.frame_count):
        return "a trimmed output is remuxed"
    if spec.options.output_audio_volume == 0:
        return "an output without sound is remuxed"
    return "a rotated output is remuxed" if spec.probe.rotation else None


def plan_join(  # noqa: PLR0917 - the merge's own state, passed on once
    spec: WorkSpec,
    layout: WorkLayout,
    markers: list[SegmentMarker],
    sizes: dict[str, int],
    target_uri: str,
    output_uri: str,
) -> JoinPlan | None:
    """The output as ``output.mp4join`` plans it; None (with the reason logged) where it does not apply, and the merge
    remuxes. The sound is the work's own where it has one (``output.sound.encoded_sound_uri``), else the target's, from
    the work's stored sound where it holds exactly those bytes."""
    from facefusion_provider.media.mp4index import UnsupportedLayoutError
    from facefusion_provider.output.mp4join import join_movies

    began = time.perf_counter()
    reason = join_refusal(spec, output_uri)
    own_sound = encoded_sound_uri(spec.identity)
    sound_uri = own_sound or target_uri
    if reason is None and own_sound is not None:
        check_sound(spec.identity, storage.read_bytes(own_sound))  # a few MB: nothing is merged unverified
    if reason is None:
        uris = [layout.segment_file(marker.file) for marker in markers] + [sound_uri]
        reads = [
            functools.partial(_segment_movie, spec, layout, marker, segment, sizes.get(marker.file))
            for marker, segment in zip(markers, spec.segments, strict=True)
        ]
        reads.append(functools.partial(movie_file, sound_uri))  # its sound tracks, its movie header
        with Prefetch(reads, INDEX_READS_AT_ONCE) as reading:
            movies = list(reading.results())
        files = [movie for movie in movies if movie is not None]
        try:
            if len(files) != len(movies):
                raise UnsupportedLayoutError("a segment or the target is not a plain MP4")
            joined = join_movies(
                files[:-1],
                files[-1],
                [marker.start for marker in markers],
                spec.probe.pts,
                Fraction(spec.probe.time_base),
            )
        except UnsupportedLayoutError as error:
            reason = str(error)
    if reason is not None:
        logger.info("%s: not joined from the indexes (%s); remuxing", output_uri, reason)
        return None
    ranges = list(joined.ranges)
    sound = [piece for piece in ranges if piece.source == len(markers)]
    stored = None if own_sound else stored_sound(layout, sum(piece.end - piece.start for piece in sound))
    pieces: list[storage.Piece] = [joined.head]
    if stored is not None and ranges[: len(sound)] == sound:  # the sound leads the media data: one stored file
        pieces.append(stored)
        ranges = ranges[len(sound) :]
    pieces += [storage.ByteSlice(uris[piece.source], piece.start, piece.end) for piece in ranges]
    return JoinPlan(pieces, index_s=time.perf_counter() - began)


def _segment_movie(
    spec: WorkSpec, layout: WorkLayout, marker: SegmentMarker, segment: Segment, listed_size: int | None
) -> MovieFile | None:
    """A committed segment's index (its file was checked against its marker before: ``output.integrity``), and its
    label. A remote file's index comes from its marker, where the commit stored it, and its bytes are never read here:
    S3 copies them."""
    from facefusion_provider.media.mp4index import parse_movie
    from facefusion_provider.output.mp4join import MovieFile, movie_comment

    uri = layout.segment_file(marker.file)
    if marker.moov is None or storage.local_path(uri) is not None:
        movie = movie_file(uri)
    else:
        moov = base64.b64decode(marker.moov)
        index = parse_movie(moov, marker.size)
        movie = None if index is None else MovieFile(moov, marker.size, index)
    label = segment_label(spec, segment)
    if movie is not None and movie_comment(movie.moov) != label:
        raise InvalidWorkError(f"{uri}: is labelled {movie_comment(movie.moov)!r}, expected {label!r}")
    if listed_size != marker.size or (movie is not None and movie.size != marker.size):
        raise InvalidWorkError(f"{uri}: holds {listed_size} bytes, its marker {marker.size}")
    return movie
