"""The workflow through a real Slurm: a one-node cluster on 127.0.0.1 started by .ci/slurm-up, Snakemake's
own SLURM executor plugin, and the users' profile workflow/profiles/slurm with the test overrides of
tests/slurm/profile (the local partition, no GPU, squeue status checks) layered on top.

The session fixture starts the cluster (apt-get installs Debian's Slurm where it is missing) and stops
every daemon it started, by PID, when the session ends, failed tests included. A cluster that is
already up (`bash .ci/slurm-up` before pytest) is used and left running. Without root, apt-get or
installable packages the tests are skipped, loudly.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import yaml

from workflow_helpers import snakemake_command, synthetic_logits, write_config

ROOT = Path(__file__).resolve().parents[1]
SLURM_UP = ROOT / ".ci" / "slurm-up"
SLURM_DOWN = ROOT / ".ci" / "slurm-down"
SLURM_DIR = Path(os.environ.get("CALIBREPRO_SLURM_DIR", "/tmp/calibrepro-slurm"))
SLURM_CONF = "/etc/slurm/slurm.conf"
USER_PROFILE = ROOT / "workflow" / "profiles" / "slurm"
TEST_PROFILE = ROOT / "tests" / "slurm" / "profile"
SLURM_PROFILES = ("--profile", str(USER_PROFILE), "--profile", str(TEST_PROFILE))
LOCAL_PROFILE = ("--profile", str(ROOT / "workflow" / "profiles" / "default"), "--cores", "2")
TIMEOUT = int(os.environ.get("CALIBREPRO_SLURM_TIMEOUT", "600"))  # seconds per Snakemake run

# Rules whose jobs must go through sbatch (fit_calibrators and evaluate bundled per model in the group
# "calibrate" of the users' profile), and rules that must run in the submitting process.
SLURM_RULES = {"logits", "split", "fit_calibrators", "evaluate"}
SLURM_JOBS = {"logits", "split", "group calibrate"}
LOCAL_RULES = {"metrics", "table", "reliability_figure", "named_figure", "reproduction"}

SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)")  # group jobs: a UUID
RUN_ID = re.compile(r"SLURM run ID: (\S+)")


_CONFIG: pytest.Config | None = None


@pytest.fixture(scope="session", autouse=True)
def _remember_pytest_config(pytestconfig):
    global _CONFIG
    _CONFIG = pytestconfig


def say(message: str) -> None:
    """Print past pytest's capture: the CI log must show what the Slurm test saw (or why it skipped)."""
    capture = _CONFIG.pluginmanager.getplugin("capturemanager") if _CONFIG else None
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        sys.stderr.write(f"\n[slurm-test] {message}\n")
        sys.stderr.flush()


def skip_loudly(reason: str) -> None:
    bar = "!" * 100
    say(f"\n{bar}\n!!! THE SLURM INTEGRATION TEST IS SKIPPED: {reason}\n{bar}")
    pytest.skip(f"SLURM INTEGRATION TEST SKIPPED: {reason}")


