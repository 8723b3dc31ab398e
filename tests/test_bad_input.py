"""Each bad input a user can give ends in one message naming the file, what is wrong and how to fix it."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from numpy.lib import format as npy_format

from calibrepro import cli
from calibrepro.io import LogitsFileError, check_agreement, load_logits
from calibrepro.splits import SmallCalibrationWarning, SplitError, make_split


def _logits(path, n=20, k=3, labels=None, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % k if labels is None else np.asarray(labels)
    np.savez(path, logits=rng.normal(size=(len(labels), k)).astype(np.float32), labels=labels)
    return path


def _huge_header_npz(path):
    """An .npz whose 'logits' member declares 10**14 float32 values but holds 64 bytes."""
    member = io.BytesIO()
    npy_format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (10**7, 10**7)})
    member.write(b"\0" * 64)
    labels = io.BytesIO()
    np.save(labels, np.zeros(3, np.int64))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("logits.npy", member.getvalue())
        archive.writestr("labels.npy", labels.getvalue())
    return path


def test_npy_under_an_npz_name(tmp_path):
    path = tmp_path / "model.npz"
    with open(path, "wb") as handle:
        np.save(handle, np.zeros((4, 2)))
    with pytest.raises(LogitsFileError) as error:
        load_logits(path)
    assert str(error.value) == (
        f"{path}: this is a single NumPy array (.npy) under an .npz name; the file must be an .npz archive holding "
        "two arrays: write it with numpy.savez(path, logits=logits, labels=labels)"
    )


def test_a_header_declaring_a_huge_array_fails_before_allocating(tmp_path):
    path = _huge_header_npz(tmp_path / "huge.npz")
    with pytest.raises(LogitsFileError) as error:
        load_logits(path)
    message = str(error.value)
    assert message.startswith(f"{path}: array 'logits' declares shape (10000000, 10000000) (1e+14 values of float32)")
    assert "the file is corrupt" in message and "numpy.savez" in message


def test_a_header_larger_than_its_member_is_rejected_even_when_small(tmp_path):
    path = _logits(tmp_path / "m.npz")
    bad = tmp_path / "bad.npz"  # 'logits' declares 21 rows but holds 20
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(bad, "w") as target:
        for info in source.infolist():
            body = source.read(info)
            if info.filename == "logits.npy":
                body = body.replace(b"'shape': (20, 3)", b"'shape': (21, 3)")
            target.writestr(info.filename, body)
    with pytest.raises(LogitsFileError, match=r"bad.npz: array 'logits' declares shape \(21, 3\)"):
        load_logits(bad)


def test_a_text_file_named_npz(tmp_path):
    path = tmp_path / "model.npz"
    path.write_text("logits,labels\n0.1,0\n")
    with pytest.raises(LogitsFileError) as error:
        load_logits(path)
    assert str(error.value) == (
        f"{path}: not a NumPy archive (.npz is a zip file of arrays); "
        "write it with numpy.savez(path, logits=logits, labels=labels)"
    )
    assert "unsafe" not in str(error.value) and "pickle" not in str(error.value)


def test_files_of_one_data_set_with_different_sample_counts_name_both_files_and_counts(tmp_path):
    a, b = _logits(tmp_path / "a.npz", n=20), _logits(tmp_path / "b.npz", n=19)
    with pytest.raises(LogitsFileError) as error:
        check_agreement({f"my_resnet ({a})": a, f"my_vit ({b})": b}, group="models of data set 'mydata'")
    assert str(error.value) == (
        f"models of data set 'mydata': my_resnet ({a}) has 20 samples but my_vit ({b}) has 19; all must hold the "
        "logits of the same evaluation samples in the same order"
    )


def test_files_of_one_data_set_with_different_class_counts_are_rejected(tmp_path):
    a, b = _logits(tmp_path / "a.npz", k=3), _logits(tmp_path / "b.npz", k=4, labels=np.arange(20) % 3)
    with pytest.raises(LogitsFileError, match=f"{a} has 3 classes but {b} has 4; models compared together"):
        check_agreement({str(a): a, str(b): b})


def test_files_with_different_labels_are_rejected(tmp_path):
    labels = np.arange(20) % 3
    a, b = _logits(tmp_path / "a.npz", labels=labels), _logits(tmp_path / "b.npz", labels=np.roll(labels, 1))
    with pytest.raises(LogitsFileError, match=r"different labels in 20 of 20 rows \(first at row 0\)"):
        check_agreement({str(a): a, str(b): b})
    check_agreement({str(a): a, "same": _logits(tmp_path / "c.npz", labels=labels, seed=3)})  # agreeing files pass


def test_check_logits_checks_that_files_given_together_agree(tmp_path, capsys):
    a, b = _logits(tmp_path / "a.npz", n=20), _logits(tmp_path / "b.npz", n=19)
    assert cli.main(["check-logits", str(a), str(b)]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        f"calibrepro: error: files given together: {a} has 20 samples but {b} has 19; all must hold the logits of "
        "the same evaluation samples in the same order"
    )
    assert "Traceback" not in captured.err
    c = _logits(tmp_path / "c.npz", n=20, seed=5)
    assert cli.main(["check-logits", str(a), str(c)]) == 0
    assert "all 2 files agree" in capsys.readouterr().out


def test_a_class_with_one_sample_names_data_set_class_and_count():
    labels = np.array([0] * 10 + [1] * 10 + [2])
    with pytest.raises(SplitError) as error:
        make_split(labels, 0.5, seed=0, where="data set 'mydata'")
    assert str(error.value) == (
        "data set 'mydata': class 2 has only 1 sample; a stratified calibration/test split needs at least 2 per "
        "class (one for each half). Add samples of that class, or remove it from every model's file."
    )


@pytest.mark.parametrize(
    "fraction, half, works",
    [(0.01, "calibration", 0.25), (0.002, "calibration", 0.25), (0.99, "test", 0.85)],
)
def test_a_fraction_that_leaves_a_class_empty_names_it_and_a_fraction_that_works(fraction, half, works):
    labels = np.array([0] * 100 + [1] * 100 + [2] * 3)
    with pytest.raises(SplitError) as error:
        make_split(labels, fraction, seed=0, where="data set 'mydata'")
    assert str(error.value) == (
        f"data set 'mydata': split.calibration_fraction {fraction} leaves class 2 (3 samples) with no sample in the "
        f"{half} half; split.calibration_fraction: {works} would work"
    )
    calibration, test = make_split(labels, works, seed=0)  # the suggestion is true
    assert 2 in labels[calibration] and 2 in labels[test]


def test_a_small_calibration_half_warns_but_splits():
    labels = np.repeat(np.arange(10), 12)
    with pytest.warns(SmallCalibrationWarning, match=r"data set 'd': the calibration half has 60 samples for 10 classes \(6.0 per"):
        calibration, test = make_split(labels, 0.5, seed=0, where="data set 'd'")
    assert len(calibration) == len(test) == 60


@pytest.mark.slow
def test_the_workflow_stops_before_any_job_when_a_data_sets_files_disagree(tmp_path):
    from workflow_helpers import run_snakemake, synthetic_logits, write_config

    _, labels = synthetic_logits(tmp_path / "logits" / "a.npz", n=101, k=3, seed=1)
    synthetic_logits(tmp_path / "logits" / "b.npz", k=3, seed=2, labels=labels[:-1])
    config = write_config(tmp_path / "c.yaml", {"models": {"mydata": {
        "a": {"source": "logits", "path": "logits/a.npz"}, "b": {"source": "logits", "path": "logits/b.npz"}}}})
    result = run_snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    assert (
        "models of data set 'mydata': a (logits/a.npz) has 101 samples but b (logits/b.npz) has 100; all must hold "
        "the logits of the same evaluation samples in the same order"
    ) in result.stderr
    assert not (tmp_path / "results").exists()  # nothing ran


@pytest.mark.slow
def test_the_workflow_names_the_data_set_of_an_unstratifiable_split(tmp_path):
    from workflow_helpers import run_snakemake, synthetic_logits, write_config

    synthetic_logits(tmp_path / "t.npz", k=3, labels=np.array([0] * 50 + [1] * 50 + [2]))
    config = write_config(tmp_path / "c.yaml", {"models": {"tiny": {"a": {"source": "logits", "path": "t.npz"}}}})
    result = run_snakemake(tmp_path, "results/c/metrics.csv", "--configfile", str(config))
    assert result.returncode != 0
    assert "data set 'tiny': class 2 has only 1 sample" in result.stderr
    assert not (tmp_path / "results" / "c" / "splits").exists() or not any((tmp_path / "results" / "c" / "splits").rglob("*.npz"))


@pytest.mark.slow
def test_a_size_study_an_image_folder_cannot_hold_stops_the_workflow_before_any_job(tmp_path):
    """Counted from the folder's files before a network trains (its training took minutes before it failed)."""
    from workflow_helpers import run_snakemake, write_config

    for part, count in (("train", 10), ("test", 40)):
        for name in ("cat", "dog"):
            (tmp_path / "pets" / part / name).mkdir(parents=True)
            for index in range(count):
                (tmp_path / "pets" / part / name / f"{index}.png").touch()
    config = write_config(tmp_path / "c.yaml", {
        "models": {"pets": {"net": {"source": "train", "network": "lenet5"}}},
        "datasets": {"pets": {"source": "imagefolder", "root": "pets"}},
        "size_study": {"enabled": True, "sizes": [10, 50], "seeds": [0]}})
    result = run_snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: size_study.sizes: 50 is larger than the calibration half of data set pets (40 samples); use sizes "
        "up to 40, or hold more training images out with datasets.pets.calibration_pool")
    assert not (tmp_path / "results").exists()  # nothing ran
