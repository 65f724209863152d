"""Find, verify and open the catalog's models. Nothing is ever downloaded from a model hub.

Resolution order: the installed package that carries a model (offline defaults), ``models_dir``, then ``models_uri``
(``s3://`` or ``file://`` prefix; a remote file is copied once into ``cache_dir``, atomically, keyed by its sha256).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import tempfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import onnxruntime as ort

from facefusion_provider import storage
from facefusion_provider.contract import (
    MODELS_CACHE_VARIABLE,
    MODELS_DIR_VARIABLE,
    MODELS_URI_VARIABLE,
    worker_settings,
)
from facefusion_provider.engine import runtime
from facefusion_provider.engine.models import ModelSpec, Shape, model_spec
from facefusion_provider.exceptions import (
    InputMissingError,
    ModelCorruptError,
    ModelIncompatibleError,
    ModelMissingError,
)
from facefusion_provider.options import Options
from facefusion_provider.storage.scratch import cache_folder

logger = logging.getLogger(__name__)

SUMS_FILE = "SHA256SUMS"
MODELS_DIR_ENV = MODELS_DIR_VARIABLE
MODELS_URI_ENV = MODELS_URI_VARIABLE
MODELS_CACHE_ENV = MODELS_CACHE_VARIABLE
_HASH_BLOCK = 8 * 1024 * 1024


@dataclass(frozen=True)
class Pin:
    """The sha256 a file must have, and who said so (for the error message)."""

    sha256: str
    origin: str


def sha256_file(path: str) -> str:
    return storage.file_sha256(path)


def crc32_file(path: str) -> str:
    """FaceFusion's ``.hash`` format: the file's CRC32 as 8 lowercase hex digits."""
    value = 0
    with open(path, "rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            value = zlib.crc32(block, value)
    return format(value, "08x")


def parse_sha256sums(text: str) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <name>`` or ``<hex> *<name>``) as {file name: hex digest}."""
    sums: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        digest, _, name = line.partition(" ")
        name = name.strip().lstrip("*").removeprefix("./")
        if len(digest) == 64 and name:
            sums[os.path.basename(name)] = digest.lower()
    return sums


def dims_match(expected: Shape, found: Sequence[object]) -> bool:
    """A pinned dimension must be that integer; ``None`` accepts a fixed or symbolic size."""
    if len(expected) != len(found):
        return False
    return all(want is None or want == got for want, got in zip(expected, found, strict=True))


def check_inputs(spec: ModelSpec, found: dict[str, list[object]], where: str) -> None:
    """The model's inputs against the catalog: names and pinned dimensions, else ModelIncompatibleError."""
    expected: dict[str, list[object]] = {name: list(shape) for name, shape in spec.inputs}
    problems = [
        f"input {name!r}: expected shape {_shape_text(shape)}, found {_shape_text(found[name])}"
        for name, shape in spec.inputs
        if name in found and not dims_match(shape, found[name])
    ]
    if set(found) != set(expected) or problems:
        raise ModelIncompatibleError(
            f"{spec.file_name} ({where}) does not look like {spec.name}: expected inputs "
            f"{_inputs_text(expected)}, found {_inputs_text(found)}"
            + ("; " + "; ".join(problems) if problems else "")
            + f". Use FaceFusion's {spec.file_name}."
        )


def _shape_text(shape: Sequence[object]) -> str:
    return "x".join("?" if dim is None or isinstance(dim, str) else str(dim) for dim in shape)


def _inputs_text(inputs: dict[str, list[object]]) -> str:
    return ", ".join(f"{name} {_shape_text(shape)}" for name, shape in inputs.items()) or "none"


def default_cache_dir() -> str:
    return cache_folder("models")


