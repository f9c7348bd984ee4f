"""Storage errors in the user's terms: one line naming the bucket or path, no ANSI escapes, no XML."""

from __future__ import annotations

import re

from kernel.errors import KlakeError


class StorageAccessError(KlakeError):
    """The store cannot be reached as a job needs it: credentials, bucket, endpoint or local path."""


class ObjectConflictError(FileExistsError):
    """An object already exists under a key with different bytes than the ones to be written."""


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_XML_ERROR = re.compile(r"(<\?xml[^>]*>\s*)?<Error>.*?</Error>", re.S)
_S3_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
              "AllAccessDisabled")


def describe_error(exc: BaseException) -> str:
    """One line for an error of the storage stack: delta-rs' chains (`↳` lines with ANSI colours and an
    S3 XML body) become `what: why: S3 code: message`."""
    def code_and_message(match: re.Match[str]) -> str:
        found = [re.search(f"<{tag}>(.*?)</{tag}>", match.group(0), re.S) for tag in ("Code", "Message")]
        return ": ".join(m.group(1).strip() for m in found if m is not None)

    text = _XML_ERROR.sub(code_and_message, _ANSI_ESCAPE.sub("", str(exc)))
    return ": ".join(part for line in text.splitlines() if (part := line.strip().lstrip("↳").strip()))


def _s3_error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore error, or of the one s3fs translated into an OSError."""
    for error in (exc, exc.__cause__):
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            return response.get("Error", {}).get("Code")
    return None


def s3_problem(bucket: str, exc: Exception) -> str:
    """What is wrong, in the user's terms, when the first request to `bucket` failed."""
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, PartialCredentialsError

    code = _s3_error_code(exc)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ("no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN "
                "for temporary ones) in the environment")
    if code == "NoSuchBucket":
        return f"bucket {bucket} does not exist"
    if code in _S3_DENIED or isinstance(exc, PermissionError):
        return (f"access denied to bucket {bucket} ({code or type(exc).__name__}: {describe_error(exc)}): check "
                "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach the S3 endpoint ({describe_error(exc)}): check storage.endpoint_url or KLAKE_S3_ENDPOINT_URL"
    return describe_error(exc)
