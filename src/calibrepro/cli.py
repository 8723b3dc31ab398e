"""The ``calibrepro`` command: fit, apply and evaluate calibrators on files; check logits files, list the
pinned models, produce one model's logits.

Errors end with one line naming the file, what is wrong and how to fix it, and exit non-zero;
``--debug`` (or the environment variable ``CALIBREPRO_DEBUG=1``) shows the Python traceback as well.
A new command is one :func:`add_command` call in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path

from calibrepro.zoo import PRETRAINED_SOURCES

DESCRIPTION = """\
calibrepro regenerates calibration tables, reliability diagrams and a reproduction report for
pretrained classifiers. The pipeline itself runs through Snakemake, e.g.

  snakemake --cores 4                                # the offline demo
  snakemake --cores 4 --configfile my.yaml           # your own models

This command holds the steps that are useful on their own: fit a calibrator on a model's logits (or
regression predictions), apply it to new ones, evaluate probabilities with bootstrap intervals:"""

EPILOG = """\
Add --debug (or set CALIBREPRO_DEBUG=1) to see the Python traceback of an error.
Documentation: README.md and config/README.md in the project."""

#: environment variable that turns on tracebacks, as --debug does
DEBUG_ENV = "CALIBREPRO_DEBUG"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("calibrepro")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def _option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--option``, the value read as YAML (``lambdas=[0.01, 0.1]``, ``folds=3``)."""
    import yaml

    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. lambdas=[0.01,0.1]")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is no YAML (a number, a name or a [list])") from None


