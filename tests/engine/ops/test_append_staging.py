"""Staged append rows (`engine.ops.append_staging`) against a brute-force grouping of the same rows.

Several input tasks stage interleaved rows of several topic-partitions from several input splits, in
flushes small enough that a split's rows span flushes and pieces span record batches; reading each
`_tp`'s pieces back must give exactly that `_tp`'s rows in input order (split by split in `(rank, block)`
order, rows in their order), every row once, whatever order the tasks finished in."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from engine.ops import append_staging
from engine.ops.append_staging import RowStager, order_pieces, staged_batches
from layouts.store import list_objects
from layouts.store.bound import Store


def _rows(seed: int, splits: list[tuple[int, int]], n: int, tps: int) -> pa.Table:
    """`n` rows of each input split `(rank, block)`, in input order, each naming a random `_tp`."""
    rng = random.Random(seed)
    parts = []
    for rank, block in splits:
        tp = [rng.randrange(tps) for _ in range(n)]
        parts.append(pa.table({
            "_tp": pa.array(tp, pa.int32()), "_rank": pa.array([rank] * n, pa.int32()),
            "_block": pa.array([block] * n, pa.int64()), "_pos": pa.array(np.arange(n) + 7 * block, pa.int64()),
            "value": pa.array([f"{rank}:{block}:{i}:{'x' * rng.randrange(30)}".encode() for i in range(n)]),
            "key": pa.array([None if i % 5 == 0 else b"k%d" % i for i in range(n)], pa.binary())}))
    return pa.concat_tables(parts)


@pytest.mark.parametrize("dry_run", [False, True], ids=["staged", "dry-run"])
@pytest.mark.parametrize("flush_bytes", [1, 3_000, 1 << 30])
def test_each_partition_reads_back_exactly_its_rows_in_input_order(tmp_path, monkeypatch, flush_bytes: int,
                                                                   dry_run: bool) -> None:
    """Staged in objects, or (a dry run, issue 26: no prefix) in the pieces themselves, nothing written."""
    monkeypatch.setattr(append_staging, "PIECE_ROWS", 37)  # pieces spanning several record batches
    # three input tasks; task 1 holds two splits out of path order (as Spark packs files by size)
    tasks = [[(0, 0), (0, 1)], [(2, 0), (1, 0)], [(3, 5)]]
    pieces = []
    expected: dict[int, list[tuple]] = {}
    for t, splits in enumerate(tasks):
        rows = _rows(t, splits, 200, 5)
        stager = RowStager(None if dry_run else str(tmp_path / "staging"), Store(str(tmp_path)), flush_bytes)
        for batch in rows.to_batches(max_chunksize=45):
            stager.add(batch)
        pieces.append(stager.finish())
    everything = pa.concat_tables([_rows(t, splits, 200, 5) for t, splits in enumerate(tasks)]).to_pylist()
    everything.sort(key=lambda r: (r["_tp"], r["_rank"], r["_block"], r["_pos"]))  # input order per `_tp`
    for row in everything:
        expected.setdefault(row["_tp"], []).append((row["value"], row["key"], row["_rank"], row["_pos"]))
    random.Random(1).shuffle(pieces)  # tasks finish in any order
    by_tp = order_pieces(pa.concat_tables(pieces))
    assert sorted(by_tp) == sorted(expected)
    for tp, table in by_tp.items():
        got = pa.Table.from_batches(list(staged_batches([table], Store(str(tmp_path)))))
        assert set(got.column("_tp").to_pylist()) == {tp}
        assert list(zip(*(got.column(c).to_pylist() for c in ("value", "key", "_rank", "_pos")),
                        strict=True)) == expected[tp]
        assert "_block" not in got.column_names and sum(table.column("rows").to_pylist()) == got.num_rows
    files = list_objects(str(tmp_path / "staging"))
    if dry_run:
        assert files == [] and list(tmp_path.iterdir()) == []
    else:
        assert len(files) == (len(tasks) if flush_bytes > 1 << 20
                              else len({p["uri"] for t in pieces for p in t.to_pylist()}))


def test_a_task_without_rows_stages_nothing(tmp_path) -> None:
    stager = RowStager(str(tmp_path / "staging"), Store(str(tmp_path)), 1 << 20)
    assert stager.finish().num_rows == 0 and order_pieces(stager.finish()) == {}
    assert list_objects(str(tmp_path / "staging")) == []


def test_a_staged_file_gone_is_named(tmp_path) -> None:
    stager = RowStager(str(tmp_path / "staging"), Store(str(tmp_path)), 1 << 20)
    stager.add(_rows(0, [(0, 0)], 10, 1).to_batches()[0])
    pieces = order_pieces(stager.finish())
    for info in list_objects(str(tmp_path / "staging")):
        (tmp_path / "staging" / info.name).unlink()
    with pytest.raises(FileNotFoundError, match="staged rows .*arrow are gone"):
        list(staged_batches([pieces[0]], Store(str(tmp_path))))
