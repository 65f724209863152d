"""What S3 answers becomes which failure class: botocore's own errors, translated by s3fs as in production."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from s3fs.errors import translate_boto_error
from s3fs.utils import FileExpired

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidWorkError, RetryableError, StorageDeniedError

URI = "s3://videos/in/a.mp4"


def s3_error(code: str, status: int, message: str = "message from S3") -> BaseException:
    """The exception s3fs raises for an S3 error answer (a ClientError translated to a Python one)."""
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return translate_boto_error(ClientError(response, "PutObject"))  # type: ignore[arg-type]


def raised_through_mapping(error: BaseException, uri: str = URI) -> BaseException:
    with pytest.raises(Exception) as caught, storage.storage_errors(uri):
        raise error
    return caught.value


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        ("AccessDenied", "check the credentials and the bucket policy"),
        ("InvalidAccessKeyId", "the access key id is not known"),
        ("SignatureDoesNotMatch", "the secret key does not match"),
        ("ExpiredToken", "the session token has expired"),
    ],
)
def test_refusals_are_storage_denied_naming_bucket_key_and_cause(code: str, hint: str) -> None:
    error = raised_through_mapping(s3_error(code, 403))
    assert isinstance(error, StorageDeniedError) and not error.retryable
    assert str(error).startswith(f"{URI}: access denied to bucket 'videos', key 'in/a.mp4' ({code}:")
    assert hint in str(error)


def test_a_missing_bucket_is_storage_denied_and_a_missing_key_is_missing_input() -> None:
    bucket = raised_through_mapping(s3_error("NoSuchBucket", 404))
    assert isinstance(bucket, StorageDeniedError)
    assert "bucket 'videos' does not exist" in str(bucket) and "'in/a.mp4'" in str(bucket)
    key = raised_through_mapping(s3_error("NoSuchKey", 404))
    assert isinstance(key, InputMissingError) and str(key) == f"{URI}: no such file"


@pytest.mark.parametrize(
    "error",
    [
        s3_error("SlowDown", 503, "Please reduce your request rate."),
        s3_error("InternalError", 500),
        EndpointConnectionError(endpoint_url="http://s3.example:9000/videos/in/a.mp4"),
        TimeoutError("read timed out"),
    ],
)
def test_what_is_still_failing_after_the_retries_is_retryable(error: BaseException) -> None:
    mapped = raised_through_mapping(error)
    assert isinstance(mapped, RetryableError) and mapped.retryable
    assert str(mapped).startswith(f"{URI}: storage still failing after retries: ")


def test_an_object_replaced_while_read_fails_the_job_not_the_try() -> None:
    mapped = raised_through_mapping(FileExpired(filename="videos/in/a.mp4", e_tag="abc"))
    assert isinstance(mapped, InvalidWorkError) and "changed while it was being read" in str(mapped)


def test_local_errors_keep_their_meaning() -> None:
    assert isinstance(raised_through_mapping(FileNotFoundError("x"), "file:///tmp/x.mp4"), InputMissingError)
    assert isinstance(raised_through_mapping(PermissionError("x"), "file:///tmp/x.mp4"), StorageDeniedError)
    assert type(raised_through_mapping(OSError("disk full"), "file:///tmp/x.mp4")) is OSError
