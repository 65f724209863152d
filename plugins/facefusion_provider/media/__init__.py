"""The media layer (PyAV, no Airflow): probe, frame-exact decode, encode, merge by remux or by index join, preview.

probe      exact frame count and per-frame timestamps from packets, rate, size, rotation, other streams
decode     frames [start, end) by seeking to the keyframe before start, identified by timestamp
encode     the final codec with settings that depend only on the options and the target
merge      segments' packets remuxed into the output with the original's audio and other streams, timestamps kept
preview    per-segment thumbnail pairs and the contact sheet built from them
images     JPEG/PNG in and out
mp4index   an MP4's sample tables from its moov; mp4join: segments joined from their indexes; mp4ranges: byte ranges
(generated media and per-frame checks for tests, the demo and benchmarks: tests/support/synth.py, readback.py)
"""

from __future__ import annotations