def _numbers(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers separated by commas, e.g. 0.05,0.5,0.95") from None


def _setting(args: argparse.Namespace, option: str, config: dict, *keys: str):
    """An option's value: given on the command line, else the ``--config`` file's ``keys``, else the default."""
    from calibrepro.commands import DEFAULTS

    value = getattr(args, option)
    if value is not None:
        return value
    for key in keys:
        config = config.get(key, {}) if isinstance(config, dict) else {}
    return config if config != {} else DEFAULTS[keys[-1]]


def _config(args: argparse.Namespace) -> dict:
    from calibrepro.commands import read_config

    return read_config(args.config) if args.config else {}


def _where(path, half) -> str:
    return f"the {half} half of {path}" if half else str(path)


def _fit(args: argparse.Namespace) -> int:
    from calibrepro.calibrators import OWN_JOB
    from calibrepro.commands import fit_file

    config = _config(args)
    options = {**config.get("calibrator_options", {}).get(args.method, {}), **dict(args.option or [])}

    def announce(inputs) -> None:  # the cross-validated fits take seconds to hours: say what is running
        if args.method in OWN_JOB:
            from calibrepro.calibrators.dirichlet import estimated_seconds

            (n, k), fits = inputs.half.inputs.shape, inputs.task.make_calibrator(args.method, **options).expected_fits()
            minutes = estimated_seconds(n, k, fits) / 60
            if minutes >= 1:
                print(f"calibrepro: fitting {args.method} on {n} samples of {k} classes: {fits} fits (cross-validation "
                      f"and refit), about {minutes:.0f} CPU-minutes by the cost model", file=sys.stderr)

    start = time.perf_counter()
    calibrator, inputs = fit_file(args.file, args.method, args.output, split=args.split, half=args.half,
                                  options=options, bins=_setting(args, "bins", config, "bins"), threads=args.threads,
                                  announce=announce)
    params = calibrator.to_json()["params"]
    shown = {key: value for key, value in params.items() if key not in ("n_classes", "n_fit")
             and (isinstance(value, (int, float)) or (isinstance(value, list) and len(value) <= 3
                                                        and all(isinstance(v, (int, float)) for v in value)))}
    print(f"{args.method}: fitted on {len(inputs.half.targets)} samples ({_where(args.file, args.half)}) in "
          f"{time.perf_counter() - start:.2f} s -> {args.output}")
    if shown:
        print("  " + ", ".join(f"{key} {_number(value)}" for key, value in shown.items()))
    diagnostics = getattr(calibrator, "diagnostics_", {})
    if diagnostics.get("converged") is False:
        print(f"calibrepro: warning: {args.method}: the fit did NOT converge (stop: {diagnostics.get('stop_reason')}; "
              f"details in {args.output}); raise --option max_iter=... or the regularisation", file=sys.stderr)
    return 0


def _number(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(_number, value)) + "]"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _apply(args: argparse.Namespace) -> int:
    from calibrepro.commands import LEVELS, apply_calibrator

    arrays = apply_calibrator(args.calibrator, args.file, args.output, split=args.split, half=args.half,
                              levels=args.levels or LEVELS, method=args.method)
    method = json.loads(str(arrays["metadata"]))["method"]
    what = ("calibrated probabilities" if "probabilities" in arrays
            else f"recalibrated mean, std, quantiles at {len(arrays['levels'])} levels and PIT values")
    rows = len(arrays["probabilities"] if "probabilities" in arrays else arrays["mean"])
    print(f"{args.output}: {what} of {rows} rows of {_where(args.file, args.half)} ({method}, {args.calibrator})")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from calibrepro.commands import evaluate_file, write_evaluation

    config = _config(args)
    resamples = _setting(args, "resamples", config, "uncertainty", "bootstrap")
    level = _setting(args, "level", config, "uncertainty", "level")
    seed = _setting(args, "seed", config, "uncertainty", "seed")
    metrics = args.metrics.split(",") if args.metrics else config.get("metrics")
    result = evaluate_file(
        args.file, calibrator=args.calibrator, split=args.split, half=args.half, metrics=metrics,
        bins=_setting(args, "bins", config, "bins"), resamples=resamples, level=level,
        interval=_setting(args, "interval", config, "uncertainty", "interval"), seed=seed,
    )
    intervals = f"{level:.0%} bootstrap intervals, B = {resamples}, seed {seed}" if resamples else "no intervals"
    print(f"{_where(args.file, args.half)}: {result.method}, {result.rows} rows; {intervals}")
    bounds = {name: f"[{value.low:.6g}, {value.high:.6g}]" for name, value in result.values.items()}
    widths = max(map(len, [*result.values, *result.undefined])), max(map(len, bounds.values()), default=0)
    for name, value in result.values.items():
        interval = f"{bounds[name]:<{widths[1]}}  {value.interval}" if resamples else ""
        print(f"  {name:<{widths[0]}}  {value.estimate:>10.6g}  {interval}".rstrip())
    for name, why in result.undefined.items():
        print(f"  {name:<{widths[0]}}  left out: {why}")
    if args.output:
        write_evaluation(args.output, result.values)
        print(f"-> {args.output}")
    return 0


def _conformal_fit(args: argparse.Namespace) -> int:
    from calibrepro.commands import conformal_fit_file

    options = {"randomized": args.randomized, "random_state": args.seed}
    options.update({key: value for key, value in (("penalty", args.penalty), ("k_reg", args.k_reg)) if value is not None})
    conformal, inputs, calibrator = conformal_fit_file(args.file, args.output, score=args.score, alpha=args.alpha,
                                                       calibrator=args.calibrator, split=args.split, half=args.half,
                                                       **options)
    kind = "randomised" if args.randomized and args.score != "lac" else "non-randomised"
    calibrated = f"{calibrator.method} ({args.calibrator})" if calibrator is not None else "uncalibrated softmax"
    print(f"conformal {args.score} ({kind}), alpha {conformal.alpha:g}: threshold {conformal.threshold_:.6g} from "
          f"{len(inputs.half.targets)} samples ({_where(args.file, args.half)}, {calibrated}) -> {args.output}")
    return 0


def _conformal_predict(args: argparse.Namespace) -> int:
    from calibrepro.commands import conformal_predict_file

    arrays = conformal_predict_file(args.conformal, args.file, args.output, split=args.split, half=args.half)
    sets = arrays["sets"]
    line = f"{args.output}: prediction sets of {len(sets)} rows of {_where(args.file, args.half)}"
    if "labels" in arrays:
        covered = sets[range(len(sets)), arrays["labels"]]
        line += f"; coverage {covered.mean():.4f}, mean set size {sets.sum(axis=1).mean():.4g}"
    print(line)
    return 0


def _logits(args: argparse.Namespace) -> int:
    from calibrepro.zoo import LogitsRequest, produce_logits

    print(produce_logits(LogitsRequest.from_json(json.loads(args.request)), args.output))
    return 0


def _check_logits(args: argparse.Namespace) -> int:
    from calibrepro.io import LogitsFileError, check_agreement, load_logits, logits_summary

    failed = False
    for path in args.files:
        try:
            archive = load_logits(path)
        except LogitsFileError as error:
            print(f"calibrepro: error: {error}", file=sys.stderr)
            failed = True
            continue
        print(f"{path}: ok, {logits_summary(archive)}")
    if failed:
        return 1
    if len(args.files) > 1:
        check_agreement({path: path for path in args.files})
        print(f"all {len(args.files)} files agree: the same samples, classes and labels in the same order")
    return 0


def _models(args: argparse.Namespace) -> int:
    from calibrepro.zoo.catalogue import catalogue, catalogue_table

    if args.filter is not None or args.source == "torchvision":  # torchvision has no pins, only names
        names = _names(args.source or "timm", args.filter or "")
        if not names:
            raise ValueError(f"no {args.source or 'timm'} name contains {args.filter!r}")
        print("\n".join(names))
        return 0
    rows = catalogue(source=args.source, dataset=args.dataset)
    if not rows:
        known = sorted({row.dataset for row in catalogue(source=args.source)})
        of = f" of source {args.source}" if args.source else ""
        raise ValueError(f"no pinned model{of} for data set {args.dataset!r}; data sets: {', '.join(known)}")
    print(catalogue_table(rows), end="")
    return 0


def _fingerprint(args: argparse.Namespace) -> int:
    from calibrepro import fingerprint

    reference = fingerprint.load(args.compare) if args.compare else None  # a bad file stops before measuring
    ours = fingerprint.measure()
    text = json.dumps(ours, indent=1) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{args.output}: the kernel fingerprint of this machine ({len(ours['primitives'])} primitives; "
              f"its name in docs/fingerprints/: {fingerprint.file_name(ours['cpu'])})")
    if reference is not None:
        print(fingerprint.summary(ours, reference, args.compare))
    elif not args.output:
        print(text, end="")
    return 0


#: sources that take any name their library knows (``calibrepro models --source S --filter PART``)
NAMED_SOURCES = ("timm", "torchvision")


def _names(source: str, part: str) -> list[str]:
    """The names a model entry of ``source`` can take that contain ``part``: timm tags, torchvision weights."""
    if source == "timm":
        import timm

        return [name for name in timm.list_pretrained() if part in name]
    if source == "torchvision":
        import torchvision

        return [f"{builder}.{weights.name}" for builder in torchvision.models.list_models(torchvision.models)
                if part in builder for weights in torchvision.models.get_model_weights(builder)]
    raise ValueError(f"--filter lists the names of {' and '.join(NAMED_SOURCES)}; source {source!r} has pins only")


def add_command(commands, name: str, handler, summary: str, example: str, *more: str,
                details: str = "") -> argparse.ArgumentParser:
    """Register a subcommand with its one-line summary and its examples (the first also in the main ``--help``);
    ``details``: paragraphs shown by the command's own ``--help``. Return its parser for arguments."""
    examples = "".join(f"\n  {line}" for line in (example, *more))
    parser = commands.add_parser(
        name,
        help=summary,
        description="\n\n".join(textwrap.fill(text, 100) for text in (summary, details) if text),
        epilog=f"example{'s' if more else ''}:{examples}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # also accepted after the command name; SUPPRESS keeps the main parser's value when absent here
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show Python tracebacks")
    parser.set_defaults(handler=handler, example=example)
    return parser


HALF_HELP = "the calibration or test half of the split (a pipeline predictions file: of its own split)"


def _inputs(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("file", help=f"{what}: a logits archive (.npz: 'logits' (N, K), 'labels' (N,)) or regression "
                        "predictions (.npz: 'y' with 'mean' + 'std' or 'samples', or a pipeline predictions file)")
    parser.add_argument("--split", help="a split file (results/<name>/splits/<dataset>/seed<seed>.npz): use one half")
    parser.add_argument("--half", choices=("calibration", "test"), help=HALF_HELP)


def _calibration_commands(commands) -> None:
    """``fit``, ``apply`` and ``evaluate`` (:mod:`calibrepro.commands`)."""
    from calibrepro.calibrators import CALIBRATORS

    fit = add_command(
        commands,
        "fit",
        _fit,
        "fit a calibrator on a model's logits (or a regressor's predictions) and save it as JSON, as the pipeline's "
        "fit step does",
        "calibrepro fit --method temperature_scaling logits/my_resnet.npz -o ts.json",
        "calibrepro fit --method temperature_scaling results/my/logits/mydata/my_resnet.npz "
        "--split results/my/splits/mydata/seed0.npz --half calibration -o ts.json",
        "calibrepro fit --method dirichlet_odir logits.npz --option lambdas=[0.01,0.1,1] --option folds=3 -o dir.json",
        "calibrepro fit --method std_scaling results/demo/regression/predictions/diabetes/ensemble/split0.npz "
        "--half calibration -o std.json",
        details=f"Methods: {', '.join(CALIBRATORS)}; regression: uncalibrated, isotonic, isotonic_two_sided, "
        "std_scaling. The fitted file is the pipeline's results/<name>/calibrators/.../seed<seed>.json: fitted on the "
        "same half with the same options, it is the same file, byte for byte.",
    )
    _inputs(fit, "the model's outputs to fit on (all of them, or --split/--half)")
    fit.add_argument("--method", required=True, help="the calibration method (see above)")
    fit.add_argument("-o", "--output", required=True, help="the calibrator's .json to write")
    fit.add_argument("--option", action="append", type=_option, metavar="KEY=VALUE",
                     help="a hyperparameter of the method, as under calibrator_options in config/README.md (repeat it)")
    fit.add_argument("--config", help="a pipeline configuration: its calibrator_options.<method> and bins")
    fit.add_argument("--bins", type=int, help="bins of histogram binning (default 15, or the --config's)")
    fit.add_argument("--threads", type=int, default=1, help="threads of the cross-validated fits (results do not "
                     "depend on it; default 1)")

    apply = add_command(
        commands,
        "apply",
        _apply,
        "apply a fitted calibrator to a model's logits (or predictions): calibrated probabilities (or the recalibrated "
        "predictive's mean, std and quantiles) in an .npz",
        "calibrepro apply ts.json new/my_resnet.npz -o probs.npz",
        "calibrepro apply results/my/calibrators/mydata/my_resnet/temperature_scaling/seed0.json "
        "results/my/logits/mydata/my_resnet.npz --split results/my/splits/mydata/seed0.npz --half test -o probs.npz",
        details="Writes (numpy.load(path)): classification: 'probabilities' (N, K) float64, 'rows' (their rows in the "
        "input), 'labels' when the input has them; regression: 'mean', 'std', 'quantiles' (N, L) at 'levels' (L,), "
        "'y', 'pit' (the recalibrated CDF at y), 'index', 'output'; both: 'metadata' (JSON: method, calibrator, "
        "input). "
        "The logits need no labels. With --split/--half the rows are those the pipeline evaluates.",
    )
    apply.add_argument("calibrator", help="a fitted calibrator's .json (calibrepro fit, or the pipeline's)")
    _inputs(apply, "the model's outputs to calibrate")
    apply.add_argument("-o", "--output", required=True, help="the .npz to write")
    apply.add_argument("--method", help="check that the calibrator file holds this method")
    apply.add_argument("--levels", type=_numbers, metavar="Q1,Q2,...",
                       help="regression: the quantile levels (default 0.025,0.05,0.1,0.25,0.5,0.75,0.9,0.95,0.975)")

    evaluate = add_command(
        commands,
        "evaluate",
        _evaluate,
        "metrics of probabilities, or of logits (calibrated by a fitted calibrator, or not), with bootstrap intervals",
        "calibrepro evaluate probs.npz",
        "calibrepro evaluate new/my_resnet.npz --calibrator ts.json --metrics ece,nll --resamples 200 -o ece.csv",
        "calibrepro evaluate results/my/logits/mydata/my_resnet.npz --split results/my/splits/mydata/seed0.npz "
        "--half test --config my.yaml",
        details="The estimates are the pipeline's metrics.csv values; the intervals are its bootstrap "
        "(src/calibrepro/bootstrap.py): B resamples of the rows, each metric's interval method (uncertainty.interval: "
        "auto), clipped to the metric's range. -o writes them as CSV: metric, estimate, centre, low, high, interval, "
        "level, B.",
    )
    evaluate.add_argument("file", help="probabilities (.npz: 'probabilities' (N, K), 'labels' (N,), e.g. from "
                          "calibrepro apply), a logits archive or regression predictions")
    evaluate.add_argument("--calibrator", help="a fitted calibrator's .json to apply to the logits first")
    evaluate.add_argument("--split", help="a split file: evaluate one half of the logits")
    evaluate.add_argument("--half", choices=("calibration", "test"), help=HALF_HELP)
    evaluate.add_argument("--metrics", help="metrics, comma-separated (default: the pipeline's; every regression one)")
    evaluate.add_argument("--bins", type=int, help="bins of the binned metrics (default 15)")
    evaluate.add_argument("--resamples", type=int, help="bootstrap resamples B (default 1000; 0: no intervals)")
    evaluate.add_argument("--level", type=float, help="level of the intervals (default 0.95)")
    evaluate.add_argument("--interval", choices=("auto", "percentile", "basic", "bca", "debiased"),
                          help="interval method (default auto: each metric's own, config/README.md uncertainty)")
    evaluate.add_argument("--seed", type=int, help="seed of the resamples (default 0)")
    evaluate.add_argument("--config", help="a pipeline configuration: its metrics, bins and uncertainty settings")
    evaluate.add_argument("-o", "--output", help="also write the values as CSV")


def _conformal_commands(commands) -> None:
    """``conformal fit`` and ``conformal predict`` (:mod:`calibrepro.commands`, :mod:`calibrepro.conformal`)."""
    from calibrepro.conformal.scores import RAPS_K_REG, RAPS_PENALTY, SCORES

    conformal = add_command(
        commands,
        "conformal",
        None,
        "prediction sets with guaranteed coverage (split conformal: LAC, APS, RAPS) from a model's logits, "
        "calibrated first by a fitted calibrator or not",
        "calibrepro conformal fit --score aps --alpha 0.1 cal.npz --calibrator ts.json -o cp.json",
        "calibrepro conformal predict cp.json new.npz -o sets.npz",
    )
    steps = conformal.add_subparsers(dest="conformal_command", required=True, metavar="STEP")
    fit = add_command(
        steps,
        "fit",
        _conformal_fit,
        "fit the threshold of a conformal classifier on a calibration set's logits and save it as JSON",
        "calibrepro conformal fit --score aps --alpha 0.1 cal.npz -o cp.json",
        "calibrepro conformal fit --score raps --alpha 0.05 cal.npz --calibrator ts.json --no-randomized -o cp.json",
        details=f"Scores: {'; '.join(f'{name}: {text}' for name, text in SCORES.items())}. The threshold is the "
        "ceil((n + 1)(1 - alpha))-th smallest calibration score; sets hold the label with probability at least "
        "1 - alpha on data exchangeable with the calibration set, which must be other data than the calibrator was "
        "fitted on. APS and RAPS are randomised by default (coverage in [1 - alpha, 1 - alpha + 1/(n + 1)]); "
        "--no-randomized gives the deterministic sets (TorchCP's randomized=False), which over-cover.",
    )
    _inputs(fit, "the calibration set's logits (all of them, or --split/--half)")
    fit.add_argument("--score", choices=list(SCORES), default="aps", help="the conformity score (default aps)")
    fit.add_argument("--alpha", type=float, default=0.1, help="miscoverage level: sets hold the label with "
                     "probability at least 1 - alpha (default 0.1)")
    fit.add_argument("--calibrator", help="a fitted calibrator's .json (calibrepro fit) to apply to the logits first; "
                     "it is stored in the output and applied by predict")
    fit.add_argument("--no-randomized", dest="randomized", action="store_false",
                     help="the non-randomised APS/RAPS (default: randomised)")
    fit.add_argument("--penalty", type=float, help=f"RAPS's lambda (default {RAPS_PENALTY})")
    fit.add_argument("--k-reg", type=int, help=f"RAPS's k_reg (default {RAPS_K_REG})")
    fit.add_argument("--seed", type=int, default=0, help="seed of the randomised scores' draws (default 0)")
    fit.add_argument("-o", "--output", required=True, help="the conformal classifier's .json to write")

    predict = add_command(
        steps,
        "predict",
        _conformal_predict,
        "prediction sets of new logits under a fitted conformal classifier (its calibrator applied first)",
        "calibrepro conformal predict cp.json new.npz -o sets.npz",
        details="Writes (numpy.load(path)): 'sets' (N, K) bool, 'rows' (their rows in the input), 'labels' when the "
        "input has them, 'metadata' (JSON: score, alpha, files). With labels, prints the coverage and the mean set "
        "size.",
    )
    predict.add_argument("conformal", help="a conformal classifier's .json (calibrepro conformal fit)")
    _inputs(predict, "the logits to predict sets for (labels optional)")
    predict.add_argument("-o", "--output", required=True, help="the .npz to write")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="calibrepro",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"calibrepro {_version()}")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _calibration_commands(commands)
    _conformal_commands(commands)

    check = add_command(
        commands,
        "check-logits",
        _check_logits,
        "check your .npz logits files before a `source: logits` run: arrays, shapes and values, and "
        "that files given together hold the same samples, classes and labels",
        "calibrepro check-logits logits/my_resnet.npz logits/my_vit.npz",
    )
    check.add_argument("files", nargs="+", help=".npz files with arrays 'logits' (N, K) and 'labels' (N,)")

    logits = add_command(
        commands,
        "logits",
        _logits,
        "compute one model's logits archive and check it as check-logits does (the pipeline's logits step of a "
        "network; Snakemake calls it for you)",
        "calibrepro logits --request \"$(cat request.json)\" --output results/logits/cifar10/resnet20.npz",
    )
    logits.add_argument("--request", required=True, help="the job as JSON (see calibrepro.zoo.LogitsRequest)")
    logits.add_argument("--output", required=True, help="path of the .npz to write")

    models = add_command(
        commands,
        "models",
        _models,
        "list the pinned pretrained models: source, data set, licence, published top-1; with --filter, the "
        "names a timm or torchvision model entry can take",
        "calibrepro models --source timm --filter convnext",
    )
    models.add_argument("--source", choices=sorted({*PRETRAINED_SOURCES, *NAMED_SOURCES}), help="only this source's models")
    models.add_argument("--dataset", help="only the models of this data set (e.g. cifar100)")
    models.add_argument("--filter", metavar="PART",
                        help="list the names timm or torchvision know that contain PART (e.g. convnext), not the pins")

    fingerprint = add_command(
        commands,
        "fingerprint",
        _fingerprint,
        "the kernel fingerprint of this machine: the digest of each primitive computation the analysis and the "
        "trained networks rest on (JSON), or with --compare which of them differ from another machine's",
        "calibrepro fingerprint --compare docs/fingerprints/GenuineIntel-6-207.json",
        "calibrepro fingerprint --output this-machine.json",
        details="Each primitive runs on fixed inputs, one thread, on the pinned kernels (calibrepro.determinism), "
        "in about 5 s; docs/fingerprints/README.md says what the files are.",
    )
    fingerprint.add_argument("--output", metavar="FILE", help="write the JSON to FILE instead of printing it")
    fingerprint.add_argument("--compare", metavar="FILE", help="a fingerprint file: print which primitives differ")

    examples = "".join(f"  {sub.get_default('example')}\n" for sub in commands.choices.values())
    parser.epilog = f"examples:\n{examples}\n{EPILOG}"
    return parser


def _report(error: BaseException) -> None:
    """One line on stderr: the message for errors about the user's input, the type for anything else."""
    message = str(error).strip() or type(error).__name__
    if isinstance(error, (ValueError, OSError, RuntimeError)):
        print(f"calibrepro: error: {message}", file=sys.stderr)
    else:  # a bug rather than bad input: say how to get the details
        print(
            f"calibrepro: internal error ({type(error).__name__}: {message}); run again with --debug for the "
            "traceback and report it",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in {"", "0"}
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("calibrepro: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - users see one line; --debug shows the traceback
        if debug:
            raise
        _report(error)
        return 1


if __name__ == "__main__":
    sys.exit(main())
