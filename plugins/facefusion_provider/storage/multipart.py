"""S3 multipart uploads: an object written as numbered parts, uploaded from memory or copied from other objects."""

from __future__ import annotations

from urllib.parse import urlparse

from facefusion_provider.storage.filesystems import filesystem, storage_errors
from facefusion_provider.storage.uris import bucket_and_key

UPLOADS_AT_ONCE = 4
UPLOAD_MIN_PART_BYTES = 5 * 1024 * 1024  # S3's smallest part but the last
UPLOAD_MAX_PARTS = 10_000  # S3's most parts of one object


class MultipartUpload:
    """One S3 object written as numbered parts, from any thread and in any order; the key shows nothing until
    ``complete``, and ``abort`` discards every part. Each request is retried and its errors classified like the rest.

    A part uploaded again under the same number replaces the earlier one. Every part but the last must hold at least
    ``UPLOAD_MIN_PART_BYTES``.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._fs, _ = filesystem(uri)
        self._bucket, self._key = bucket_and_key(uri)
        self._etags: dict[int, str] = {}
        with storage_errors(uri, self._fs, missing_is_input=False):
            started = self._fs.call_s3("create_multipart_upload", Bucket=self._bucket, Key=self._key)
        self.upload_id: str = started["UploadId"]

    def put_part(self, number: int, data: bytes) -> None:
        with storage_errors(self.uri, self._fs, missing_is_input=False):
            answer = self._fs.call_s3(
                "upload_part",
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=data,
            )
        self._etags[number] = answer["ETag"]

    def copy_part(self, number: int, source_uri: str, start: int, end: int) -> None:
        """Part ``number`` becomes bytes ``[start, end)`` of the S3 object ``source_uri``, copied by S3 itself."""
        bucket, key = bucket_and_key(source_uri)
        with storage_errors(self.uri, self._fs, missing_is_input=False):
            answer = self._fs.call_s3(
                "upload_part_copy",
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self.upload_id,
                PartNumber=number,
                CopySource={"Bucket": bucket, "Key": key},
                CopySourceRange=f"bytes={start}-{end - 1}",
            )
        self._etags[number] = answer["CopyPartResult"]["ETag"]

    def complete(self, part_count: int) -> None:
        """The object becomes parts ``1..part_count``; any part uploaded beyond them is dropped."""
        parts = [{"PartNumber": number, "ETag": self._etags[number]} for number in range(1, part_count + 1)]
        with storage_errors(self.uri, self._fs, missing_is_input=False):
            self._fs.call_s3(
                "complete_multipart_upload",
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": parts},
            )

    def abort(self) -> None:
        with storage_errors(self.uri, self._fs, missing_is_input=False):
            self._fs.call_s3("abort_multipart_upload", Bucket=self._bucket, Key=self._key, UploadId=self.upload_id)


def multipart_upload(uri: str) -> MultipartUpload | None:
    """A new multipart upload to ``uri`` on S3; None for any other store (publish a finished file there instead)."""
    return MultipartUpload(uri) if urlparse(uri).scheme == "s3" else None
