"""Byte ranges of an MP4's samples, from its index alone: where a track's chunks lie, adjacent ranges as one, and the
ranges that hold every sample but the video's (what a remux copies) with the gaps a demuxer reads through closed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_provider.media.mp4index import Int64Array, MovieIndex, TrackIndex, first_video_track


@dataclass(frozen=True)
class MediaRange:
    """Bytes ``[start, end)`` of one input: ``source`` counts the segments from 0, the target is ``len(segments)``."""

    source: int
    start: int
    end: int


def chunk_ranges(track: TrackIndex) -> tuple[Int64Array, Int64Array]:
    """Where each chunk of ``track`` starts and ends in its file."""
    firsts = np.cumsum(track.chunk_sizes) - track.chunk_sizes
    lasts = firsts + track.chunk_sizes - 1
    return track.offsets[firsts], track.offsets[lasts] + track.sizes[lasts]


def coalesced(ranges: list[MediaRange]) -> list[MediaRange]:
    """Adjacent ranges of one input as one."""
    joined: list[MediaRange] = []
    for piece in ranges:
        if joined and joined[-1].source == piece.source and joined[-1].end == piece.start:
            joined[-1] = MediaRange(piece.source, joined[-1].start, piece.end)
        else:
            joined.append(piece)
    return joined


def other_sample_ranges(movie: MovieIndex, *, gap_bytes: int, bytes_per_get: int) -> list[tuple[int, int]]:
    """Where the samples of every track but the swapped video's (``first_video_track``) lie, as sorted ranges with the gaps of at most
    ``gap_bytes`` closed; only the largest gaps stay open where the file's size allows fewer reads of
    ``bytes_per_get``. Empty when there are no such samples."""
    video = first_video_track(movie)
    tracks = [track for track in movie.tracks if track is not video]
    if not any(track.sample_count for track in tracks):
        return []
    offsets = np.concatenate([track.offsets for track in tracks])
    order = np.argsort(offsets, kind="stable")
    starts = offsets[order]
    ends = np.minimum(starts + np.concatenate([track.sizes for track in tracks])[order], movie.file_size)
    reach = np.maximum.accumulate(ends)  # the end of everything up to each sample
    gaps = starts[1:] - reach[:-1]
    most_breaks = max(0, movie.file_size // bytes_per_get - 1)
    gap = gap_bytes
    if np.count_nonzero(gaps > gap) > most_breaks:
        gap = max(gap, int(np.partition(gaps, len(gaps) - most_breaks - 1)[len(gaps) - most_breaks - 1]))
    breaks = np.flatnonzero(gaps > gap) + 1
    firsts, lasts = np.append(0, breaks), np.append(breaks - 1, len(starts) - 1)
    return [
        (start, end) for start, end in zip(starts[firsts].tolist(), reach[lasts].tolist(), strict=True) if start < end
    ]
