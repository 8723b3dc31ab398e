"""Source ``train``: a named network (:data:`calibrepro.training.ARCHITECTURES`) the pipeline trains itself.

``{source: train, network: lenet5, epochs: ..., ...}`` under ``digits`` (scikit-learn's bundled
8x8 digits, no download: what the offline demo trains), ``mnist``, ``cifar10`` or a data set declared
as a folder of images (``datasets.<key>: {source: imagefolder, root: ...}``) trains the
network on the data set's training set and caches its logits on the evaluation set (see
:mod:`calibrepro.training.data`). The trained weights are cached under
``<downloads.dir>/trained/`` (:mod:`calibrepro.training.trainer`), so that a redone logits job (a new
variant, a new number of passes) does not train again. Stochastic variants, each stored as the log of
the mean softmax over its draws:

* ``mc_dropout: T``: T forward passes with the dropout layers on (networks with ``dropout`` > 0);
* ``samples: S``: S weight draws of a Bayesian network (``bayes_mlp``, ``bayes_lenet5``; default 10);
* ``ensemble: M``: M networks trained with seeds ``seed``, ``seed + 1``, ... (each one's cached weights
  are shared with the single network of that seed), combined like ``source: ensemble`` combines models.
"""

from __future__ import annotations

from pathlib import Path

from calibrepro.evaluation_sets import entry
from calibrepro.training.curves import CurvesError, check_curves
from calibrepro.training.folders import is_folder
from calibrepro.zoo import LogitsRequest, ModelSourceError, Source
from calibrepro.training import ARCHITECTURES, TRAINING_DATASETS

#: test-time weight draws of a Bayesian network when ``samples`` is not given
DEFAULT_SAMPLES = 10
#: the variant keys of a ``source: train`` entry (the others are training options)
VARIANTS = ("mc_dropout", "samples", "ensemble")


def check_entry(dataset: str, model: str, spec: dict, config: dict) -> None:
    """Fail with a :class:`~calibrepro.zoo.ModelSourceError` naming the key when an entry cannot be trained."""
    where = f"models.{dataset}.{model}"
    folder = is_folder(entry(dataset, config))
    if dataset not in TRAINING_DATASETS and not folder:
        raise ModelSourceError(
            f"{where}: source 'train' trains on the data sets {', '.join(TRAINING_DATASETS)} or on a folder of "
            f"images, not {dataset!r}; put the model under one of them or declare "
            f"datasets: {{{dataset}: {{source: imagefolder, root: <folder>}}}}"
        )
    network = spec.get("network", "mlp")
    if network not in ARCHITECTURES:
        raise ModelSourceError(f"{where}.network: unknown network {network!r}; known: {', '.join(ARCHITECTURES)}")
    architecture = ARCHITECTURES[network]
    if architecture.images and dataset == "digits" and not folder:
        raise ModelSourceError(f"{where}.network: {network} needs images (mnist, cifar10); the digits are 64 features")
    for key in VARIANTS:
        if key in spec and (not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 1):
            raise ModelSourceError(f"{where}.{key}: must be an integer >= 1, not {spec[key]!r}")
    if "mc_dropout" in spec and (architecture.bayesian or not spec.get("dropout", 0) > 0):
        raise ModelSourceError(
            f"{where}.mc_dropout: network {network} of this entry has no dropout layers; "
            "set dropout (e.g. 0.5) or remove mc_dropout"
        )
    if "samples" in spec and not architecture.bayesian:
        raise ModelSourceError(
            f"{where}.samples: weight samples need a Bayesian network (bayes_mlp, bayes_lenet5), not {network}"
        )
    if architecture.bayesian and spec.get("dropout", 0) > 0:
        raise ModelSourceError(f"{where}.dropout: the Bayesian network {network} has no dropout layers; remove dropout")
    try:
        check_curves(where, spec, architecture.bayesian)
    except CurvesError as error:
        raise ModelSourceError(str(error)) from None


