"""Every URI the project touches goes through here, one small module per concern; no Airflow, no numpy.

- ``uris``: URI rules (normalising, ``..`` and relative paths refused, allow-lists of prefixes)
- ``filesystems``: fsspec per URI, S3 credentials and endpoint, errors mapped to the project's failure classes
- ``objects``: whole objects (exists, read, atomic and exclusive writes, listings, deletes, checksums, write probes)
- ``checksums``: publishing a file with its sha256, and reading an object's sha256 back (the store's own checksum)
- ``inputs``: inputs as PyAV reads them (local path, ranged remote file, node-local input cache)
- ``ranges``: ranged reads ahead of a demuxer
- ``multipart``: S3 multipart uploads of a growing file
- ``compose``: one object from bytes and ranges of other objects (S3 copies what it can itself)

The names below are the package's API; callers write ``storage.exists(uri)``.
"""

from __future__ import annotations

from facefusion_provider.storage.checksums import content_sha256, object_sha256, put_file_checked, stored_sha256
from facefusion_provider.storage.compose import ByteSlice, Composed, Piece, compose
from facefusion_provider.storage.filesystems import (
    S3_POOL_CONNECTIONS,
    S3Credentials,
    filesystem,
    naming_a_full_disk,
    storage_errors,
    storage_options,
    using_s3_credentials,
)
from facefusion_provider.storage.input_files import (
    cached_input,
    open_input,
)
from facefusion_provider.storage.multipart import (
    UPLOAD_MAX_PARTS,
    UPLOAD_MIN_PART_BYTES,
    UPLOADS_AT_ONCE,
    MultipartUpload,
    multipart_upload,
)
from facefusion_provider.storage.objects import (
    StoredObject,
    check_writable,
    confined_folder,
    confining_prefix,
    content_id,
    delete,
    exists,
    file_sha256,
    get_file,
    get_file_sha256,
    list_files,
    list_folders,
    put_file_atomic,
    read_bytes,
    read_json,
    read_range,
    remove_empty_folders,
    remove_tree,
    replace_confined,
    stat,
    write_bytes_atomic,
    write_bytes_exclusive,
    write_bytes_if_unchanged,
    write_json_atomic,
)
from facefusion_provider.storage.ranges import (
    RANGE_BYTES_PER_GET,
    RANGE_FETCHES_AT_ONCE,
    RANGE_GAP_BYTES,
    RANGE_PIECE_BYTES,
    ByteRange,
    RangeReader,
    range_fetcher,
    range_pieces,
)
from facefusion_provider.storage.uris import (
    ALLOWED_SCHEMES,
    MAX_NAME_BYTES,
    allowed_prefixes,
    bucket_and_key,
    check_allowed,
    is_within,
    join,
    local_path,
    normalize_prefixes,
    normalize_uri,
    parse_prefixes,
    require_file_uri,
)

__all__ = [
    "ALLOWED_SCHEMES",
    "MAX_NAME_BYTES",
    "RANGE_BYTES_PER_GET",
    "RANGE_FETCHES_AT_ONCE",
    "RANGE_GAP_BYTES",
    "RANGE_PIECE_BYTES",
    "S3_POOL_CONNECTIONS",
    "UPLOADS_AT_ONCE",
    "UPLOAD_MAX_PARTS",
    "UPLOAD_MIN_PART_BYTES",
    "ByteRange",
    "ByteSlice",
    "Composed",
    "MultipartUpload",
    "Piece",
    "RangeReader",
    "S3Credentials",
    "StoredObject",
    "allowed_prefixes",
    "bucket_and_key",
    "cached_input",
    "check_allowed",
    "check_writable",
    "compose",
    "confined_folder",
    "confining_prefix",
    "content_id",
    "content_sha256",
    "delete",
    "exists",
    "file_sha256",
    "filesystem",
    "get_file",
    "get_file_sha256",
    "is_within",
    "join",
    "list_files",
    "list_folders",
    "local_path",
    "multipart_upload",
    "naming_a_full_disk",
    "normalize_prefixes",
    "normalize_uri",
    "object_sha256",
    "open_input",
    "parse_prefixes",
    "put_file_atomic",
    "put_file_checked",
    "range_fetcher",
    "range_pieces",
    "read_bytes",
    "read_json",
    "read_range",
    "remove_empty_folders",
    "remove_tree",
    "replace_confined",
    "require_file_uri",
    "stat",
    "storage_errors",
    "storage_options",
    "stored_sha256",
    "using_s3_credentials",
    "write_bytes_atomic",
    "write_bytes_exclusive",
    "write_bytes_if_unchanged",
    "write_json_atomic",
]
