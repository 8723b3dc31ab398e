"""Regression data sources (calibrepro.regression.data): real UCI files, downloads, user tables and predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibrepro.download import fetch
from calibrepro.regression import data as D
from calibrepro.regression.distributions import predictive_from_arrays
from servers import UCI, realdata_checksums

needs_uci = pytest.mark.skipif(not UCI.is_dir(), reason="needs ../shared/realdata/uci (set CALIBREPRO_REALDATA_DIR)")


def _local(spec, folder: Path) -> dict:
    return {d.path: folder / d.path.rsplit("/", 1)[1] for d in D.downloads(spec)}


# --------------------------------------------------------------------------------------------
# the real files
# --------------------------------------------------------------------------------------------
@needs_uci
def test_wine_as_the_uci_benchmark_ships_it():
    spec = {"source": "uci_wine"}
    wine = D.load_dataset("wine", spec, _local(spec, UCI / "wine-quality-red"))
    assert wine.x.shape == (1599, 11) and wine.y.shape == (1599,)
    assert set(np.unique(wine.y)) == {3.0, 4.0, 5.0, 6.0, 7.0, 8.0}
    np.testing.assert_allclose(wine.x[0], [7.4, 0.7, 0, 1.9, 0.076, 11, 34, 0.9978, 3.51, 0.56, 9.4])
    train, test = wine.fixed
    assert train.shape == (20, 1439) and test.shape == (20, 160)
    for tr, te in zip(train, test):
        assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(1599))
    assert not wine.zscore and not wine.series


@needs_uci
def test_crime_with_the_seed_preprocessing():
    spec = {"source": "uci_crime"}
    crime = D.load_dataset("crime", spec, _local(spec, UCI / "communities"))
    # 128 columns - 5 non-predictive - 22 attributes with missing values - the target
    assert crime.x.shape == (1994, 100) and crime.y.shape == (1994,)
    assert crime.target_name == "ViolentCrimesPerPop" and crime.feature_names[0] == "population"
    assert "PolicPerPop" not in crime.feature_names and "fold" not in crime.feature_names
    assert 0 <= crime.y.min() and crime.y.max() <= 1 and np.isfinite(crime.x).all()
    assert crime.zscore and crime.fixed is None
    train = np.arange(0, 1994, 2)
    z = D.standardise(crime.x, train)
    np.testing.assert_allclose(z[train].mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(z[train].std(axis=0), 1, atol=1e-12)
    assert not np.allclose(z[1::2].mean(axis=0), 0, atol=1e-3)  # test rows use the training statistics


@needs_uci
def test_uci_files_download_through_a_mirror_and_match_their_pins(file_server, tmp_path):
    for spec, folder in (({"source": "uci_crime"}, "communities"), ({"source": "uci_wine"}, "wine-quality-red")):
        pins = D.downloads(spec)
        origin = pins[0].url.rsplit("/", 1)[0]
        mirrors = {origin: file_server.mount(f"/{folder}", UCI / folder)}
        files = {d.path: fetch(d, tmp_path / d.path, mirrors=mirrors, progress=False, retries=0) for d in pins}
        data = D.load_dataset(folder, spec, files)
        assert len(data) in (1599, 1994)
    assert len(file_server.requests) == 43 + 2


# --------------------------------------------------------------------------------------------
# the energy series, on a small file in the format of energydata_complete.csv
# --------------------------------------------------------------------------------------------
def _energy_csv(path: Path, hours: int, start="2016-01-11 17:00:00", step_minutes=10) -> np.ndarray:
    stamps = np.datetime64(start) + np.arange(hours * 6) * np.timedelta64(step_minutes, "m")
    values = (np.arange(hours * 6) % 7 + 1) * 10
    lines = ['"date","Appliances","lights","T1"']
    lines += [f'"{str(t).replace("T", " ")}",{v},30,19.89' for t, v in zip(stamps, values)]
    path.write_text("\n".join(lines) + "\n")
    return values.reshape(hours, 6).sum(axis=1)


def test_energy_sums_to_hours_and_windows_past_to_next(tmp_path):
    hourly = _energy_csv(tmp_path / "energy.csv", 30)
    spec = {"source": "energy"}
    files = {D.downloads(spec)[0].path: tmp_path / "energy.csv"}
    series = D.load_dataset("energy", spec, files)
    assert series.series and series.x.shape == (30 - 20 + 1, 10) and series.y.shape == (11, 10)
    np.testing.assert_array_equal(series.x[0], hourly[:10])
    np.testing.assert_array_equal(series.y[0], hourly[10:20])
    np.testing.assert_array_equal(series.y[-1], hourly[20:30])
    short = D.load_dataset(
        "energy", {**spec, "past": 3, "horizon": 2}, {"energydata_complete.csv": tmp_path / "energy.csv"}
    )
    assert short.x.shape == (26, 3) and short.y.shape == (26, 2)


def test_the_unpinned_energy_file_s_sha256_is_recorded_on_first_use(tmp_path):
    """UCI publishes no checksum of energydata_complete.csv: the data step's log gives the sha256 it read."""
    import hashlib

    from calibrepro.regression.steps import data_step

    _energy_csv(tmp_path / "energydata_complete.csv", 30)
    data_step("energy", {"source": "energy", "past": 10, "horizon": 10},
              {"energydata_complete.csv": str(tmp_path / "energydata_complete.csv")}, tmp_path / "energy.npz",
              log=tmp_path / "data.log")
    digest = hashlib.sha256((tmp_path / "energydata_complete.csv").read_bytes()).hexdigest()
    log = (tmp_path / "data.log").read_text()
    assert f"energydata_complete.csv: sha256 {digest}" in log and "recorded on first use" in log
    assert D.downloads({"source": "energy"})[0].checksum.startswith("unpinned:UCI publishes no checksum")


