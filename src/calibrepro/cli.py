"""The ``calibrepro`` command: check logits files, list the pinned models, produce one model's logits.

Errors end with one line naming the file, what is wrong and how to fix it, and exit non-zero;
``--debug`` (or the environment variable ``CALIBREPRO_DEBUG=1``) shows the Python traceback as well.
A new command is one :func:`add_command` call in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from calibrepro.zoo import PRETRAINED_SOURCES

DESCRIPTION = """\
calibrepro regenerates calibration tables, reliability diagrams and a reproduction report for
pretrained classifiers. The pipeline itself runs through Snakemake, e.g.

  snakemake --cores 4                                # the offline demo
  snakemake --cores 4 --configfile my.yaml           # your own models

This command holds the steps that are useful on their own:"""

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


def _logits(args: argparse.Namespace) -> int:
    from calibrepro.zoo import LogitsRequest, get_source

    request = LogitsRequest.from_json(json.loads(args.request))
    get_source(request.spec["source"]).cache_logits(request, Path(args.output))
    return 0


def _check_logits(args: argparse.Namespace) -> int:
    from calibrepro.io import LogitsFileError, check_agreement, load_logits

    failed = False
    for path in args.files:
        try:
            archive = load_logits(path)
        except LogitsFileError as error:
            print(f"calibrepro: error: {error}", file=sys.stderr)
            failed = True
            continue
        n, k = archive.logits.shape
        accuracy = float((archive.logits.argmax(axis=1) == archive.labels).mean())
        print(f"{path}: ok, {n} samples, {k} classes, top-1 accuracy {accuracy:.4f}")
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


def add_command(commands, name: str, handler, summary: str, example: str) -> argparse.ArgumentParser:
    """Register a subcommand with its one-line summary and one example; return its parser for arguments."""
    parser = commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # also accepted after the command name; SUPPRESS keeps the main parser's value when absent here
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show Python tracebacks")
    parser.set_defaults(handler=handler, example=example)
    return parser


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
        "compute one model's logits archive (the pipeline's logits step; Snakemake calls it for you)",
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
