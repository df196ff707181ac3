"""Teacher selection by candidate scores kamal does not ship, on a workspace's cached probes (no training).

python benchmarks/selection_candidates.py WORKSPACE [--transfer NAME] [--transfer-gold NAME] [--eval NAME]
                                          [--student NAME ...] [--generated NAME ...] [--max-length N]
                                          [--compare SCORE_A SCORE_B]

For each score: how often the most confident teacher owns the gold label on the eval rows, its AUROC,
the same share on the transfer rows, and how often the chosen teacher's label is the gold one there (the hard
target a student learns; the transfer rows' labels are read here only to measure). Candidates:
- raw: mc-dropout, entropy, max-prob, energy, max-logit, RMD refitted on the transfer rows each teacher
  is confident on (kamal's fallback when the teachers' training data is unknown);
- per teacher: each raw score z-scored, or ranked, over that teacher's own transfer rows;
- kNN: a row's score averaged with its 10 nearest transfer rows', in a shared embedding (each teacher's
  last-layer features, centred, unit length, concatenated);
- cluster: the mean score of the row's cluster (30 k-means clusters of that embedding);
- a trained student's block probability (--student): the mass it puts on each teacher's labels, the
  selection an EM-like second round would start from;
- RMD fitted on the labelled transfer rows of each teacher's classes (what it was trained on, which a user
  of downloaded teachers does not have), and on 20 of them per class (`--rmd-fit` with a few labelled rows);
- RMD fitted on text kamal synthesize wrote (--generated; probe it first, e.g. `kamal probe --data NAME
  --mc-samples 1`): on every row written for the teacher's classes, and on those it puts in their class
  (kamal's fit); variants of that fit: background on the transfer rows, the generated set shifted to the
  transfer rows' mean, class means from it with the covariance of the transfer rows;
- the log-likelihood ratio of the same Gaussians (a mixture over classes, with log-determinants) instead of
  min_k RMD_k, with its parts, and with per-teacher priors estimated by EM on the transfer rows;
- RMD summed with a certainty score (entropy, MC dropout, energy, max-prob), both as pooled z-scores or
  pooled percentiles (one map for every teacher, so teachers stay comparable);
- the prototype score (kamal's, with --generated) at other temperatures than its 0.05; its prototypes moved
  to the transfer rows by soft k-means (started at the generated ones); a vote of the 15 nearest generated
  rows in the same encoder; each fused with RMD as kamal fuses (mean of the pooled percentiles).
Uses the newest probe per (teacher, dataset) with K > 1 (any probe with features for --generated); reads the
workspace, writes nothing but the shared encoder's cached sentence vectors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kamalcli.data.text import load_dataset_rows  # noqa: E402
from kamalcli.probe.arrays import ProbeArrays  # noqa: E402
from kamalcli.probe.auto_score import energy  # noqa: E402
from kamalcli.probe.calibration import normalised_uncertainty  # noqa: E402
from kamalcli.trust.mahalanobis import fit_rmd  # noqa: E402
from kamalcli.labels import label_indices  # noqa: E402
from kamalcli.probe.prototypes import fused as prototype_fusion  # noqa: E402
from kamalcli.probe.runner import on_steered_class, pseudo_in_distribution  # noqa: E402
from kamalcli.probe.selection import selection_quality  # noqa: E402
from kamalcli.probs import percentile  # noqa: E402
from kamalcli.workspace.store import Store  # noqa: E402
from kamalcli.workspace.folder import find_workspace  # noqa: E402


def _probe(store, teacher, dataset, mc: bool = True) -> ProbeArrays:
    probes = [p for p in store.probes(teacher_id=teacher.id, dataset_id=dataset.id)
              if (p.options.get("mc_samples", 1) > 1 or not mc) and p.options.get("layers")]
    if not probes:
        kind = "MC-dropout probe" if mc else "probe with features"
        raise SystemExit(f"no {kind} of {teacher.name} on {dataset.name}: run `kamal probe` first")
    return ProbeArrays.load(Path(max(probes, key=lambda p: p.id).path))


def raw_scores(arrays: ProbeArrays) -> dict[str, np.ndarray]:
    probs = arrays.probs()
    logits = np.asarray(arrays.logits, dtype=np.float64)
    return {"mc-dropout": 1 - normalised_uncertainty(np.asarray(arrays.mc_probs, dtype=np.float64)),
            "entropy": 1 - normalised_uncertainty(probs), "max-prob": probs.max(axis=1),
            "energy": energy(logits), "max-logit": logits.max(axis=1)}


def kmeans(x: np.ndarray, k: int, iterations: int = 30, seed: int = 0) -> np.ndarray:
    """Spherical k-means: unit-length centres."""
    centres = x[np.random.default_rng(seed).choice(len(x), k, replace=False)]
    for _ in range(iterations):
        assigned = (x @ centres.T).argmax(axis=1)
        centres = np.stack([x[assigned == j].mean(axis=0) if (assigned == j).any() else centres[j] for j in range(k)])
        centres /= np.linalg.norm(centres, axis=1, keepdims=True) + 1e-12
    return centres


def _blocks(store, student_name: str, dataset, teachers) -> np.ndarray:
    """(rows, teachers): the student's probability mass on each teacher's labels."""
    from kamalcli.students.predict import predict_texts

    names, probs = predict_texts(store.find_student(student_name), load_dataset_rows(dataset)[0], device="cpu")
    return np.stack([probs[:, [names.index(label) for label in t.labels]].sum(axis=1) for t in teachers], axis=1)


def cross_validated_rmd(features, local, keep, folds: int = 5, seed: int = 0) -> np.ndarray:
    """The teacher's own (kept) generated rows, each scored by a fit on the other folds: how text known to be
    of its domain scores, out of sample."""
    rows = np.flatnonzero(keep)
    fold = np.random.default_rng(seed).permutation(len(rows)) % folds
    out = np.empty(len(rows))
    for f in range(folds):
        fit_rows, test_rows = rows[fold != f], rows[fold == f]
        rest = np.setdiff1d(np.arange(len(features)), test_rows)
        out[fold == f] = fit_rmd(features[fit_rows], local[fit_rows], features[rest]).score(features[test_rows])
    return out


def log_likelihood_ratio(model, features: np.ndarray, prior: bool = True, logdet: bool = True) -> np.ndarray:
    """log p_in(h) - log p_background(h): the class Gaussians as a mixture with equal class weights, with
    the log-determinants. Unlike min_k RMD_k, no bonus for having more classes and no ignored per-teacher
    constant, so teachers compare on one scale: p_in_i / p_bg is P(domain i | h) / P(domain i) when every
    background models the same text."""
    from scipy.special import logsumexp

    from kamalcli.trust.mahalanobis import _mahalanobis

    md = _mahalanobis(features, model.means, model.precision)
    md0 = _mahalanobis(features, model.mean0[None, :], model.precision0)[:, 0]
    logdet_in, logdet_bg = np.linalg.slogdet(model.precision)[1], np.linalg.slogdet(model.precision0)[1]
    if not logdet:
        logdet_in = logdet_bg = 0.0
    log_in = logsumexp(-0.5 * md, axis=1) - (np.log(len(model.means)) if prior else 0.0) + 0.5 * logdet_in
    return log_in - (-0.5 * md0 + 0.5 * logdet_bg)


def em_priors(llr: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Each teacher's share of the rows: pi_i <- mean over rows of the posterior pi_i exp(llr_i) / sum."""
    priors = np.full(llr.shape[1], 1.0 / llr.shape[1])
    for _ in range(iterations):
        logits = llr + np.log(priors)
        posterior = np.exp(logits - logits.max(axis=1, keepdims=True))
        priors = (posterior / posterior.sum(axis=1, keepdims=True)).mean(axis=0)
    return priors