class TrainSource(Source):
    """Train a network on a data set's training set; cache its (stochastic) logits on the evaluation set."""

    name = "train"
    needs_gpu = True

    def downloads(self, dataset, model, spec, config):
        from calibrepro.training.data import downloads

        return downloads(dataset, entry(dataset, config))

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        check_entry(dataset, model, spec, config)
        settings = entry(dataset, config)
        if is_folder(settings):  # its layout before any job starts; the images in the job
            from calibrepro.training.folders import folder_files

            folder_files(dataset, settings)

    def resources(self, dataset: str, model: str, spec: dict, config: dict) -> dict:
        if dataset == "digits":
            return {"threads": 1, "gpu": 0, "mem_mb": 2000, "runtime": 10}
        on_gpu = (config.get("inference") or {}).get("device", "auto") != "cpu"
        members = spec.get("ensemble", 1)
        return {"threads": 2, "gpu": int(on_gpu), "mem_mb": 6000, "runtime": (60 if on_gpu else 600) * members}

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        import numpy as np

        from calibrepro.averaging import log_mean_softmax
        from calibrepro.inference import environment, inference_settings, select_device
        from calibrepro.io import save_logits
        from calibrepro.training import data, trainer

        dataset, spec = request.dataset, request.spec
        check_entry(dataset, request.model, spec, request.config)
        device = select_device(inference_settings(request.config)["device"])
        settings = entry(dataset, request.config)
        parts = data.load(dataset, request.files, settings)
        options = trainer.training_options(spec)
        recorder = None
        if spec.get("curves") is not None:  # resolved by calibrepro.training.curves.request_spec
            from calibrepro.training.curves import Recorder

            options["curves"] = spec["curves"]  # in the weights' cache key: weights without curves stay cached
            pool = int(parts.provenance.get("calibration_pool", 0))
            recorder = Recorder(parts.x_eval, parts.y_eval, spec["curves"], options["epochs"], device,
                                options["threads"], pool)
        bayesian = ARCHITECTURES[options["network"]].bayesian
        cache_root = (request.config.get("downloads") or {}).get("dir", "results/downloads")
        members, training, count = [], [], spec.get("ensemble", 1)
        for m in range(count):
            member = {**options, "seed": options["seed"] + m}
            desc = f"{dataset}/{request.model}" + (f" (network {m + 1} of {count})" if "ensemble" in spec else "")
            network, record = trainer.trained_network(parts, dataset, member, device, cache_root, desc, recorder)
            if bayesian:
                draws = spec.get("samples", DEFAULT_SAMPLES)
                logits = trainer.stochastic_logits(
                    network, parts.x_eval, draws, member["seed"], device, dropout=False, threads=member["threads"]
                )
            elif "mc_dropout" in spec:
                logits = trainer.stochastic_logits(
                    network, parts.x_eval, spec["mc_dropout"], member["seed"], device, threads=member["threads"]
                )
            else:
                logits = trainer.forward(network, parts.x_eval, device, member["threads"])
            record["evaluation_accuracy"] = float(np.mean(logits.argmax(axis=1) == parts.y_eval))
            members.append(logits)
            training.append(record)
        logits = members[0] if len(members) == 1 else log_mean_softmax(members).astype(np.float32)
        metadata = {
            "source": self.name,
            "dataset": dataset,
            "model": request.model,
            "options": options,
            "variant": {key: spec[key] for key in VARIANTS if key in spec},
            "data": parts.provenance,
            "train_size": int(len(parts.y_train)),
            "num_samples": int(len(parts.y_eval)),
            "top1_accuracy": float(np.mean(logits.argmax(axis=1) == parts.y_eval)),
            "training": training,
            "environment": environment(device),
        }
        if bayesian:
            metadata["variant"].setdefault("samples", DEFAULT_SAMPLES)
        save_logits(output, logits, parts.y_eval, metadata)
