"""facefusion-provider: swap faces in long videos with Apache Airflow, in spans of segments across GPU workers."""

from __future__ import annotations

__version__ = "0.1.0"