def test_energy_bad_inputs_name_the_file_and_row(tmp_path):
    spec = {"source": "energy"}
    key = D.downloads(spec)[0].path
    _energy_csv(tmp_path / "gap.csv", 30, step_minutes=20)
    with pytest.raises(D.RegressionDataError, match=r"gap.csv, row 2: readings must be 10 minutes apart"):
        D.load_dataset("energy", spec, {key: tmp_path / "gap.csv"})
    _energy_csv(tmp_path / "short.csv", 12)
    with pytest.raises(D.RegressionDataError, match=r"short.csv: 12 hours, fewer than past \+ horizon = 20"):
        D.load_dataset("energy", spec, {key: tmp_path / "short.csv"})
    (tmp_path / "other.csv").write_text("date,power\n2016-01-11 17:00:00,1\n")
    with pytest.raises(D.RegressionDataError, match="expected the columns `date` and `Appliances`"):
        D.load_dataset("energy", spec, {key: tmp_path / "other.csv"})
    with pytest.raises(D.RegressionDataError, match="regression.energy.past must be a positive integer"):
        D.load_dataset("energy", {**spec, "past": 0}, {key: tmp_path / "short.csv"})
    with pytest.raises(D.RegressionDataError, match="was not downloaded"):
        D.load_dataset("energy", spec, {})


def test_energy_downloads_through_a_mirror_unpinned(file_server, tmp_path):
    _energy_csv(tmp_path / "served.csv", 25)
    pin = D.downloads({"source": "energy"})[0]
    assert pin.checksum.startswith("unpinned:")
    origin = pin.url.rsplit("/", 1)[0]
    file_server.add_file("/uci/energydata_complete.csv", (tmp_path / "served.csv").read_bytes())
    got = fetch(pin, tmp_path / pin.path, mirrors={origin: file_server.url("/uci")}, progress=False, retries=0)
    assert D.load_dataset("energy", {"source": "energy"}, {pin.path: got}).x.shape == (6, 10)


def test_a_copy_of_the_energy_file_the_user_pins_is_verified(tmp_path):
    """The user vouches for a copy with the data set's sha256: the download step checks it (no warning)."""
    import hashlib

    from calibrepro.download import ChecksumError

    (tmp_path / "copies").mkdir()
    _energy_csv(tmp_path / "copies" / "energy.csv", 25)
    digest = hashlib.sha256((tmp_path / "copies" / "energy.csv").read_bytes()).hexdigest()
    pin = D.downloads({"source": "energy", "sha256": digest})[0]
    assert pin.checksum == f"sha256:{digest}" and pin.path == D.downloads({"source": "energy"})[0].path
    mirrors = {D.ENERGY_URL: str(tmp_path / "copies" / "energy.csv")}  # a local file for the whole URL
    got = fetch(pin, tmp_path / "out" / pin.path, mirrors=mirrors, progress=False, retries=0)
    assert D.load_dataset("energy", {"source": "energy"}, {pin.path: got}).x.shape == (6, 10)
    other = D.downloads({"source": "energy", "sha256": "0" * 64})[0]
    with pytest.raises(ChecksumError, match="expected sha256:0000"):
        fetch(other, tmp_path / "out2" / pin.path, mirrors=mirrors, progress=False, retries=0)


