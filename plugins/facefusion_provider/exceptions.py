"""Failure classes shared by the worker and the Airflow side.

Every error the worker raises on purpose is a ``FaceFusionError``. Its class decides the process exit code and whether
Airflow may retry: bad input never gets better by retrying, a storage timeout may, a full disk once at most.
"""

from __future__ import annotations

import errno
from typing import ClassVar

# Exit codes of `facefusion-worker`. Non-retryable failures have their own codes so a pod's exit code alone says what went wrong.
EXIT_OK = 0
EXIT_INVALID_OPTION = 10
EXIT_INPUT_MISSING = 11
EXIT_INVALID_MEDIA = 12
EXIT_NO_FACE = 13
EXIT_MODEL_MISSING = 14
EXIT_MODEL_CORRUPT = 15
EXIT_MODEL_INCOMPATIBLE = 16
EXIT_INVALID_JOB = 17
EXIT_STORAGE_DENIED = 18
EXIT_STORAGE_FULL = 19
EXIT_RETRYABLE = 75  # EX_TEMPFAIL
EXIT_INTERNAL = 1  # an unexpected crash: retryable, it may be a flaky node


class FaceFusionError(Exception):
    """Base class: an error the worker understands and reports with a failure class."""

    exit_code: ClassVar[int] = EXIT_RETRYABLE
    retryable: ClassVar[bool] = True
    failure_class: ClassVar[str] = "retryable"
    retries_at_most: ClassVar[int | None] = None  # None: as many as the task's retries


class NonRetryableError(FaceFusionError):
    """Bad input or configuration: a retry would fail the same way."""

    retryable = False
    failure_class = "invalid_input"


class InvalidOptionError(NonRetryableError, ValueError):
    exit_code = EXIT_INVALID_OPTION
    failure_class = "invalid_option"


class InputMissingError(NonRetryableError, FileNotFoundError):
    exit_code = EXIT_INPUT_MISSING
    failure_class = "input_missing"


class InvalidMediaError(NonRetryableError):
    exit_code = EXIT_INVALID_MEDIA
    failure_class = "invalid_media"


class NoFaceError(NonRetryableError):
    exit_code = EXIT_NO_FACE
    failure_class = "no_face"


class ModelMissingError(NonRetryableError):
    exit_code = EXIT_MODEL_MISSING
    failure_class = "model_missing"


class ModelCorruptError(NonRetryableError):
    exit_code = EXIT_MODEL_CORRUPT
    failure_class = "model_corrupt"


class ModelIncompatibleError(NonRetryableError):
    exit_code = EXIT_MODEL_INCOMPATIBLE
    failure_class = "model_incompatible"


class InvalidWorkError(NonRetryableError):
    """A work folder that is missing, from another format version, or inconsistent with its segments."""

    exit_code = EXIT_INVALID_JOB
    failure_class = "invalid_job"


class StorageDeniedError(NonRetryableError, PermissionError):
    """Access denied or a missing bucket: credentials or configuration, not a transient fault."""

    exit_code = EXIT_STORAGE_DENIED
    failure_class = "storage_denied"


class RetryableError(FaceFusionError):
    """A transient fault (storage timeout, out of memory): retrying may succeed."""


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` says a device (or a quota) is full."""
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


class StorageFullError(RetryableError):
    """No space left where the worker writes (its scratch folder, the work root, the output's folder). One retry may
    land on another node or find space freed; more would fill the same disk again."""

    exit_code = EXIT_STORAGE_FULL
    failure_class = "storage_full"
    retries_at_most = 1

    @classmethod
    def naming(cls, where: str, error: OSError) -> StorageFullError:
        """The error for ``error`` (ENOSPC, EDQUOT) while writing ``where`` (a path or URI, and what it is)."""
        reason = error.strerror or "No space left on device"
        return cls(f"{where}: {reason.lower()}; free space there (or give the worker more), then clear the task")

    @classmethod
    def of(cls, error: OSError) -> StorageFullError:
        """The error for ``error`` named by the file it was writing (an OSError's second file is a copy's
        destination), where nothing more was known."""
        where = error.filename2 or error.filename
        return cls.naming(str(where) if where else "a disk of this worker", error)


# Failure classes retried fewer times than the task's retries allow, by exit code and by class (a pod's report alone).
RETRIES_AT_MOST_BY_EXIT_CODE: dict[int, int] = {
    cls.exit_code: cls.retries_at_most for cls in (StorageFullError,) if cls.retries_at_most is not None
}
RETRIES_AT_MOST_BY_CLASS: dict[str, int] = {
    cls.failure_class: cls.retries_at_most for cls in (StorageFullError,) if cls.retries_at_most is not None
}


NON_RETRYABLE_EXIT_CODES: frozenset[int] = frozenset(
    cls.exit_code
    for cls in (
        InvalidOptionError,
        InputMissingError,
        InvalidMediaError,
        NoFaceError,
        ModelMissingError,
        ModelCorruptError,
        ModelIncompatibleError,
        InvalidWorkError,
        StorageDeniedError,
    )
)
