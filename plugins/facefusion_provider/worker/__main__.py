"""``python -m facefusion_provider.worker``: the same as ``facefusion-worker``."""

from __future__ import annotations

import sys

from facefusion_provider.worker.cli import main

sys.exit(main())
