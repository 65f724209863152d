"""Failure classes shared by the worker and the Airflow side.

Every error the worker raises on purpose is a ``FaceFusionError``. Its class decides the process exit code and whether
Airflow may retry: bad input never gets better by retrying, a storage timeout may.
"""

from __future__ import annotations

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
EXIT_RETRYABLE = 75  # EX_TEMPFAIL
EXIT_INTERNAL = 1  # an unexpected crash: retryable, it may be a flaky node


class FaceFusionError(Exception):
    """Base class: an error the worker understands and reports with a failure class."""

    exit_code: ClassVar[int] = EXIT_RETRYABLE
    retryable: ClassVar[bool] = True
    failure_class: ClassVar[str] = "retryable"


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
