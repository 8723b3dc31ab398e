"""Atomic writes and the validation of logits archives (the bring-your-own-logits contract)."""

import json

import numpy as np
import pytest

from calibrepro.io import (
    LogitsFileError,
    NonFiniteValueError,
    atomic_path,
    load_logits,
    save_logits,
    validate_logits,
    write_csv,
    write_json,
)


def test_atomic_path_leaves_nothing_when_the_block_fails(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_replaces_only_on_success(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("new")
            raise RuntimeError
    assert target.read_text() == "old"
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_write_json_is_byte_stable(tmp_path):
    write_json(tmp_path / "a.json", {"b": 1.0, "a": [0.1, 2]})
    write_json(tmp_path / "b.json", {"a": [0.1, 2], "b": 1.0})
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": [0.1, 2], "b": 1.0}


@pytest.mark.parametrize("bad", [float("nan"), np.inf, np.float64(-np.inf)])
def test_json_and_csv_writers_refuse_nan_and_infinity_naming_the_file_and_the_key(tmp_path, bad):
    path = tmp_path / "curves.json"
    path.write_text("old")
    with pytest.raises(NonFiniteValueError) as error:
        write_json(path, {"methods": {"isotonic": {"rmse": [0.5, bad]}}, "levels": [0.0]})
    assert f"{path}: refusing to write a NaN or infinite value at methods.isotonic.rmse[1]" in str(error.value)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["curves.json"]  # nothing written
    table = tmp_path / "metrics.csv"
    with pytest.raises(NonFiniteValueError) as error:
        write_csv(table, ("dataset", "metric", "value"), [("wine", "msce", 0.1), ("wine", "rmse", bad)])
    assert f"{table}: refusing to write {float(bad)!r} in column 'value' of line 3 (dataset=wine, metric=rmse" in str(
        error.value)
    assert not table.exists()
    write_csv(table, ("dataset", "metric", "value"), [("wine", "msce", np.float64(0.1))])
    assert table.read_text() == "dataset,metric,value\nwine,msce,0.1\n"


def test_round_trip_keeps_arrays_and_metadata(tmp_path):
    logits = np.random.default_rng(0).normal(size=(6, 3))
    labels = np.array([0, 1, 2, 0, 1, 2])
    save_logits(tmp_path / "m.npz", logits, labels, {"source": "test", "n": 6})
    archive = load_logits(tmp_path / "m.npz")
    assert archive.logits.dtype == np.float32 and archive.labels.dtype == np.int64
    np.testing.assert_array_equal(archive.logits, logits.astype(np.float32))
    np.testing.assert_array_equal(archive.labels, labels)
    assert archive.metadata == {"source": "test", "n": 6}


@pytest.mark.parametrize(
    "logits, labels, message",
    [
        (np.zeros(5), np.zeros(5, int), "2-D array"),
        (np.zeros((5, 1)), np.zeros(5, int), "at least 2 samples and 2 classes"),
        (np.array([[0.0, np.nan], [1.0, 2.0], [0.0, 0.0]]), np.zeros(3, int), "NaN or infinite values in 1 row(s), first at row 0"),
        (np.array([[0.0, 1.0], [np.inf, 2.0], [0.0, 0.0]]), np.zeros(3, int), "first at row 1"),
        (np.zeros((3, 2)), np.zeros(4, int), "'labels' has 4 entries but 'logits' has 3 rows"),
        (np.zeros((3, 2)), np.array([0, 2, 1]), "label 2 at row 1 is outside the 2 classes [0, 1]"),
        (np.zeros((3, 2)), np.array([0, -1, 1]), "label -1 at row 1"),
        (np.zeros((3, 2)), np.array([0.0, 0.5, 1.0]), "integer class indices"),
        (np.zeros((3, 2), dtype=int), np.array([0, 1, 1]), "floating-point"),
        (np.zeros((3, 2)), np.zeros((3, 1), int), "1-D array"),
    ],
)
def test_bad_arrays_are_rejected_with_the_reason(logits, labels, message):
    with pytest.raises(LogitsFileError) as error:
        validate_logits(logits, labels, where="mine.npz")
    assert "mine.npz" in str(error.value)
    assert message in str(error.value)


def test_missing_arrays_and_unreadable_files_are_named(tmp_path):
    np.savez(tmp_path / "only_logits.npz", logits=np.zeros((3, 2)))
    with pytest.raises(LogitsFileError, match=r"missing array\(s\) \['labels'\]"):
        load_logits(tmp_path / "only_logits.npz")
    (tmp_path / "garbage.npz").write_bytes(b"not a zip file")
    with pytest.raises(LogitsFileError, match="not a NumPy archive"):
        load_logits(tmp_path / "garbage.npz")
    with pytest.raises(LogitsFileError, match="no such file"):
        load_logits(tmp_path / "absent.npz")


def test_written_files_get_the_usual_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {})
    finally:
        os.umask(umask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