def _bash(script: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


@pytest.fixture(scope="session")
def slurm_cluster():
    """A one-node Slurm cluster for the session: reused if up, else started here and stopped afterwards."""
    if os.geteuid() != 0:
        skip_loudly(f"needs root to install and start Slurm (running as uid {os.geteuid()})")
    if _bash(SLURM_UP, "--status", timeout=60).returncode == 0:
        say("using the one-node Slurm cluster that is already running (left running afterwards)")
        yield SLURM_DIR
        return
    started = time.monotonic()
    up = _bash(SLURM_UP)
    if up.returncode == 2:  # not root, no apt-get, packages not installable, a foreign slurm.conf
        reason = [line for line in up.stderr.splitlines() if "CANNOT RUN HERE" in line] or up.stderr.splitlines()[-1:]
        skip_loudly(reason[-1] if reason else "slurm-up could not run here")
    if up.returncode != 0:
        _bash(SLURM_DOWN, timeout=120)
        pytest.fail(f"bash .ci/slurm-up failed (exit {up.returncode}):\n{up.stderr[-6000:]}", pytrace=False)
    say(f"one-node Slurm cluster up in {time.monotonic() - started:.1f} s: {up.stderr.strip().splitlines()[-1]}")
    try:
        yield SLURM_DIR
    finally:
        down = _bash(SLURM_DOWN, timeout=120)
        say(f"slurm-down (exit {down.returncode}): {' / '.join(down.stderr.strip().splitlines())}")
        leftovers = [pid for pid in _pids_named("slurmctld", "slurmd") if str(SLURM_DIR) in _cmdline(pid)]
        assert down.returncode == 0 and not leftovers, f"Slurm daemons left running: {leftovers}\n{down.stderr}"


def _pids_named(*names: str) -> list[int]:
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() in names:
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class Run:
    returncode: int
    output: str  # stdout and stderr, interleaved
    seconds: float

    def tail(self, n: int = 6000) -> str:
        return self.output[-n:]

    def submissions(self) -> list[tuple[str, int, str]]:
        """(Snakemake job id, Slurm job id, Slurm log) of every job that went through sbatch."""
        return [(job, int(slurm_job), log) for job, slurm_job, log in SUBMITTED.findall(self.output)]

    def run_id(self) -> str:
        found = RUN_ID.findall(self.output)
        assert found, f"no 'SLURM run ID' in Snakemake's output:\n{self.tail()}"
        return found[-1]


def run_snakemake(workdir: Path, *args: str, profiles=SLURM_PROFILES, timeout: int = TIMEOUT) -> Run:
    """Run the Snakefile in workdir; on timeout kill Snakemake's whole process group and its Slurm jobs."""
    command = snakemake_command(workdir, *args, profiles=profiles, cores=None)
    env = dict(os.environ, SLURM_CONF=SLURM_CONF)
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, so that a hung run can be killed whole
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # Snakemake may ignore SIGTERM while it polls
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=15)
                break
            except subprocess.TimeoutExpired:
                continue
        output, _ = process.communicate()
        queue = subprocess.run(
            ["squeue", "--states=all", "--format=%i %j %T %r %C %m"], capture_output=True, text=True, env=env, timeout=30
        ).stdout
        run_ids = RUN_ID.findall(output)
        if run_ids:  # its Slurm jobs are not in the process group
            subprocess.run(["scancel", "--name", run_ids[-1]], env=env, timeout=30, check=False)
        pytest.fail(
            f"Snakemake did not finish within {timeout} s and was killed. squeue:\n{queue}\n"
            f"Snakemake's output ends with:\n{output[-6000:]}",
            pytrace=False,
        )
    return Run(process.returncode, output, time.monotonic() - started)


def squeue_states(run_id: str) -> dict[int, str]:
    """Slurm job id -> state of the jobs of one Snakemake run (finished ones stay for MinJobAge = 3600 s)."""
    result = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T", "--name", run_id],
        capture_output=True, text=True, env=dict(os.environ, SLURM_CONF=SLURM_CONF), timeout=30, check=True,
    )
    return {int(job): state for job, state in (line.split("|") for line in result.stdout.split())}


def jobcomp_records(run_id: str) -> dict[int, str]:
    """Slurm job id -> final state, from slurmctld's job completion log (there is no slurmdbd here)."""
    records = {}
    for line in (SLURM_DIR / "log" / "jobcomp.log").read_text().splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if fields.get("Name") == run_id:
            records[int(fields["JobId"])] = fields["JobState"]
    return records