@needs_uci
def test_the_shared_energy_series_is_the_uci_appliances_data():
    """realdata's appliances.csv (the date and Appliances columns of UCI's file, its own sha256 in SHA256SUMS)."""
    sums = realdata_checksums()
    spec = {"source": "energy", "sha256": sums["uci/energy/appliances.csv"]}
    pin = D.downloads(spec)[0]
    series = D.load_dataset("energy", spec, {pin.path: UCI / "energy" / "appliances.csv"})
    assert series.x.shape == (3270, 10) and series.y.shape == (3270, 10)  # the realdata README's count
    assert series.x.min() >= 60 and series.target_name == "Appliances (Wh per hour)"  # 6 readings of >= 10 Wh


def test_demo_and_unknown_sources():
    demo = D.load_dataset("diabetes", {"source": "diabetes"})
    assert demo.x.shape == (442, 10) and D.downloads({"source": "diabetes"}) == []
    with pytest.raises(D.RegressionDataError, match="regression.x.source is 'mnist'; use one of"):
        D.load_dataset("x", {"source": "mnist"})
    with pytest.raises(D.RegressionDataError, match="unknown regression source"):
        D.downloads({"source": "mnist"})


# --------------------------------------------------------------------------------------------
# a user's table: every bad input of the issue
# --------------------------------------------------------------------------------------------
GOOD = "a,b,strength\n1,2,10\n3,4,11.5\n5,6,9\n"


