"""Source ``ensemble``: a model whose predictions average other configured models' (deep ensembles).

``{source: ensemble, members: [model_a, model_b, ...]}`` under a data set combines the members'
cached logits of that data set into one model (Lakshminarayanan et al. 2017, "Simple and scalable
predictive uncertainty estimation using deep ensembles", eq. for the ensemble prediction
``p(y|x) = 1/M sum_m p_m(y|x)``): the ensemble's logits are

    ``log(1/M sum_m softmax(z_m))`` = ``logsumexp_m(log_softmax(z_m)) - log M``,

computed in float64 from the members' float32 logits (:func:`calibrepro.averaging.log_mean_softmax`)
and stored as float32 like every logits archive (so
``softmax`` of them is the mean probability up to float32 rounding of the logits).  The members'
archives are the job's inputs (the workflow builds them first); their metadata and checksums go
into the ensemble's metadata.  Members must be models of the same data set with the same number
of samples, classes and labels; ensembles of ensembles are not supported.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calibrepro.averaging import log_mean_softmax
from calibrepro.download import sha256_of
from calibrepro.io import LogitsFileError, load_logits, save_logits
from calibrepro.layout import Layout
from calibrepro.zoo import LogitsRequest, ModelSourceError, Source


def check_ensembles(models: dict) -> None:
    """Every ``source: ensemble`` entry names other, non-ensemble models of its own data set.

    Raises :class:`~calibrepro.zoo.ModelSourceError` naming ``models.<dataset>.<model>.members`` (a
    :class:`~calibrepro.config.ConfigError` when :func:`calibrepro.config.validate_config` calls it).
    """
    for dataset, entries in models.items():
        for model, spec in entries.items():
            if spec.get("source") != "ensemble":
                continue
            key = f"models.{dataset}.{model}.members"
            for member in spec["members"]:
                if member == model:
                    raise ModelSourceError(f"{key}: an ensemble cannot contain itself ({member!r})")
                if member not in entries:
                    raise ModelSourceError(
                        f"{key}: {member!r} is not a model of data set {dataset!r} "
                        f"(configured: {', '.join(m for m in entries if m != model)})"
                    )
                if entries[member].get("source") == "ensemble":
                    raise ModelSourceError(f"{key}: {member!r} is itself an ensemble; list its members instead")


class EnsembleSource(Source):
    """The mean softmax probabilities of configured models of the same data set (module docstring)."""

    name = "ensemble"

    def logits_inputs(self, dataset: str, model: str, spec: dict, config: dict) -> dict[str, str]:
        """The members' cached logits archives (the ``logits`` rule's outputs, under ``config["results"]``), by member name."""
        layout = Layout(results=config["results"])
        return {member: layout.logits(dataset, member) for member in spec["members"]}

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        key = f"models.{request.dataset}.{request.model}.members"
        archives, provenance = [], {}
        for member in request.spec["members"]:
            path = Path(request.files[member])
            archive = load_logits(path)
            if archives:
                first_name, first = request.spec["members"][0], archives[0]
                if archive.logits.shape != first.logits.shape:
                    raise LogitsFileError(
                        f"{key}: {member!r} has logits of shape {archive.logits.shape}, {first_name!r} "
                        f"{first.logits.shape}; members must share samples and classes"
                    )
                if not np.array_equal(archive.labels, first.labels):
                    raise LogitsFileError(
                        f"{key}: {member!r} and {first_name!r} have different labels; members must be "
                        "evaluated on the same samples in the same order"
                    )
            archives.append(archive)
            provenance[member] = {"sha256": sha256_of(path), "metadata": archive.metadata}
        logits = log_mean_softmax([a.logits for a in archives]).astype(np.float32)
        metadata = {
            "source": self.name,
            "members": list(request.spec["members"]),
            "combination": "log of the mean of the members' float64 softmax probabilities, stored as float32",
            "member_provenance": provenance,
        }
        save_logits(output, logits, archives[0].labels, metadata)