def slurmctld_submissions() -> set[int]:
    log = (SLURM_DIR / "log" / "slurmctld.log").read_text()
    return {int(job) for job in re.findall(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", log)}


def rule_of(slurm_log: str) -> str:
    """The rule or group of a job, from its Slurm log: .snakemake/slurm_logs/rule_<rule>/<wildcards>/<id>.log
    or .snakemake/slurm_logs/group_<group>_<its rules>/<id>.log."""
    part = next(p for p in Path(slurm_log).parts if p.startswith(("rule_", "group_")))
    if part.startswith("group_calibrate_"):
        return "group calibrate"
    return part.split("_", 1)[1]


# ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_config(tmp_path_factory) -> str:
    """The embedded demo's first three trained models with the thesis's six calibrators, without the
    ensemble, the dropout models, the regression part (its own, smaller run: :func:`regression_runs`), the
    full-matrix methods, the intervals, the size study, the conformal part and the training curves: the rules a
    thesis run sends to Slurm."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for model in ("ensemble", "mlp_dropout", "mlp_mc_dropout"):
        config["models"]["digits"].pop(model)
    for spec in config["models"]["digits"].values():
        spec.pop("curves", None)  # the training curves' rules: tests/test_curves.py, the demo test
    config.pop("regression")
    config["calibrators"] = config["size_study"]["methods"]
    config.pop("calibrator_options")
    config["uncertainty"]["enabled"] = config["size_study"]["enabled"] = False
    config["conformal"] = {"enabled": False}  # its jobs: tests/test_conformal_pipeline.py, the demo test
    config["report"].update(mark_ties=False, reliability_intervals=False)
    return str(write_config(tmp_path_factory.mktemp("config") / "demo.yaml", config))


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, demo_config):
    """The demo run locally with the default profile: the reference for the Slurm run."""
    workdir = tmp_path_factory.mktemp("local")
    run = run_snakemake(workdir, "--configfile", demo_config, profiles=LOCAL_PROFILE)
    assert run.returncode == 0, f"the local reference run failed:\n{run.tail()}"
    say(f"local reference run of the demo (default profile, 2 cores): {run.seconds:.1f} s")
    return workdir


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory, demo_config):
    workdir = tmp_path_factory.mktemp("slurm")
    run = run_snakemake(workdir, "--configfile", demo_config)
    assert run.returncode == 0, f"the demo through Slurm failed (exit {run.returncode}):\n{run.tail()}"
    return workdir, run


def _relative_files(root: Path, pattern: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob(pattern) if p.is_file())


@pytest.mark.slurm
@pytest.mark.slow
def test_demo_runs_through_sbatch(slurm_run):
    workdir, run = slurm_run
    run_id = run.run_id()
    submissions = run.submissions()
    jobs = sorted(slurm for _, slurm, _ in submissions)
    rules = {rule_of(log) for _, _, log in submissions}
    by_rule: dict[str, list[int]] = {}
    for _, slurm_job, log in submissions:
        by_rule.setdefault(rule_of(log), []).append(slurm_job)
    say(
        f"demo through Slurm: {run.seconds:.1f} s wall, {len(jobs)} jobs via sbatch (run {run_id}); Slurm job ids: "
        + "; ".join(f"{rule} {sorted(ids)}" for rule, ids in by_rule.items())
    )
    say("\n".join(re.findall(r"^.*has been submitted with SLURM jobid.*$", run.output, flags=re.M)))

    assert submissions, f"no job went through sbatch:\n{run.tail()}"
    assert len(set(jobs)) == len(jobs)
    assert rules == SLURM_JOBS, rules
    assert len(by_rule["group calibrate"]) == 3  # one per model (one seed)
    assert not rules & LOCAL_RULES, f"localrules were submitted: {rules & LOCAL_RULES}"
    for rule in LOCAL_RULES:
        assert re.search(rf"^localrule {rule}:", run.output, flags=re.M), f"{rule} did not run locally"

    # slurmctld saw every one of them submitted, and each finished COMPLETED: in squeue (it keeps
    # finished jobs for MinJobAge) and in the job completion log.
    assert set(jobs) <= slurmctld_submissions()
    assert squeue_states(run_id) == {job: "COMPLETED" for job in jobs}
    assert jobcomp_records(run_id) == {job: "COMPLETED" for job in jobs}
    # Every job's own Slurm log (kept by the test profile) shows Snakemake running that job on the node.
    for _, slurm_job, log in submissions:
        text = Path(log).read_text()
        assert Path(log).name == f"{slurm_job}.log"
        assert "Finished jobid: 0" in text, f"{log}:\n{text[-3000:]}"
        if rule_of(log) == "group calibrate":  # the fits (one job, six methods) and the evaluation of one model
            finished = re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", text, flags=re.M)
            assert sorted(set(finished)) == ["evaluate", "fit_calibrators"], finished


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_outputs_equal_the_local_run(slurm_run, local_run):
    workdir, _ = slurm_run
    identical = [
        "results/demo/metrics.csv",
        "reports/demo/reproduction.md",
        *_relative_files(local_run, "reports/demo/tables/*"),
        *_relative_files(local_run, "results/demo/calibrators/**/*.json"),
        *_relative_files(local_run, "results/demo/evaluations/**/*.csv"),
        *_relative_files(local_run, "results/demo/reliability/**/*.json"),
    ]
    assert len(_relative_files(local_run, "results/demo/calibrators/**/*.json")) == 3 * 6
    for pattern in ("reports/demo/**/*", "results/demo/calibrators/**/*", "results/demo/logits/**/*", "results/demo/splits/**/*"):
        assert _relative_files(workdir, pattern) == _relative_files(local_run, pattern), pattern
    different = [name for name in identical if (workdir / name).read_bytes() != (local_run / name).read_bytes()]
    assert not different, f"not byte-identical between the local and the Slurm run: {different}"

    # .npz archives (zip time stamps) and figures (creation dates) are compared by their contents.
    for name in _relative_files(local_run, "results/demo/logits/**/*.npz") + _relative_files(local_run, "results/demo/splits/**/*.npz"):
        with np.load(workdir / name) as ours, np.load(local_run / name) as reference:
            assert sorted(ours.files) == sorted(reference.files), name
            for key in reference.files:
                assert np.array_equal(ours[key], reference[key]), f"{name}: array {key!r} differs"
    for name in _relative_files(local_run, "reports/demo/figures/**/*.png"):
        assert np.array_equal(matplotlib.image.imread(workdir / name), matplotlib.image.imread(local_run / name)), name


#: the regression part's rules that go through sbatch (the data, splits, gathering and report rules run locally)
REGRESSION_SLURM_RULES = {"regression_predict", "regression_evaluate", "regression_figure"}


@pytest.fixture(scope="module")
def regression_runs(slurm_cluster, tmp_path_factory):
    """A small regression-only run (the demo's diabetes data, one split, one small MC-Dropout regressor with
    the aleatoric output, 50 bootstrap resamples), locally and through Slurm: three sbatch jobs (predict,
    evaluate, figure), 225 s for the Slurm run with two regressors at load 21, so one."""
    regression = {"diabetes": {"source": "diabetes", "splits": 1,
                               "models": {"aleatoric": {"passes": 10, "epochs": 20, "hidden": 16}}}}
    config = str(write_config(tmp_path_factory.mktemp("config") / "reg.yaml",
                              {"regression": regression, "uncertainty": {"bootstrap": 50},
                               "conformal": {"enabled": False}}))
    local = tmp_path_factory.mktemp("reg_local")
    run = run_snakemake(local, "--configfile", config, profiles=LOCAL_PROFILE)
    assert run.returncode == 0, f"the local regression run failed:\n{run.tail()}"
    slurm = tmp_path_factory.mktemp("reg_slurm")
    run = run_snakemake(slurm, "--configfile", config)
    assert run.returncode == 0, f"the regression part through Slurm failed (exit {run.returncode}):\n{run.tail()}"
    say(f"regression part through Slurm: {run.seconds:.1f} s wall, {len(run.submissions())} jobs via sbatch")
    return local, slurm, run


@pytest.mark.slurm
@pytest.mark.slow
def test_regression_part_through_slurm_equals_the_local_run(regression_runs):
    local, slurm, run = regression_runs
    rules = {rule_of(log) for _, _, log in run.submissions()}
    assert rules == REGRESSION_SLURM_RULES, rules
    assert squeue_states(run.run_id()) == {job: "COMPLETED" for _, job, _ in run.submissions()}
    results, reports = "results/reg/regression", "reports/reg/regression"
    identical = [f"{results}/metrics.csv", f"{reports}/reproduction.md", *_relative_files(local, f"{reports}/tables/*"),
                 *_relative_files(local, f"{results}/evaluations/**/*.csv"),
                 *_relative_files(local, f"{results}/curves/**/*.json")]
    assert len(_relative_files(local, f"{results}/evaluations/**/*.csv")) == 1
    for pattern in (f"{reports}/**/*", f"{results}/**/*"):
        assert _relative_files(slurm, pattern) == _relative_files(local, pattern), pattern
    different = [name for name in identical if (slurm / name).read_bytes() != (local / name).read_bytes()]
    assert not different, f"not byte-identical between the local and the Slurm run: {different}"
    for name in _relative_files(local, f"{results}/**/*.npz"):  # data, splits, predictions, bootstrap replicates
        with np.load(slurm / name) as ours, np.load(local / name) as reference:
            assert sorted(ours.files) == sorted(reference.files), name
            for key in reference.files:
                assert np.array_equal(ours[key], reference[key]), f"{name}: array {key!r} differs"


@pytest.mark.slurm
@pytest.mark.slow
def test_failing_slurm_job_fails_the_run_naming_it(slurm_cluster, tmp_path):
    logits, labels = synthetic_logits(tmp_path / "a.npz")
    logits[7, 1] = np.nan
    np.savez(tmp_path / "a.npz", logits=logits, labels=labels)
    config = write_config(tmp_path / "byo.yaml", {"models": {"mydata": {"net_a": {"source": "logits", "path": "a.npz"}}}})

    run = run_snakemake(tmp_path, "results/byo/metrics.csv", "--configfile", str(config))  # targets first: --configfile takes several values

    assert run.returncode != 0, run.tail()
    submissions = run.submissions()
    assert [rule_of(log) for _, _, log in submissions] == ["logits"], run.tail()
    (_, failed_job, slurm_log), = submissions
    say(f"failing job: Slurm job {failed_job} -> Snakemake exit {run.returncode} after {run.seconds:.1f} s")
    assert "Error in rule logits:" in run.output, run.tail()
    assert f"SLURM-job '{failed_job}' failed, SLURM status is: 'FAILED'" in run.output, run.tail()
    assert "results/byo/logits/mydata/net_a.npz" in run.output
    assert "Exiting because a job execution failed" in run.output
    # the job's own message names the file, in the rule's log and (show-failed-logs) in Snakemake's output
    message = "NaN or infinite values in 1 row(s), first at row 7"
    log = (tmp_path / "results/byo/logs/logits/mydata/net_a.log").read_text()
    assert "a.npz" in log and message in log
    assert message in run.output
    assert message in Path(slurm_log).read_text()  # the job's Slurm log, kept because it failed
    assert not (tmp_path / "results/byo/logits/mydata/net_a.npz").exists()
    assert squeue_states(run.run_id()) == {failed_job: "FAILED"}
    assert jobcomp_records(run.run_id()) == {failed_job: "FAILED"}


def test_user_profile_sends_logits_to_the_gpu_partition(tmp_path):
    """The users' profile as shipped, on the thesis config (a dry run, no cluster needed): every logits job
    on the GPU partition with the GPU, memory and time its model source asks for; the rest on the CPU
    partition without a GPU."""
    run = run_snakemake(
        tmp_path, "--dry-run", "--configfile", str(ROOT / "config" / "thesis.yaml"),
        profiles=("--profile", str(USER_PROFILE)), timeout=300,
    )
    assert run.returncode == 0, run.tail()
    # (members of a group job are printed indented, inside the group's block)
    jobs = re.findall(r"^ *rule (\w+):\n(?: +.*\n)*? +resources: (.*)$", run.output, flags=re.M)
    resources: dict[str, list[dict[str, str]]] = {}
    for rule, listing in jobs:
        resources.setdefault(rule, []).append(dict(item.split("=", 1) for item in listing.split(", ")))
    assert set(resources) >= SLURM_RULES | LOCAL_RULES, sorted(resources)
    assert len(resources["logits"]) == 32
    for job in resources["logits"]:
        assert job["slurm_partition"] == "gpu" and job["gpu"] == "1", job
        assert int(job["mem_mb"]) >= 4000 and int(job["runtime"]) >= 10, job
    assert {job["runtime"] for job in resources["logits"]} > {"120"}  # per data set: ImageNet takes longest
    for rule in SLURM_RULES - {"logits"}:
        for job in resources[rule]:
            assert job["slurm_partition"] == "cpu" and job.get("gpu", "0") == "0", (rule, job)