def _table(tmp_path, text, target="strength", name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return D.load_dataset("concrete", {"source": "table", "path": str(path), "target": target})


def test_table_reads_features_and_target(tmp_path):
    data = _table(tmp_path, GOOD)
    np.testing.assert_array_equal(data.x, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(data.y, [10, 11.5, 9])
    assert data.feature_names == ("a", "b") and data.target_name == "strength"
    assert np.array_equal(_table(tmp_path, GOOD, target=0).y, [1, 3, 5])  # a column number


@pytest.mark.parametrize(
    "text, target, message",
    [
        ("a,b,strength\n1,x2,10\n3,4,11\n", "strength", r"t.csv, column 'b', row 1 \(line 2\): 'x2' is not a number"),
        ("a,b,strength\n1,2,7\n3,4,7\n", "strength", r"t.csv, target column 'strength': constant \(7 in every row\)"),
        (GOOD, "weight", r"regression.concrete.target: .*t.csv has no column 'weight'; its columns are a, b, strength"),
        ("a,b,strength\n1,2,10\n3,,11\n", "strength", r"column 'b', row 2 \(line 3\): missing value \(NaN\)"),
        ("a,b,strength\n1,2,10\n3,nan,11\n", "strength", r"column 'b', row 2 \(line 3\): missing value"),
        ("a,b,strength\n1,2,10\n3,4,inf\n", "strength", r"column 'strength', row 2 \(line 3\): infinite value 'inf'"),
        ("a,b,strength\n1,-inf,10\n3,4,1\n", "strength", r"column 'b', row 1 \(line 2\): infinite value '-inf'"),
        ("a,b,strength\n1,2,NaN\n3,4,1\n", "strength", r"column 'strength', row 1 \(line 2\): missing value"),
        (GOOD, 7, r"target: column 7 is out of range for .*t.csv, which has columns 0..2 \(a, b, strength\)"),
        ("a,b,strength\n1,2,10\n", "strength", r"needs a header row and at least 2 data rows, found 1"),
        ("a,b,strength\n1,2,10\n3,4\n", "strength", r"row 2 \(line 3\): 2 cells, the header has 3"),
        ("strength\n1\n2\n", "strength", r"no feature column besides the target 'strength'"),
        ("a,a,strength\n1,2,3\n4,5,6\n", "strength", r"the header row must name every column once"),
    ],
)
def test_table_bad_inputs_name_file_column_and_row(tmp_path, text, target, message):
    with pytest.raises(D.RegressionDataError, match=message):
        _table(tmp_path, text, target)


def test_table_missing_file_and_keys(tmp_path):
    with pytest.raises(D.RegressionDataError, match=r"regression.concrete.path: .*nope.csv does not exist"):
        D.load_dataset("concrete", {"source": "table", "path": str(tmp_path / "nope.csv"), "target": "y"})
    with pytest.raises(D.RegressionDataError, match=r"regression.concrete.target is missing"):
        D.load_dataset("concrete", {"source": "table", "path": "x.csv"})


def test_too_few_samples_for_the_splits():
    with pytest.raises(
        D.RegressionDataError, match=r"concrete \(calibration \+ test\): 8 samples, but the splits need"
    ):
        D.require_samples(8, 10, "concrete (calibration + test)")
    D.require_samples(10, 10, "fine")


# --------------------------------------------------------------------------------------------
# a user's predictions
# --------------------------------------------------------------------------------------------
def _npz(tmp_path, **arrays):
    path = tmp_path / "pred.npz"
    np.savez(path, **arrays)
    return D.load_dataset("mine", {"source": "predictions", "path": str(path)})


def test_predictions_gaussian_and_samples(tmp_path):
    y = np.array([0.0, 1.0, 2.0])
    got = _npz(tmp_path, y=y, mean=y + 0.1, std=np.ones(3))
    assert got.x is None and got.given["family"] == "gaussian"
    dist = predictive_from_arrays(got.given["family"], got.given["params"])
    np.testing.assert_allclose(dist.mean(), y + 0.1)
    samples = np.random.default_rng(0).normal(size=(3, 400)) + y[:, None]
    got = _npz(tmp_path, y=y, samples=samples)
    dist = predictive_from_arrays(got.given["family"], got.given["params"])
    np.testing.assert_allclose(dist.mean(), samples.mean(axis=1))
    spread = samples.std(axis=1, ddof=1)  # Silverman's bandwidth adds (1.06 s S^-1/5)^2 to the variance
    np.testing.assert_allclose(dist.var(), samples.var(axis=1) + (1.06 * spread * 400**-0.2) ** 2)
    got = _npz(tmp_path, y=y, samples=samples, std=np.full(3, 0.5))
    assert np.all(got.given["params"]["stds"] == 0.5)
    point = _npz(tmp_path, y=y, mean=y, std=np.array([0.0, 1.0, 2.0]))  # a model without spread on a row
    assert predictive_from_arrays(point.given["family"], point.given["params"]).point_mass().tolist() == [True, False,
                                                                                                          False]


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"y": [0.0, 1.0], "samples": [[0.0, 1.0], [1.0, 2.0]], "std": [1.0, 0.0]},
         r"pred.npz: `std` must be > 0 with `samples`, row 1 has 0"),
        ({"y": [0.0, 1.0], "mean": [0.0, 1.0], "std": [1.0, -2.0]},
         r"`std` must be >= 0 \(0: a point mass\), row 1 has -2"),
        (
            {"y": [0.0, 1.0], "mean": [0.0, 1.0], "std": [np.nan, 1.0]},
            r"array 'std' has NaN or infinite values \(first at row 0\)",
        ),
        (
            {"y": [0.0, 1.0, 2.0], "mean": [0.0, 1.0], "std": [1.0, 1.0]},
            r"arrays of different lengths \(y 3, mean 2, std 2\)",
        ),
        (
            {"y": [0.0, np.inf], "mean": [0.0, 1.0], "std": [1.0, 1.0]},
            r"array 'y' has NaN or infinite values \(first at row 1\)",
        ),
        (
            {"y": [0.0, 1.0], "mean": [0.0, 1.0]},
            r"needs arrays `y` and either `mean` \+ `std` or `samples`; found mean, y",
        ),
        ({"y": [0.0, 1.0], "samples": [[1.0, 1.0], [0.0, 2.0]]}, r"the samples of row 0 are all equal"),
        ({"y": [0.0, 1.0], "samples": [[1.0], [2.0]]}, r"`samples` must be \(N, S\) with S >= 2"),
        ({"y": np.array(["a", "b"]), "mean": [0.0, 1.0], "std": [1.0, 1.0]}, r"array 'y' must be numeric"),
    ],
)
def test_predictions_bad_inputs(tmp_path, arrays, message):
    with pytest.raises(D.RegressionDataError, match=message):
        _npz(tmp_path, **{k: np.asarray(v) for k, v in arrays.items()})


def test_predictions_never_unpickle(tmp_path):
    path = tmp_path / "pred.npz"
    np.savez(path, y=np.array([object(), 1], dtype=object), mean=np.zeros(2), std=np.ones(2))
    with pytest.raises(D.RegressionDataError, match="not a readable .npz of numeric arrays"):
        D.load_dataset("mine", {"source": "predictions", "path": str(path)})
    with pytest.raises(D.RegressionDataError, match="does not exist"):
        D.load_dataset("mine", {"source": "predictions", "path": str(tmp_path / "none.npz")})
