"""Command line: the steps that run in their own process (logits caching), and a file checker."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from calibrepro.io import LogitsFileError, load_logits
from calibrepro.zoo import PRETRAINED_SOURCES, LogitsRequest, get_source


def _logits(args: argparse.Namespace) -> int:
    request = LogitsRequest.from_json(json.loads(args.request))
    get_source(request.spec["source"]).cache_logits(request, Path(args.output))
    return 0


def _check_logits(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            archive = load_logits(path)
        except LogitsFileError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
            continue
        n, k = archive.logits.shape
        accuracy = float((archive.logits.argmax(axis=1) == archive.labels).mean())
        print(f"{path}: ok, {n} samples, {k} classes, top-1 accuracy {accuracy:.4f}")
    return status


def _models(args: argparse.Namespace) -> int:
    from calibrepro.zoo.catalogue import catalogue, catalogue_table

    rows = catalogue(source=args.source, dataset=args.dataset)
    if not rows:
        known = sorted({row.dataset for row in catalogue(source=args.source)})
        of = f" of source {args.source}" if args.source else ""
        print(f"error: no pinned model{of} for data set {args.dataset!r}; data sets: {', '.join(known)}", file=sys.stderr)
        return 1
    print(catalogue_table(rows), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calibrepro", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    logits = commands.add_parser("logits", help="produce one model's logits archive (the pipeline's logits rule)")
    logits.add_argument("--request", required=True, help="the job as JSON (see calibrepro.zoo.LogitsRequest)")
    logits.add_argument("--output", required=True, help="path of the .npz to write")
    logits.set_defaults(handler=_logits)

    check = commands.add_parser("check-logits", help="validate .npz files for `source: logits` models")
    check.add_argument("files", nargs="+")
    check.set_defaults(handler=_check_logits)

    models = commands.add_parser("models", help="list the pinned pretrained models: source, licence, published top-1")
    models.add_argument("--source", choices=PRETRAINED_SOURCES, help="only this source's models")
    models.add_argument("--dataset", help="only the models of this data set (e.g. cifar100)")
    models.set_defaults(handler=_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