def _pooled_z(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """One affine map for every teacher's column: comparisons between teachers are kept."""
    return (values - reference.mean()) / (reference.std() + 1e-12)


def adapted_prototypes(vectors: np.ndarray, prototypes: np.ndarray, temperature: float,
                       iterations: int = 20) -> np.ndarray:
    """Soft k-means on unit vectors, started at the generated prototypes: each step, every prototype becomes
    the unit mean of the rows weighted by their softmax(cos / T) responsibility for it."""
    from kamalcli.probe.prototypes import teacher_shares

    each_its_own = np.eye(len(prototypes), dtype=bool)  # the shares of one-label "teachers": the softmax itself
    for _ in range(iterations):
        weights = teacher_shares(vectors, prototypes, each_its_own, temperature)
        prototypes = weights.T @ vectors
        prototypes /= np.linalg.norm(prototypes, axis=1, keepdims=True) + 1e-12
    return prototypes


def _prototype_candidates(workspace, teachers, sets: dict, generated, max_length: int) -> dict:
    """score -> set -> (rows, teachers): the prototype score's variants, in the default shared encoder."""
    from kamalcli.probe.prototypes import DEFAULT_ENCODER, TEMPERATURE, class_prototypes, label_owners, teacher_shares
    from kamalcli.probe.encoder import sentence_vectors

    def vectors(dataset):
        return np.asarray(sentence_vectors(workspace, DEFAULT_ENCODER, load_dataset_rows(dataset)[0],
                                           dataset.content_hash, max_length, "cpu", say=lambda _: None),
                          dtype=np.float64)

    names, owns = label_owners(teachers)
    written_for = load_dataset_rows(generated)[1]
    gen_vectors = vectors(generated)
    gen_owner = np.array([[label in t.labels for t in teachers] for label in written_for])
    prototypes = class_prototypes(gen_vectors, written_for, names)
    found = {k: vectors(d) for k, d in sets.items()}
    out = {}
    for temperature in (0.01, 0.02, TEMPERATURE, 0.1):
        shown = "kamal's" if temperature == TEMPERATURE else f"T={temperature}"
        out[f"prototype ({shown})"] = {k: teacher_shares(v, prototypes, owns, temperature) for k, v in found.items()}
        moved = adapted_prototypes(found["transfer"], prototypes, temperature)
        out[f"prototype moved to the transfer rows by soft k-means (T={temperature})"] = {
            k: teacher_shares(v, moved, owns, temperature) for k, v in found.items()}
    out["vote of the 15 nearest generated rows (shared encoder)"] = {
        k: gen_owner[np.argsort(-(v @ gen_vectors.T), axis=1)[:, :15]].mean(axis=1) for k, v in found.items()}
    return out


def _print_moves(transfer_scores: dict, compared: list[str], teachers, gold: list[str]) -> None:
    """For each pair of teachers: the transfer rows SCORE_A gives to one and SCORE_B to the other, by gold label."""
    from collections import Counter

    missing = [name for name in compared if name not in transfer_scores]
    if missing:
        raise SystemExit(f"--compare: no score named {missing[0]!r} (the table's first column names them)")
    first, second = (np.asarray(transfer_scores[name]).argmax(axis=1) for name in compared)
    gold = np.array(gold, dtype=object)
    print(f"Transfer rows moved from {compared[0]!r} to {compared[1]!r} (gold labels; * = owned by the new teacher):")
    for i, source in enumerate(teachers):
        for j, target in enumerate(teachers):
            moved = (first == i) & (second == j)
            if i != j and moved.any():
                counts = Counter(gold[moved]).most_common()
                listed = ", ".join(f"{label}{'*' if label in target.labels else ''} {n}" for label, n in counts)
                print(f"- {source.name} -> {target.name}: {int(moved.sum())} rows ({listed})")


def _means_generated_covariance_transfer(features, local, keep, transfer, transfer_pred):
    """Class means from the generated rows; the shared covariance from the transfer rows, pooled within the
    class the teacher predicts (thousands of real rows instead of tens of generated ones); background: transfer."""
    from kamalcli.trust.mahalanobis import RMDModel, shrunk_precision

    classes = np.unique(local[keep])
    means = np.stack([features[keep & (local == c)].mean(axis=0) for c in classes])
    centred = np.concatenate([transfer[transfer_pred == c] - transfer[transfer_pred == c].mean(axis=0)
                              for c in np.unique(transfer_pred)])
    mean0 = transfer.mean(axis=0)
    return RMDModel(means, shrunk_precision(centred), mean0, shrunk_precision(transfer - mean0))


def _background_transfer(features, local, keep, transfer, transfer_pred):
    return fit_rmd(features[keep], local[keep], transfer)


def _shifted_to_transfer(features, local, keep, transfer, transfer_pred):
    """The generated set's offset from the real text (its mean against the transfer rows' mean) removed."""
    shift = transfer.mean(axis=0) - features.mean(axis=0)
    return fit_rmd(features[keep] + shift, local[keep], transfer)


LLR_PARTS = {" (rows on their class)": {}, ", soft-min only": {"prior": False, "logdet": False},
             ", soft-min and class prior": {"logdet": False}, ", soft-min and log-determinants": {"prior": False}}
GENERATED_VARIANTS = {
    "means generated, covariance and background transfer": _means_generated_covariance_transfer,
    "background on transfer rows": _background_transfer,
    "shifted to the transfer mean, background transfer": _shifted_to_transfer,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace")
    parser.add_argument("--transfer", default="transfer")
    parser.add_argument("--transfer-gold", default="labelled", help="the same rows as --transfer, with labels")
    parser.add_argument("--eval", default="test")
    parser.add_argument("--student", action="append", default=[], help="a trained student of these teachers")
    parser.add_argument("--generated", action="append", default=[], help="a dataset kamal synthesize wrote")
    parser.add_argument("--compare", nargs=2, metavar=("SCORE_A", "SCORE_B"),
                        help="two scores of the table: the transfer rows they give to different teachers, by gold label")
    parser.add_argument("--max-length", type=int, default=64, help="tokens the shared encoder reads per row "
                        "(the benchmarks' probes use 64)")
    args = parser.parse_args()
    workspace = find_workspace(args.workspace)
    store = Store.open(workspace)
    teachers = store.teachers()
    sets = {"transfer": store.dataset(args.transfer), "eval": store.dataset(args.eval)}
    gold = {"transfer": load_dataset_rows(store.dataset(args.transfer_gold))[1], "eval": load_dataset_rows(sets["eval"])[1]}
    if load_dataset_rows(store.dataset(args.transfer_gold))[0] != load_dataset_rows(sets["transfer"])[0]:
        raise SystemExit(f"{args.transfer_gold} does not hold the rows of {args.transfer}")
    if any(g is None for g in gold.values()):
        raise SystemExit("both datasets need labels (to measure; the scores never read them)")
    owns = {k: np.array([[g in t.labels for t in teachers] for g in gold[k]]) for k in sets}
    arrays = {k: [_probe(store, t, d) for t in teachers] for k, d in sets.items()}
    scores = {k: {} for k in sets}
    for k in sets:
        for name in raw_scores(arrays[k][0]):
            scores[k][name] = np.stack([raw_scores(a)[name] for a in arrays[k]], axis=1)
    layer = {i: max(a.features) for i, a in enumerate(arrays["transfer"])}
    rmd = {k: [] for k in sets}
    for i, source in enumerate(arrays["transfer"]):
        probs = source.probs()
        keep = pseudo_in_distribution(probs.max(axis=1))
        features = np.asarray(source.features[layer[i]], dtype=np.float64)
        model = fit_rmd(features[keep], probs.argmax(axis=1)[keep], features)
        for k in sets:
            rmd[k].append(-model.score(np.asarray(arrays[k][i].features[layer[i]], dtype=np.float64)))
    for k in sets:
        scores[k]["rmd (confident transfer rows)"] = np.stack(rmd[k], axis=1)
    # what the teachers were trained on (a user of downloaded teachers does not have it): the transfer rows of
    # their classes, with their gold labels
    for label, per_class in (("labelled rows of its classes", None), ("20 labelled rows per class", 20)):
        rmd, ratio = {k: [] for k in sets}, {k: [] for k in sets}
        for i, (teacher, source) in enumerate(zip(teachers, arrays["transfer"])):
            local = label_indices(gold["transfer"], teacher.labels)
            keep = local >= 0
            if per_class:
                keep = np.zeros(len(local), dtype=bool)
                for c in range(len(teacher.labels)):
                    keep[np.flatnonzero(local == c)[:per_class]] = True
            features = np.asarray(source.features[layer[i]], dtype=np.float64)
            model = fit_rmd(features[keep], local[keep], features[keep])
            for k in sets:
                rmd[k].append(-model.score(np.asarray(arrays[k][i].features[layer[i]], dtype=np.float64)))
                ratio[k].append(log_likelihood_ratio(model, np.asarray(arrays[k][i].features[layer[i]], dtype=np.float64)))
        for k in sets:
            scores[k][f"rmd ({label})"] = np.stack(rmd[k], axis=1)
            scores[k][f"log-likelihood ratio ({label})"] = np.stack(ratio[k], axis=1)
            scores[k][f"rmd ({label}) + entropy (pooled percentiles)"] = (
                percentile(scores[k][f"rmd ({label})"]) + percentile(scores[k]["entropy"]))
    for name in args.generated:
        generated = store.dataset(name)
        written_for = load_dataset_rows(generated)[1]
        sources = [_probe(store, teacher, generated, mc=False) for teacher in teachers]
        columns: dict[str, dict[str, list]] = {}  # score -> set -> one column per teacher
        for i, (teacher, source) in enumerate(zip(teachers, sources)):
            local = label_indices(written_for, teacher.labels)
            steered = on_steered_class(source.probs(), local)
            features = np.asarray(source.features[layer[i]], dtype=np.float64)
            transfer = np.asarray(arrays["transfer"][i].features[layer[i]], dtype=np.float64)
            predicted = arrays["transfer"][i].probs().argmax(axis=1)
            models = {"every row": fit_rmd(features[local >= 0], local[local >= 0], features),
                      "rows on their class": fit_rmd(features[steered], local[steered], features),  # kamal's fit
                      **{label: variant(features, local, steered, transfer, predicted)
                         for label, variant in GENERATED_VARIANTS.items()}}
            kamal_fit = models["rows on their class"]
            held_out = np.sort(cross_validated_rmd(features, local, steered))
            for k in sets:
                h = np.asarray(arrays[k][i].features[layer[i]], dtype=np.float64)
                column = {f"rmd fitted on {name}, {label}": -model.score(h) for label, model in models.items()}
                rmd_k = kamal_fit.score(h)
                column[f"rmd fitted on {name}, z against its own held-out generated rows"] = (
                    -(rmd_k - held_out.mean()) / (held_out.std() + 1e-12))
                column[f"rmd fitted on {name}, share of its own held-out generated rows scoring better"] = (
                    -np.searchsorted(held_out, rmd_k) / len(held_out))
                for label, parts in LLR_PARTS.items():
                    column[f"log-likelihood ratio fitted on {name}{label}"] = log_likelihood_ratio(kamal_fit, h, **parts)
                for score, values in column.items():
                    columns.setdefault(score, {s: [] for s in sets})[k].append(values)
        for score, by_set in columns.items():
            for k in sets:
                scores[k][score] = np.stack(by_set[k], axis=1)
        priors = em_priors(scores["transfer"][f"log-likelihood ratio fitted on {name} (rows on their class)"])
        print(f"EM priors of the teachers' domains on the transfer rows ({name}): {np.round(priors, 3).tolist()}")
        for k in sets:
            scores[k][f"log-likelihood ratio fitted on {name}, + log EM prior"] = (
                scores[k][f"log-likelihood ratio fitted on {name} (rows on their class)"] + np.log(priors))
        for score, by_set in _prototype_candidates(workspace, teachers, sets, generated, args.max_length).items():
            for k in sets:
                scores[k][score] = by_set[k]
                scores[k][f"{score} + rmd fitted on {name} (kamal's fusion)"] = prototype_fusion(
                    scores[k][f"rmd fitted on {name}, rows on their class"], by_set[k])
        fused = f"rmd fitted on {name}, rows on their class"
        for other in ("entropy", "mc-dropout"):  # as kamal would compute it: pooled percentiles, per dataset
            for k in sets:
                scores[k][f"{fused} + {other} (pooled percentiles)"] = percentile(scores[k][fused]) + percentile(scores[k][other])
        ratio = f"log-likelihood ratio fitted on {name} (rows on their class)"
        for density in (fused, ratio):
            for other in ("energy", "entropy", "mc-dropout", "max-prob"):
                for k in sets:
                    scores[k][f"{density} + {other} (each z over all teachers' transfer scores)"] = sum(
                        _pooled_z(scores[k][s], scores["transfer"][s]) for s in (density, other))
    raw = list(scores["transfer"])
    for name in raw:
        base = scores["transfer"][name]
        mean, std, ordered = base.mean(axis=0), base.std(axis=0) + 1e-12, np.sort(base, axis=0)
        for k in sets:
            s = scores[k][name]
            scores[k][f"{name}, per-teacher z"] = (s - mean) / std
            scores[k][f"{name}, per-teacher rank"] = np.stack(
                [np.searchsorted(ordered[:, i], s[:, i], side="right") / len(ordered) for i in range(s.shape[1])], axis=1)

    def embedding(k):
        parts = []
        for i, a in enumerate(arrays[k]):
            f = np.asarray(a.features[layer[i]], dtype=np.float64)
            f = f - np.asarray(arrays["transfer"][i].features[layer[i]], dtype=np.float64).mean(axis=0)
            parts.append(f / (np.linalg.norm(f, axis=1, keepdims=True) + 1e-12) / np.sqrt(len(teachers)))
        return np.concatenate(parts, axis=1)

    shared = {k: embedding(k) for k in sets}
    centres = kmeans(shared["transfer"], 30)
    cluster = {k: (shared[k] @ centres.T).argmax(axis=1) for k in sets}
    for name in ("mc-dropout", "entropy", "max-logit", "mc-dropout, per-teacher z"):
        for k in sets:
            similarity = shared[k] @ shared["transfer"].T
            if k == "transfer":
                np.fill_diagonal(similarity, -np.inf)
            nearest = np.argpartition(-similarity, 10, axis=1)[:, :10]
            scores[k][f"{name}, kNN-10 smoothed"] = 0.5 * scores[k][name] + 0.5 * scores["transfer"][name][nearest].mean(axis=1)
        means = np.stack([scores["transfer"][name][cluster["transfer"] == j].mean(axis=0)
                          if (cluster["transfer"] == j).any() else np.zeros(len(teachers)) for j in range(30)])
        for k in sets:
            scores[k][f"{name}, per cluster (30)"] = means[cluster[k]]
    for name in args.student:
        for k in sets:
            scores[k][f"student {name}'s block probability"] = _blocks(store, name, sets[k], teachers)
    if args.compare:
        _print_moves(scores["transfer"], args.compare, teachers, gold["transfer"])
    # each teacher's label for each transfer row: is the hard target of the chosen teacher the gold label?
    said = np.stack([np.array(t.labels, dtype=object)[a.probs().argmax(axis=1)]
                     for t, a in zip(teachers, arrays["transfer"])], axis=1)
    gold_transfer = np.array(gold["transfer"], dtype=object)
    print(f"| score | right teacher on {args.eval} % | AUROC | right teacher on {args.transfer} % "
          f"| hard target right on {args.transfer} % |")
    print("|---|---|---|---|---|")
    for name in scores["eval"]:
        q, t = selection_quality(scores["eval"][name], owns["eval"]), selection_quality(scores["transfer"][name], owns["transfer"])
        chosen = np.asarray(scores["transfer"][name]).argmax(axis=1)
        target = (said[np.arange(len(chosen)), chosen] == gold_transfer).mean()
        print(f"| {name} | {100 * q['accuracy']:.1f} | {q['auroc']:.3f} | {100 * t['accuracy']:.1f} | {100 * target:.1f} |")


if __name__ == "__main__":
    main()