class ModelStore:
    """Resolves catalog names to verified local files and opens them as onnxruntime sessions (once per process)."""

    def __init__(self, models_dir: str | None = None, models_uri: str | None = None, cache_dir: str | None = None):
        self.models_dir = os.path.abspath(models_dir) if models_dir else None
        self.models_uri = storage.normalize_uri(models_uri, field="models_uri").rstrip("/") if models_uri else None
        self.cache_dir = cache_dir or default_cache_dir()
        self._resolved: dict[str, str] = {}
        self._sums: dict[str, dict[str, str]] = {}
        self._sessions: dict[tuple[str, tuple[str, ...], int], ort.InferenceSession] = {}

    # --- public API -------------------------------------------------------------------------------------------------

    def resolve(self, name: str) -> str:
        """The local path of a verified copy of the model; ModelMissingError / ModelCorruptError otherwise."""
        if name not in self._resolved:
            self._resolved[name] = self._resolve(model_spec(name))
        return self._resolved[name]

    def model_bytes(self, name: str) -> bytes:
        """The model's bytes (for packaged models carried inside Python source, no file is written)."""
        carried = carried_bytes(model_spec(name))
        return carried if carried is not None else Path(self.resolve(name)).read_bytes()

    def session(self, name: str, execution_providers: Sequence[str], thread_count: int) -> ort.InferenceSession:
        """A cached onnxruntime session of the model, its inputs checked against the catalog (once: every frame asks)."""
        key = (name, tuple(execution_providers), thread_count)
        if key not in self._sessions:
            self._sessions[key] = self._new_session(name, execution_providers, thread_count)
        return self._sessions[key]

    def _new_session(self, name: str, execution_providers: Sequence[str], thread_count: int) -> ort.InferenceSession:
        spec = model_spec(name)
        if spec.format != "onnx":
            raise ValueError(f"{name} is a {spec.format} model, not ONNX")
        carried = carried_bytes(spec)
        model: bytes | str = carried if carried is not None else self.resolve(name)
        session = runtime.create_session(model, execution_providers, thread_count)
        check_inputs(spec, runtime.input_shapes(session), model if isinstance(model, str) else packaged_label(spec))
        return session

    def session_for(self, name: str, options: Options) -> ort.InferenceSession:
        return self.session(name, options.execution_providers, options.execution_thread_count)

    # --- resolution -------------------------------------------------------------------------------------------------

    def _resolve(self, spec: ModelSpec) -> str:
        looked: list[str] = []
        for source in spec.sources:
            if source == "package" and spec.packaged is not None:
                found = self._from_package(spec, looked)
            elif source == "models_dir" and self.models_dir:
                found = self._from_local_dir(spec, self.models_dir, looked)
            elif source == "models_uri" and self.models_uri:
                local_dir = storage.local_path(self.models_uri)
                if local_dir is not None:
                    found = self._from_local_dir(spec, local_dir, looked)
                else:
                    found = self._from_remote(spec, self.models_uri, looked)
            else:
                continue
            if found is not None:
                return found
        raise ModelMissingError(missing_message(spec, looked))

    def _from_package(self, spec: ModelSpec, looked: list[str]) -> str | None:
        assert spec.packaged is not None
        folder = package_dir(spec.packaged.package)
        if folder is None:
            looked.append(f"the {spec.packaged.distribution} package (not installed)")
            return None
        if spec.packaged.bytes_variable is None:
            path = os.path.join(folder, spec.packaged.path)
            looked.append(path)
            if not os.path.isfile(path):
                return None
            self._verify(spec, path, Pin(spec.sha256, "the catalog") if spec.sha256 else None)
            return path
        looked.append(os.path.join(folder, spec.packaged.path))
        data = packaged_bytes(spec)
        return self._cache_bytes(spec, data)

    def _from_local_dir(self, spec: ModelSpec, folder: str, looked: list[str]) -> str | None:
        path = os.path.join(folder, spec.file_name)
        looked.append(path)
        if not os.path.isfile(path):
            return None
        sums_path = os.path.join(folder, SUMS_FILE)
        pin = self._pin(spec, sums_path, lambda: _read_local_text_if_exists(sums_path))
        self._verify(spec, path, pin)
        crc_path = path.removesuffix(Path(path).suffix) + ".hash"
        if os.path.isfile(crc_path):
            check_crc32(path, Path(crc_path).read_text(), crc_path)
        return path

    def _from_remote(self, spec: ModelSpec, prefix: str, looked: list[str]) -> str | None:
        uri = storage.join(prefix, spec.file_name)
        looked.append(uri)
        if not storage.exists(uri):
            return None
        sums_uri = storage.join(prefix, SUMS_FILE)
        pin = self._pin(spec, sums_uri, lambda: _read_text_if_exists(sums_uri))
        crc_text = _read_text_if_exists(storage.join(prefix, Path(spec.file_name).stem + ".hash"))
        key = pin.sha256 if pin else "unpinned-" + remote_fingerprint(uri)
        target = os.path.join(self.cache_dir, key, spec.file_name)
        if not os.path.isfile(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".download-")
            os.close(fd)
            try:
                logger.info("copying %s to the model cache %s", uri, target)
                storage.get_file(uri, temp)
                self._verify(spec, temp, pin, shown=uri)
                if crc_text is not None:
                    check_crc32(temp, crc_text, uri)
                os.replace(temp, target)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        elif pin is not None:
            self._verify(spec, target, pin)
        return target

    def _cache_bytes(self, spec: ModelSpec, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = os.path.join(self.cache_dir, digest, spec.file_name)
        if not os.path.isfile(target):
            storage.write_bytes_atomic(Path(target).as_uri(), data)
        return target

    def _pin(self, spec: ModelSpec, sums_location: str, read: Callable[[], str | None]) -> Pin | None:
        if spec.sha256:
            return Pin(spec.sha256, "the catalog")
        if sums_location not in self._sums:
            text = read()
            self._sums[sums_location] = parse_sha256sums(text) if text else {}
        digest = self._sums[sums_location].get(spec.file_name)
        return Pin(digest, sums_location) if digest else None

    def _verify(self, spec: ModelSpec, path: str, pin: Pin | None, shown: str | None = None) -> None:
        if pin is None:
            logger.warning("%s is not pinned: add its sha256 to %s beside it to check its integrity", path, SUMS_FILE)
            return
        digest = sha256_file(path)
        if digest != pin.sha256:
            raise ModelCorruptError(corrupt_message(spec, shown or path, pin, digest))


def check_crc32(path: str, expected_text: str, shown: str) -> None:
    expected = expected_text.strip().lower()
    found = crc32_file(path)
    if expected and found != expected:
        raise ModelCorruptError(
            f"{Path(path).name}: CRC32 {found} does not match {expected} in {shown} (FaceFusion's .hash): "
            "the file is damaged or from another release; download it again"
        )


def remote_fingerprint(uri: str) -> str:
    """A cache key for an unpinned remote file: its URI, size and version tag, so a changed file is fetched again."""
    fs, path = storage.filesystem(uri)
    info = fs.info(path)
    version = [
        str(info.get(key)) for key in ("size", "ETag", "etag", "LastModified", "mtime", "created") if key in info
    ]
    return hashlib.sha256("\n".join([uri, *version]).encode()).hexdigest()[:16]


def _read_local_text_if_exists(path: str) -> str | None:
    return Path(path).read_text() if os.path.isfile(path) else None


def _read_text_if_exists(uri: str) -> str | None:
    try:
        return storage.read_bytes(uri).decode()
    except InputMissingError:
        return None


def missing_message(spec: ModelSpec, looked: list[str]) -> str:
    places = "; ".join(looked) if looked else "nowhere: no --models-dir or models URI is set"
    if spec.packaged is not None:
        how = f"install {spec.packaged.distribution} (part of the worker extra) or put {spec.file_name} in --models-dir"
    else:
        how = (
            f"put {spec.file_name} in --models-dir or {MODELS_DIR_ENV}, or under the prefix in {MODELS_URI_ENV} "
            f"(s3:// or file://); it is FaceFusion's model file of that name ({spec.vendor}, licence {spec.licence})"
        )
    return f"model {spec.name} is missing: {spec.file_name} was not found (looked in {places}). To provide it, {how}."


def corrupt_message(spec: ModelSpec, shown: str, pin: Pin, found: str) -> str:
    return (
        f"{spec.file_name} at {shown} has sha256 {found}, but {pin.origin} pins {pin.sha256}: the file is damaged, "
        f"truncated or a different model; replace it with FaceFusion's {spec.file_name}"
    )


def package_dir(package: str) -> str | None:
    """The folder of an installed package, found without importing it."""
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return str(next(iter(found.submodule_search_locations)))


def packaged_label(spec: ModelSpec) -> str:
    assert spec.packaged is not None
    return f"{spec.packaged.path} of the {spec.packaged.distribution} package"


def carried_bytes(spec: ModelSpec) -> bytes | None:
    """The bytes of a model carried inside an installed package's Python source; None when not carried or absent."""
    if spec.packaged is None or spec.packaged.bytes_variable is None or package_dir(spec.packaged.package) is None:
        return None
    return packaged_bytes(spec)


@functools.lru_cache(maxsize=4)
def packaged_bytes(spec: ModelSpec) -> bytes:
    """The model bytes carried as a bytes literal in a package's Python source, read by parsing, never importing."""
    assert spec.packaged is not None and spec.packaged.bytes_variable is not None
    folder = package_dir(spec.packaged.package)
    if folder is None:
        raise ModelMissingError(missing_message(spec, [f"the {spec.packaged.distribution} package (not installed)"]))
    path = os.path.join(folder, spec.packaged.path)
    tree = ast.parse(Path(path).read_bytes(), filename=path)
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == spec.packaged.bytes_variable for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, bytes)
        ):
            data = node.value.value
            digest = hashlib.sha256(data).hexdigest()
            if spec.sha256 and digest != spec.sha256:
                raise ModelCorruptError(corrupt_message(spec, path, Pin(spec.sha256, "the catalog"), digest))
            return data
    raise ModelCorruptError(
        f"{path}: no bytes literal {spec.packaged.bytes_variable} (another {spec.packaged.distribution} release?)"
    )


def store_from_environment(models_dir: str | None = None) -> ModelStore:
    """The store a worker process uses: ``models_dir`` (a folder, or an s3:// / file:// prefix) with the settings'."""
    settings = worker_settings()
    return _store_from_environment(models_dir, settings.models_dir, settings.models_uri, settings.models_cache)


@functools.lru_cache(maxsize=8)
def _store_from_environment(
    models_dir: str | None, env_dir: str | None, env_uri: str | None, env_cache: str | None
) -> ModelStore:
    chosen = models_dir or env_dir
    if chosen and urlparse(chosen).scheme not in ("", "file") and len(urlparse(chosen).scheme) > 1:
        return ModelStore(models_uri=chosen, cache_dir=env_cache)
    local = storage.local_path(chosen) if chosen else None
    return ModelStore(models_dir=local, models_uri=env_uri, cache_dir=env_cache)
