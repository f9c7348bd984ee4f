"""S3 and S3-compatible stores through s3fs: conditional PUTs and batched DeleteObjects."""

from __future__ import annotations

from layouts.metering import record
from layouts.store.errors import StorageAccessError, s3_problem
from layouts.store.file_io import DeleteResult, FileIO, delete_in_threads, merge_deletes
from layouts.store.parts import Parts, size_of, whole

S3_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request



class S3FileIO(FileIO):
    """S3 and S3-compatible stores: conditional PUTs (`If-None-Match: *`), batched DeleteObjects."""

    def uri(self, path: str) -> str:
        return "s3://" + path

    def put_if_absent(self, uri: str, data: bytes | Parts) -> None:
        record("PUT", written=size_of(data))
        self.fs.pipe_file(self.path(uri), whole(data), mode="create")

    def check_access(self, uri: str, write: bool) -> None:
        """One LIST of at most one key under `uri`: it proves the credentials, the endpoint and the bucket.
        (Write permission cannot be proven without writing; a refused write fails its partition later.)"""
        bucket, _, prefix = self.path(uri).partition("/")
        record("LIST")
        try:
            self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except Exception as exc:
            raise StorageAccessError(f"{uri}: {s3_problem(bucket, exc)}") from None

    def delete_many(self, uris: list[str]) -> DeleteResult:
        """One DeleteObjects request per bucket and batch of at most 1,000 keys, several requests at once
        (`_delete_in_threads`). Per-key errors that S3 returns are reported in `failed`, never dropped
        (s3fs' own `rm` omits them)."""
        result = DeleteResult()
        by_bucket: dict[str, list[str]] = {}
        for uri in uris:
            bucket, key = self.path(uri).split("/", 1)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            merge_deletes(result, delete_in_threads(lambda run, bucket=bucket: self._delete_keys(bucket, run), keys,
                                              S3_DELETE_BATCH))
        return result

    def _delete_keys(self, bucket: str, keys: list[str]) -> DeleteResult:
        """One thread's share of `delete_many`: its keys in batches of at most 1,000, one request each."""
        result = DeleteResult()
        for start in range(0, len(keys), S3_DELETE_BATCH):
            batch = keys[start:start + S3_DELETE_BATCH]
            response = self.fs.call_s3("delete_objects", Bucket=bucket,
                                       Delete={"Objects": [{"Key": k} for k in batch], "Quiet": False})
            result.requests += 1
            result.deleted.extend(f"s3://{bucket}/{d['Key']}" for d in response.get("Deleted", []))
            for error in response.get("Errors", []):
                result.failed[f"s3://{bucket}/{error['Key']}"] = f"{error.get('Code')}: {error.get('Message')}"
        return result
