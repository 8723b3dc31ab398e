"""Calibration-set-size study: nested stratified subsets, values, config validation, report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrepro.calibrators import make_calibrator
from calibrepro.config import ConfigError, load_schema, validate_config
from calibrepro.metrics import compute_metrics
from calibrepro.size_study import calibration_half, run_size_study, stratified_order
from calibrepro.training.folders import hold_out

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")


def test_stratified_order_prefixes_are_nested_and_stratified():
    labels = np.repeat([0, 1, 2, 3], [50, 100, 150, 200])  # shares 1/10, 2/10, 3/10, 4/10
    order = stratified_order(labels, seed=3)
    assert sorted(order.tolist()) == list(range(500))  # a permutation
    for size in (10, 20, 37, 100, 250, 499):
        counts = np.bincount(labels[order[:size]], minlength=4)
        expected = size * np.array([0.1, 0.2, 0.3, 0.4])
        assert np.all(np.abs(counts - expected) <= 1), (size, counts)
    assert not np.array_equal(order, stratified_order(labels, seed=4))
    assert np.array_equal(order, stratified_order(labels, seed=3))


def test_size_study_values_equal_direct_fits():
    rng = np.random.default_rng(0)
    k, n = 4, 400
    labels = np.arange(n) % k
    logits = (rng.normal(size=(n, k)) * 2).astype(np.float32)
    logits[np.arange(n), labels] += 2.5
    cal, test = (logits[:200], labels[:200]), (logits[200:], labels[200:])
    rows = list(run_size_study(cal, test, methods=["uncalibrated", "temperature_scaling", "isotonic"],
                               sizes=[100, 20], seeds=[0, 1], metrics=["ece", "nll"], bins=15))
    assert len(rows) == 2 * 2 * 3 * 2
    assert [r[1] for r in rows[:12]] == [20] * 6 + [100] * 6  # sizes ascending within a seed
    subset = stratified_order(cal[1], 1)[:20]
    expected = compute_metrics(
        make_calibrator("isotonic").fit(cal[0][subset], cal[1][subset]).predict_proba(test[0]), test[1], ["ece", "nll"]
    )
    got = {r[3]: r[4] for r in rows if r[:3] == ("isotonic", 20, 1)}
    assert got == expected
    uncalibrated = {r[4] for r in rows if r[0] == "uncalibrated" and r[3] == "ece"}
    assert len(uncalibrated) == 1  # no fit: the same value at every size and seed


def test_a_calibration_pool_extends_the_half_only_beyond_its_size(tmp_path):
    """Sizes up to the half draw from it alone (as without a pool); larger ones take the whole half and the pool's
    first samples; the split step keeps the pool's rows (the file's last ones) out of both halves."""
    from calibrepro.io import save_logits
    from calibrepro.steps.calibration import split_step
    from calibrepro.tasks import task_of

    rng = np.random.default_rng(1)
    k, n, pool = 4, 400, 100
    labels = np.arange(n + pool) % k
    logits = (rng.normal(size=(n + pool, k)) * 2).astype(np.float32)
    logits[np.arange(n + pool), labels] += 2.5
    save_logits(tmp_path / "m.npz", logits, labels, {"data": {"calibration_pool": pool}})
    split_step(tmp_path / "m.npz", 0.5, 0, tmp_path / "split.npz", dataset="d")
    cal, test, extra = task_of("classification").halves(tmp_path / "m.npz", tmp_path / "split.npz", "calibration", "test", "pool")
    assert len(cal.targets) == len(test.targets) == 200 and np.array_equal(extra.inputs, logits[n:])
    study = dict(methods=["temperature_scaling"], seeds=[0], metrics=["nll"], bins=15)
    halves = ((cal.inputs, cal.targets), (test.inputs, test.targets))
    with_pool = {r[1]: r[4] for r in run_size_study(*halves, sizes=[100, 200, 260], pool=(extra.inputs, extra.targets), **study)}
    without = {r[1]: r[4] for r in run_size_study(*halves, sizes=[100, 200], **study)}
    assert with_pool[100] == without[100] and with_pool[200] == without[200]
    subset = stratified_order(extra.targets, 0)[:60]
    inputs, targets = np.concatenate([cal.inputs, extra.inputs[subset]]), np.concatenate([cal.targets, extra.targets[subset]])
    expected = compute_metrics(make_calibrator("temperature_scaling").fit(inputs, targets).predict_proba(test.inputs), test.targets, ["nll"])
    assert with_pool[260] == pytest.approx(expected["nll"], rel=1e-6)
    with pytest.raises(ValueError, match="301 is larger than .* this model with its calibration pool"):
        list(run_size_study(*halves, sizes=[301], pool=(extra.inputs, extra.targets), **study))


def test_calibration_half_follows_train_test_split():
    from sklearn.model_selection import train_test_split

    for n, fraction in ((899, 0.5), (10_000, 0.5), (1000, 0.7), (101, 0.3)):
        expected = len(train_test_split(np.arange(n), test_size=round(1 - fraction, 12), random_state=0)[0])
        assert calibration_half(n, fraction) == expected


def demo(**sections):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value}
    return config


@pytest.mark.parametrize(
    "sections, message",
    [
        ({"uncertainty": {"bootstrap": 0}}, r"uncertainty\.bootstrap: 0 is less than the minimum of 1"),
        ({"uncertainty": {"level": 1.0}}, r"uncertainty\.level: 1\.0 is greater than or equal to the maximum of 1"),
        ({"uncertainty": {"level": 0}}, r"uncertainty\.level: 0 is less than or equal to the minimum of 0"),
        ({"size_study": {"sizes": [100, 450]}}, r"size_study\.sizes: 450 is larger than the calibration half of "
                                                  r"data set digits \(449 samples\)"),
        ({"size_study": {"sizes": [19, 100]}}, r"size_study\.sizes: 19 gives fewer than 2 samples per class .*"
                                                 r"\(10 classes\); use sizes of at least 20"),
        ({"size_study": {"metric": "brier_score"}}, r"size_study\.metric: 'brier_score' is not one of the configured"),
        ({"uncertainty": {"rank_metric": "auc"}}, r"uncertainty\.rank_metric: 'auc' is not one of the configured"),
        ({"uncertainty": {"enabled": False}, "report": {"mark_ties": True}}, r"report\.mark_ties: needs the bootstrap"),
        ({"report": {"cells": "median"}}, r"report\.cells: 'median' is not one of mean_sd, interval"),
    ],
)
def test_bad_uncertainty_settings_stop_at_validation(sections, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(demo(**sections), SCHEMA)


def test_sizes_are_checked_against_own_logits(tmp_path):
    np.savez(tmp_path / "m.npz", logits=np.zeros((300, 3), np.float32), labels=np.arange(300) % 3)
    config = {"models": {"mine": {"m": {"source": "logits", "path": str(tmp_path / "m.npz")}}},
              "size_study": {"enabled": True, "sizes": [150], "seeds": [0]}}
    validate_config(config, SCHEMA)  # the calibration half holds 150
    config["size_study"]["sizes"] = [151]
    with pytest.raises(ConfigError, match=r"size_study\.sizes: 151 is larger .* \(150 samples\)"):
        validate_config(config, SCHEMA)
    config["size_study"]["enabled"] = False
    validate_config(config, SCHEMA)  # not checked when the study is off


def image_files(folder: Path, classes: dict[str, int]) -> None:
    """Empty files named like images, ``count`` per class folder: counting them needs no pixels."""
    for name, count in classes.items():
        (folder / name).mkdir(parents=True)
        for index in range(count):
            (folder / name / f"{index}.png").touch()


def test_sizes_are_checked_against_an_image_folder_before_any_job(tmp_path):
    """An image folder's evaluation images are counted at validation, before any network trains: a size its
    calibration half cannot hold stops the run naming the key and both fixes."""
    image_files(tmp_path / "split" / "train", {"cat": 15, "dog": 15})
    image_files(tmp_path / "split" / "test", {"cat": 12, "dog": 12})
    config = {"models": {"pets": {"lenet": {"source": "train", "network": "lenet5"}}},
              "datasets": {"pets": {"source": "imagefolder", "root": str(tmp_path / "split")}},
              "size_study": {"enabled": True, "sizes": [4, 12], "seeds": [0]}}
    validate_config(config, SCHEMA)  # test/ holds 24 images: a calibration half of 12
    config["size_study"]["sizes"] = [4, 13]
    with pytest.raises(ConfigError, match=r"^size_study\.sizes: 13 is larger than the calibration half of data set pets "
                       r"\(12 samples\); use sizes up to 12, or hold more training images out with "
                       r"datasets\.pets\.calibration_pool$"):
        validate_config(config, SCHEMA)
    config["datasets"]["pets"]["calibration_pool"] = 1
    validate_config(config, SCHEMA)
    image_files(tmp_path / "classes", {"cat": 14, "dog": 13})  # evaluation_fraction 0.5 of 27: 14, a half of 7
    assert len(hold_out(np.repeat([0, 1], [14, 13]), 0.5, 0, "")[1]) == 14  # as the training's split holds out
    config["datasets"]["pets"] = {"source": "imagefolder", "root": str(tmp_path / "classes")}
    config["size_study"]["sizes"] = [4, 7]
    validate_config(config, SCHEMA)
    config["size_study"]["sizes"] = [4, 8]
    with pytest.raises(ConfigError, match=r"size_study\.sizes: 8 is larger .* pets \(7 samples\)"):
        validate_config(config, SCHEMA)
    config["datasets"]["pets"]["root"] = str(tmp_path / "nothing")  # a wrong layout is the source's check to report
    validate_config(config, SCHEMA)


def test_size_study_report_table_and_figure(tmp_path):
    from calibrepro.report.size_study import write_size_study_report

    lines = ["dataset,model,method,size,seed,metric,value"]
    for seed, shift in ((0, 0.0), (1, 0.02)):
        for size in (50, 100):
            lines.append(f"digits,net,isotonic,{size},{seed},ece,{0.05 + shift - size / 10_000!r}")
            lines.append(f"digits,net,uncalibrated,{size},{seed},ece,0.03")
    study = tmp_path / "study.csv"
    study.write_text("\n".join(lines) + "\n")
    outputs = []
    for name in ("a", "b"):
        figure = (tmp_path / f"{name}.png", tmp_path / f"{name}.pdf")
        write_size_study_report(study, "ece", tmp_path / f"{name}.md", {"digits": figure}, language="en")
        outputs.append((figure[0].read_bytes(), figure[1].read_bytes(), (tmp_path / f"{name}.md").read_text()))
    assert outputs[0] == outputs[1]
    table = outputs[0][2]
    assert "| Data | Model | Method | n = 50 | n = 100 |" in table
    # isotonic at 50: seeds 4.50 % and 6.50 % -> mean 5.50, sd 1.41; uncalibrated listed first (thesis order)
    assert "| digits | net | Uncalibrated | 3.00 ± 0.00 | 3.00 ± 0.00 |" in table
    assert "| digits | net | Isotonic | 5.50 ± 1.41 | 5.00 ± 1.41 |" in table
    assert table.index("Uncalibrated") < table.index("Isotonic")


def test_published_sweeps_appear_beside_ours_with_their_spread_check(tmp_path):
    """A published sweep row under its method; within-spread per the 2-sd rule; a size not studied is counted apart."""
    from calibrepro.report.size_study import write_size_study_report

    lines = ["dataset,model,method,size,seed,metric,value"]
    for seed, ece in ((0, 0.04), (1, 0.06)):  # mean 5.00 %, sd 1.41 %: within for |p - 5| <= 2.83 + 0.005
        lines += [f"digits,net,isotonic,{size},{seed},ece,{ece!r}" for size in (50, 100)]
    study = tmp_path / "study.csv"
    study.write_text("\n".join(lines) + "\n")
    published = tmp_path / "published.csv"
    published.write_text(
        "table,dataset,model,method,metric,value,size\n"
        "Blog,digits,net,isotonic,ece,7.80,50\n"      # inside: 2.80 <= 2.83
        "Blog,digits,net,isotonic,ece,7.90,100\n"     # outside
        "Blog,digits,net,isotonic,ece,1.00,400\n"     # not studied
        "Blog,digits,net,isotonic,ece,9.99,\n"        # a main-table cell: not in the sweep
        "Blog,other,net,isotonic,ece,1.00,50\n"       # a model outside this study: ignored
    )
    figure = (tmp_path / "f.png", tmp_path / "f.pdf")
    write_size_study_report(study, "ece", tmp_path / "t.md", {"digits": figure}, language="en", published_csv=published)
    table = (tmp_path / "t.md").read_text()
    assert "| Data | Model | Method | n = 50 | n = 100 | n = 400 |" in table
    assert "| digits | net | Isotonic | 5.00 ± 1.41 | 5.00 ± 1.41 | — |" in table
    assert "| digits | net | Isotonic, published: Blog | 7.80 | 7.90 | 1.00 |" in table
    assert "within our subset spread (mean ± 2 sd + half a printed unit): 1 of 2 (1 published sizes not in" in table
    assert "9.99" not in table and "other" not in table
    assert figure[0].stat().st_size > 0
