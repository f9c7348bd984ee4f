"""Crash injection for the crash tests: loaded by every Python process of a `klake` run (the CLI, and
Spark's Python workers, which inherit PYTHONPATH) when `KLAKE_CRASH_DIR` is set; inert otherwise.

Every storage mutation the run makes is a numbered point, counted across all its processes in
`$KLAKE_CRASH_DIR/count` (under a file lock) and logged to `$KLAKE_CRASH_DIR/points`:

- local: `os.link`, `os.unlink`/`os.remove`, `os.rename`/`os.replace`, and `open` for writing, of paths
  under `$KLAKE_CRASH_ROOT`;
- S3: every mutating request s3fs sends (PutObject, CopyObject, DeleteObject(s), the multipart calls);
- the catalog: before and after each Delta commit (`Catalog._commit`) and each maintenance operation
  (delta-rs writes in Rust, out of Python's reach, so its commits are points of their own).

At point `$KLAKE_CRASH_AT` (or, with `$KLAKE_CRASH_WHEN`, at the first point whose `kind target` contains that
text: a point named by what it is, for runs whose count varies, as an archive's of a live cluster) the process
SIGKILLs the job's process group (driver and JVM; the first
process sets `KLAKE_CRASH_PGID` for the others) and its own (Spark's Python daemon and workers), the
way a node dies: no `finally`, no lease release, no cleanup.
"""

import os

_DIR = os.environ.get("KLAKE_CRASH_DIR")


def _install() -> None:
    import builtins
    import fcntl
    import functools
    import signal

    root = os.path.abspath(os.environ.get("KLAKE_CRASH_ROOT", "/nonexistent"))
    job_group = int(os.environ.setdefault("KLAKE_CRASH_PGID", str(os.getpgrp())))  # the CLI's, inherited
    crash_at = int(os.environ.get("KLAKE_CRASH_AT") or 0)
    crash_when = os.environ.get("KLAKE_CRASH_WHEN")

    def point(kind: str, target: object) -> None:
        with _open_raw(os.path.join(_DIR, "lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            counter = os.path.join(_DIR, "count")
            n = 1 + (int(_read(counter) or 0))
            _write(counter, str(n))
            with _open_raw(os.path.join(_DIR, "points"), "a") as log:
                log.write(f"{n} {os.getpid()} {kind} {target}\n")
            named = crash_when is not None and crash_when in f"{kind} {target}"
        if n == crash_at or named:
            os.killpg(job_group, signal.SIGKILL)  # the driver and its JVM
            os.killpg(os.getpgrp(), signal.SIGKILL)  # Spark's Python daemon makes a group of its own

    def _read(path: str) -> str | None:
        try:
            with _open_raw(path) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _write(path: str, text: str) -> None:
        with _open_raw(path, "w") as f:
            f.write(text)

    _open_raw = builtins.open

    def under_root(path: object) -> bool:
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(root + os.sep)
        except TypeError:
            return False

    def local(name: str) -> None:
        real = getattr(os, name)

        @functools.wraps(real)
        def wrapper(src, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            if under_root(src) or (args and under_root(args[0])):
                point(f"local:{name}", src)
            return real(src, *args, **kwargs)

        setattr(os, name, wrapper)

    for name in ("link", "unlink", "remove", "rename", "replace"):
        local(name)

    @functools.wraps(_open_raw)
    def open_for_write(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if isinstance(mode, str) and any(c in mode for c in "wxa+") and under_root(file):
            point(f"local:open-{mode}", file)
        return _open_raw(file, mode, *args, **kwargs)

    builtins.open = open_for_write

    import s3fs.core

    mutating = {"put_object", "copy_object", "delete_object", "delete_objects", "create_multipart_upload",
                "upload_part", "upload_part_copy", "complete_multipart_upload", "abort_multipart_upload"}
    call_s3 = s3fs.core.S3FileSystem._call_s3

    async def counted_call_s3(self, method, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if method in mutating:
            point(f"s3:{method}", kwargs.get("Key", kwargs.get("Bucket")))
        return await call_s3(self, method, *args, **kwargs)

    s3fs.core.S3FileSystem._call_s3 = counted_call_s3

    from engine.ops.catalog_table import Catalog

    def around(name: str) -> None:
        real = getattr(Catalog, name)

        @functools.wraps(real)
        def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            point(f"delta:{name}:before", self.uri)
            result = real(self, *args, **kwargs)
            point(f"delta:{name}:after", self.uri)
            return result

        setattr(Catalog, name, wrapper)

    for name in ("_commit", "create_checkpoint", "optimize", "vacuum"):
        around(name)


if _DIR:
    _install()
