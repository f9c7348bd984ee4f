"""`layouts.store.bound.Store`, a root bound to its FileIO (issue 28): the same objects as fsspec sees them, on a
local directory and on S3 (moto_server), and safe to pickle into a Spark task and to use after a fork."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

import fsspec
import pytest

from layouts.store import ObjectConflictError, StorageOptions
from layouts.store.bound import Store


def _raw(backend, uri: str) -> bytes:
    """The object as fsspec itself reads it, without klake."""
    fs = fsspec.filesystem("s3", **backend.options.s3fs_kwargs()) if backend.name == "s3" else fsspec.filesystem("file")
    return fs.cat_file(uri.split("://", 1)[-1])


def test_a_store_writes_reads_lists_and_deletes_under_its_root(backend) -> None:
    store = Store(backend.base + "/", backend.options)
    uri = store.uri("t-0", "00000000000000000000-aa.log")
    assert uri == f"{store.root}/t-0/00000000000000000000-aa.log"
    store.put_if_absent(uri, b"first")
    with pytest.raises(FileExistsError):
        store.put_if_absent(uri, b"second")
    assert store.ensure(uri, b"first") is False
    with pytest.raises(ObjectConflictError):
        store.ensure(uri, b"other")
    assert store.ensure(store.uri("t-0", "new"), [b"a", b"bc"]) is True
    assert _raw(backend, uri) == b"first" and _raw(backend, store.uri("t-0", "new")) == b"abc"
    assert store.read(uri, 1, 4) == b"irs" and bytes(store.read_view(uri, 2, 99)) == b"rst"
    assert store.open_ranged(uri, 5).read() == b"first"
    assert store.info(uri).size == 5 and store.info(store.uri("missing")) is None

    store.write(store.uri("out", "report.json"), b"{}")
    with store.open_write(store.uri("out", "big.tmp")) as out:
        out.write(b"x" * 10)
        out.write(b"y")
    store.move(store.uri("out", "big.tmp"), store.uri("out", "big"))
    assert _raw(backend, store.uri("out", "big")) == b"x" * 10 + b"y"
    assert [o.uri for o in store.list_objects()] == sorted(
        store.uri(k) for k in ("out/big", "out/report.json", "t-0/00000000000000000000-aa.log", "t-0/new"))
    assert store.list_dirs() == [store.uri("out"), store.uri("t-0")]

    assert store.delete(uri) is True and store.info(uri) is None
    result = store.delete_many([store.uri("t-0", "new"), store.uri("out", "big")])
    assert sorted(result.deleted) == [store.uri("out", "big"), store.uri("t-0", "new")] and not result.failed
    store.delete_tree(store.uri("out"))
    assert store.list_objects() == []


def test_a_store_reaches_an_object_of_another_scheme_with_its_own_file_io(s3_backend, tmp_path: Path) -> None:
    """An external segment may live outside the root, even on local disk beside an S3 root."""
    local = tmp_path / "external.log"
    local.write_bytes(b"outside")
    store = Store(s3_backend.base, s3_backend.options)
    store.put_if_absent(store.uri("inside"), b"inside")
    assert store.read(str(local)) == b"outside" and store.read(store.uri("inside")) == b"inside"
    result = store.delete_many([str(local), store.uri("inside")])
    assert sorted(result.deleted) == sorted([str(local), store.uri("inside")])
    assert not local.exists() and store.list_objects() == []


def test_a_pickled_store_carries_root_and_options_but_no_file_io_and_no_secret(s3_backend) -> None:
    options = StorageOptions(endpoint_url=s3_backend.options.endpoint_url, key=s3_backend.options.key,
                             secret="very-secret-value", region="us-east-1")
    store = Store(s3_backend.base, options)
    assert store.io is store.io  # made once in this process
    payload = pickle.dumps(store)
    assert b"very-secret-value" in payload  # the options travel whole, as the task needs them
    copy = pickle.loads(payload)
    assert copy == store and copy._io is None
    assert "very-secret-value" not in repr(store) and repr(store) == f"Store({s3_backend.base!r})"
    working = pickle.loads(pickle.dumps(Store(s3_backend.base, s3_backend.options)))
    working.put_if_absent(working.uri("k"), b"v")
    assert _raw(s3_backend, working.uri("k")) == b"v"


def _read_in_child(store: Store, uri: str, conn) -> None:
    conn.send(store.read(uri))


@pytest.mark.s3
def test_a_store_used_before_a_fork_works_in_the_forked_child(s3_backend) -> None:
    """Spark's Python workers are forked: the child must not reuse the parent's S3 client (its event loop)."""
    store = Store(s3_backend.base, s3_backend.options)
    store.put_if_absent(store.uri("before-fork"), b"parent wrote")
    assert store.read(store.uri("before-fork")) == b"parent wrote"
    parent_io = store.io
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_read_in_child, args=(store, store.uri("before-fork"), send))
    child.start()
    got = receive.recv() if receive.poll(120) else None
    child.join(120)
    if child.is_alive():
        child.kill()
    assert got == b"parent wrote" and child.exitcode == 0
    assert store.io is parent_io


def test_at_gives_a_store_at_another_root_with_the_same_options(tmp_path: Path) -> None:
    options = StorageOptions(endpoint_url="http://example.invalid:1")
    store = Store(str(tmp_path / "a"), options)
    other = store.at(str(tmp_path / "b") + "/")
    assert other.root == str(tmp_path / "b") and other.options is options
