"""`calibrepro conformal fit` and `predict`: the library's sets on files, the calibrator applied first, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrepro import cli
from calibrepro.calibrators import calibrator_from_json
from calibrepro.conformal import ConformalClassifier
from test_cli import run


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 6, 1200)
    logits = (3 * rng.standard_normal((1200, 6)) + 3 * np.eye(6)[labels]).astype(np.float32)
    np.savez(tmp_path / "cal.npz", logits=logits[:600], labels=labels[:600])
    np.savez(tmp_path / "new.npz", logits=logits[600:], labels=labels[600:])
    np.savez(tmp_path / "unlabelled.npz", logits=logits[600:])
    return tmp_path, logits, labels


def test_fit_and_predict_give_the_library_sets_with_the_calibrator_applied_first(files, capsys):
    folder, logits, labels = files
    ts, cp, sets = folder / "ts.json", folder / "cp.json", folder / "sets.npz"
    assert cli.main(["fit", "--method", "temperature_scaling", str(folder / "cal.npz"), "-o", str(ts)]) == 0
    assert cli.main(["conformal", "fit", "--score", "raps", "--alpha", "0.1", str(folder / "cal.npz"),
                     "--calibrator", str(ts), "-o", str(cp)]) == 0
    assert cli.main(["conformal", "predict", str(cp), str(folder / "new.npz"), "-o", str(sets)]) == 0
    calibrator = calibrator_from_json(json.loads(ts.read_text()))
    expected = ConformalClassifier("raps", 0.1).fit(calibrator.predict_proba(logits[:600]), labels[:600])
    written = np.load(sets)
    np.testing.assert_array_equal(written["sets"], expected.predict(calibrator.predict_proba(logits[600:])))
    stored = json.loads(cp.read_text())
    assert stored["calibrator"]["method"] == "temperature_scaling" and stored["calibration_samples"] == 600
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith(f"conformal raps (randomised), alpha 0.1: threshold {expected.threshold_:.6g} from "
                              "600 samples")
    coverage = written["sets"][np.arange(600), labels[600:]].mean()
    assert out[-1] == (f"{sets}: prediction sets of 600 rows of {folder / 'new.npz'}; coverage {coverage:.4f}, "
                       f"mean set size {written['sets'].sum(axis=1).mean():.4g}")


def test_no_randomized_and_unlabelled_logits(files, capsys):
    folder, logits, labels = files
    cp, sets = folder / "cp.json", folder / "sets.npz"
    assert cli.main(["conformal", "fit", "--score", "aps", "--no-randomized", str(folder / "cal.npz"), "-o",
                     str(cp)]) == 0
    assert json.loads(cp.read_text())["hyperparameters"]["randomized"] is False
    assert cli.main(["conformal", "predict", str(cp), str(folder / "unlabelled.npz"), "-o", str(sets)]) == 0
    assert "labels" not in np.load(sets) and capsys.readouterr().out.strip().endswith("unlabelled.npz")


@pytest.mark.parametrize("arguments, message", [
    (["fit", "--alpha", "1.5", "{folder}/cal.npz", "-o", "{folder}/x.json"],
     "alpha 1.5 must lie strictly between 0 and 1 (e.g. 0.1 for 90 % coverage)"),
    (["fit", "--alpha", "0.001", "{folder}/small.npz", "-o", "{folder}/x.json"],
     "{folder}/small.npz: 30 calibration samples are too few for alpha 0.001: ceil((n + 1)(1 - alpha)) = 31 > n, "
     "so every prediction set would be every label; use at least 999 samples or a larger alpha"),
    (["fit", "{folder}/one.npz", "-o", "{folder}/x.json"],
     "{folder}/one.npz: every label is 2; a calibration set needs samples of at least two classes"),
    (["predict", "{folder}/ts.json", "{folder}/new.npz", "-o", "{folder}/x.npz"],
     "{folder}/ts.json: not a conformal classifier file (JSON is for method 'temperature_scaling', not "
     "'conformal'); give the file that calibrepro conformal fit wrote"),
])
def test_bad_input_is_one_line(files, arguments, message):
    folder, logits, labels = files
    np.savez(folder / "small.npz", logits=logits[:30], labels=labels[:30])
    np.savez(folder / "one.npz", logits=logits[:30], labels=np.full(30, 2))
    (folder / "ts.json").write_text(json.dumps({"method": "temperature_scaling", "hyperparameters": {}, "params": {}}))
    result = run("conformal", *[part.format(folder=folder) for part in arguments])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"calibrepro: error: {message.format(folder=folder)}"
