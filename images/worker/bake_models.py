"""Bake model files into the worker image: download each one and keep it only if it matches its pinned sha256.

Runs in the image build with the distribution's Python alone (standard library only), before the package exists:

    python3 bake_models.py --out /models --base-url https://host/models --models "a.onnx=<sha256> b.onnx=<sha256>"

Writes ``SHA256SUMS`` beside the files, which the worker's model store reads to pin them again at run time. An empty
``--models`` makes an empty folder. Any mismatch, missing file or bad entry fails with exit code 1 and names the file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import urllib.request
from pathlib import Path

_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)=(?:sha256:)?(?P<sha256>[0-9a-fA-F]{64})$")
_BLOCK = 1024 * 1024


class BakeError(Exception):
    """A model that cannot be baked in: the build must stop."""


def parse_models(text: str) -> dict[str, str]:
    """``"a.onnx=<sha256> b.onnx=sha256:<hex>"`` (spaces, commas or newlines between) as {file name: sha256}."""
    models: dict[str, str] = {}
    for entry in re.split(r"[\s,]+", text.strip()):
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise BakeError(f"{entry!r}: expected FILE=SHA256 (a plain file name and 64 hex digits)")
        models[match["name"]] = match["sha256"].lower()
    return models


def fetch(url: str, destination: Path, sha256: str) -> None:
    """Stream ``url`` into ``destination`` while hashing it; a mismatch leaves nothing behind."""
    partial = destination.with_name(f".{destination.name}.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as handle:  # noqa: S310
            while block := response.read(_BLOCK):
                digest.update(block)
                handle.write(block)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise BakeError(f"{url}: cannot download: {error}") from None
    if digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise BakeError(f"{url}: sha256 is {digest.hexdigest()}, but {destination.name} is pinned to {sha256}")
    os.replace(partial, destination)


def bake(models: dict[str, str], base_url: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if not models:
        return
    if not base_url:
        raise BakeError("models are listed but no base URL says where to download them from")
    for name, sha256 in sorted(models.items()):
        fetch(f"{base_url.rstrip('/')}/{name}", out / name, sha256)
    sums = "".join(f"{sha256}  {name}\n" for name, sha256 in sorted(models.items()))
    (out / "SHA256SUMS").write_text(sums)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="folder that receives the models")
    parser.add_argument("--base-url", default="", help="http(s):// or file:// prefix that holds the files")
    parser.add_argument("--models", default="", help="FILE=SHA256 entries, separated by spaces or commas")
    args = parser.parse_args(argv)
    try:
        bake(parse_models(args.models), args.base_url, args.out)
    except BakeError as error:
        print(f"bake_models: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
