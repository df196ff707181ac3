"""Issue 65, an experiment (its findings are in docs/benchmarks.md; the file is deleted in the next commit).

What the prior should be built from when gold rows are given. Run on the bench's workspaces (benchmarks/work):

    python experiments/gold_prior.py curve benchmarks/work/quick-protocols-two-halves     # the target, no student
    python experiments/gold_prior.py fits benchmarks/work/quick-protocols-two-halves      # the fits not kept
    python experiments/gold_prior.py student "two teachers"                               # kamal with 100 gold rows

`curve`: the argmax accuracy on the test rows of vanilla-kd's target times the prior, the prior from the generated
text, pooled with n random gold rows, or from the gold rows alone, beside the logistic peer on the same rows (5
draws). `fits`: the exponents of the target's two experts, the generated rows' weight in the prototypes, and a
choice among generated / pooled / gold, each fitted by the gold rows' leave-one-out likelihood. `student`: the
default with 100 random gold rows as an eval set and `--gold` (the README walk's was run the same way on a copy of
its seed-1 workspace with `kamal add-data ... --role eval`, `kamal probe`, `kamal amalgamate --gold`).
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from common import DEFAULT_DATA, load_split, sample  # noqa: E402

DRAWS = 5


def experts(ws_path: str):
    """The union's names, vanilla-kd's target on the pool and test rows, the rows' unit vectors, labelled pool rows."""
    import kamalcli
    from kamalcli.data.text import load_dataset_rows
    from kamalcli.methods.vanilla_kd import union_logits
    from kamalcli.probe.encoder import text_vectors
    from kamalcli.probe.outputs import teacher_outputs
    from kamalcli.probe.prototypes import _unit
    from kamalcli.probe.runner import Runner
    from kamalcli.probs import softmax

    w = kamalcli.open(ws_path)
    with w.session.writer() as store:
        teachers = store.teachers_of_task("sequence")
        names = list(store.label_space(teachers).names)
        runner = Runner(w.session.workspace, store, device="cpu")

        def target(dataset):
            outputs = teacher_outputs(store, teachers, [runner.logits_probe(t, dataset, 128) for t in teachers])
            logits, union = np.full((dataset.num_rows, len(names)), -np.inf), union_logits(outputs)
            for j, name in enumerate(outputs.space.names):
                logits[:, names.index(name)] = union[:, j]
            return softmax(logits, axis=1)

        pool, test, synth = store.dataset("pool"), store.dataset("test"), store.dataset("synth")
        pool_texts, _ = load_dataset_rows(pool)
        test_texts, test_labels = load_dataset_rows(test)
        synth_texts, synth_labels = load_dataset_rows(synth)
        pool_target, test_target = target(pool), target(test)
        sets = {d.name for d in store.datasets()}
        if "pool-gold" in sets:
            labelled = dict(zip(*load_dataset_rows(store.dataset("pool-gold"))))
        else:  # the README walk: the pool is topics10's dev split
            labelled = {r["text"]: r["label"] for r in load_split(DEFAULT_DATA, "dev")}
    vectors = lambda texts: _unit(text_vectors("minilm-l6", list(texts), 128).astype(np.float64))  # noqa: E731
    rows = [{"text": t, "label": labelled[t]} for t in pool_texts]
    synth_vectors, synth_y = vectors(synth_texts), np.array([names.index(x) for x in synth_labels])
    return dict(names=names, rows=rows, pool_target=pool_target, test_target=test_target,
                pool_vectors=vectors(pool_texts), test_vectors=vectors(test_texts),
                test_y=np.array([names.index(x) for x in test_labels]),
                synth_sums=np.stack([synth_vectors[synth_y == c].sum(0) for c in range(len(names))]),
                synth_counts=np.bincount(synth_y, minlength=len(names)))


def posterior(vectors, sums):
    from kamalcli.probe.prototypes import PRIOR_TEMPERATURE, _unit
    from kamalcli.probs import softmax

    return softmax(vectors @ _unit(sums).T / PRIOR_TEMPERATURE, axis=1)


def draw(e, n: int, d: int):
    """n random pool rows (draw d; draw 0 is the bench's): their indices, labels and per-label vector sums."""
    chosen = sample(e["rows"], n, f"gold-{n}-s1" if d == 0 else f"gold-{n}-s1-d{d}")
    index = {r["text"]: i for i, r in enumerate(e["rows"])}
    rows = np.array([index[r["text"]] for r in chosen])
    y = np.array([e["names"].index(r["label"]) for r in chosen])
    sums = np.zeros_like(e["synth_sums"])
    np.add.at(sums, y, e["pool_vectors"][rows])
    return rows, y, sums


def curve(ws_path: str) -> None:
    from sklearn.linear_model import LogisticRegression

    e = experts(ws_path)
    acc = lambda p: 100 * np.mean(p.argmax(1) == e["test_y"])  # noqa: E731
    t, tv = e["test_target"], e["test_vectors"]
    print(f"ensemble {acc(t):.1f}; the generated prior {acc(t * posterior(tv, e['synth_sums'])):.1f}")
    for n in (25, 50, 100, 200):
        pooled, alone, peer = [], [], []
        for d in range(DRAWS):
            rows, y, sums = draw(e, n, d)
            pooled.append(acc(t * posterior(tv, e["synth_sums"] + sums)))
            if (np.linalg.norm(sums, axis=1) > 0).all():
                alone.append(acc(t * posterior(tv, sums)))
            model = LogisticRegression(C=10.0, max_iter=2000).fit(e["pool_vectors"][rows], y)
            peer.append(100 * np.mean(model.predict(tv) == e["test_y"]))
        print(f"n={n}: pooled {np.mean(pooled):.1f} (sd {np.std(pooled):.1f}); gold alone "
              f"{np.mean(alone) if alone else float('nan'):.1f} ({len(alone)} draws hold every label); "
              f"peer {np.mean(peer):.1f} (sd {np.std(peer):.1f})", flush=True)


def fits(ws_path: str, n: int = 100) -> None:
    e = experts(ws_path)
    acc = lambda p: 100 * np.mean(p.argmax(1) == e["test_y"])  # noqa: E731
    synth, t, tv = e["synth_sums"], e["test_target"], e["test_vectors"]
    mean = synth / e["synth_counts"][:, None]  # a generated row's weight w: w x its label's mean generated vector
    for d in range(DRAWS):
        rows, y, sums = draw(e, n, d)
        gold_target, gold_vectors = e["pool_target"][rows], e["pool_vectors"][rows]

        def loo(generated, a=1.0, b=1.0):
            """The gold rows' log-likelihood of target^b x prior^a, each row out of its own prototype."""
            total = 0.0
            for i in range(len(rows)):
                protos = generated + sums
                protos[y[i]] -= gold_vectors[i]
                log = b * np.log(np.maximum(gold_target[i], 1e-30)) + a * np.log(
                    np.maximum(posterior(gold_vectors[i:i + 1], protos)[0], 1e-30))
                total += log[y[i]] - log.max() - np.log(np.exp(log - log.max()).sum())
            return total

        pooled = acc(t * posterior(tv, synth + sums))
        a, b = max(((a, b) for a in (0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3) for b in (0.5, 1, 2)),
                   key=lambda ab: loo(synth, *ab))
        exponents = acc(t ** b * posterior(tv, synth + sums) ** a)
        weight = max((0, 1, 2, 5, 10, 20, 50, 1e6), key=lambda w: loo(w * mean))
        weighted = acc(t * posterior(tv, weight * mean + sums))
        choice = max({"gold": 0 * mean, "pooled": synth, "generated": 1e6 * mean}.items(), key=lambda kv: loo(kv[1]))
        chosen = acc(t * posterior(tv, choice[1] + sums))
        print(f"draw {d}: pooled {pooled:.1f}; exponents ({a}, {b}) {exponents:.1f}; generated weight {weight} "
              f"{weighted:.1f}; chose {choice[0]} {chosen:.1f}", flush=True)


def student(words: str) -> None:
    from default_student import (DEFAULT_ROW, PROTOCOLS, _gold_rows, _test_cells, _write, realistic_setting,
                                 student_workspace, train_default)

    bench, setting = realistic_setting(words)
    ws = student_workspace(bench, setting)
    unlabelled = train_default(bench, setting, ws)
    pool = {r["text"]: r for r in setting.rows(bench, "realistic")}
    rows, gold, name = _gold_rows(bench, ws, pool, 100, "random", unlabelled), "gold-random-100", "gold-random-100-pooled"
    _, method, options, extra = DEFAULT_ROW
    if not ws.has_student(f"{name}-s1"):
        _write(ws, gold, rows, True, "eval")
        ws("probe", quiet=True)
        bench.train_student(ws, name, method, list(setting.teachers), 1, options, base=setting.base,
                            data=PROTOCOLS["realistic"][0], default_budget=True,
                            extra=(*extra, *setting.student, "--gold", gold))
        ws("remove-data", gold, quiet=True)
    print("no labels", _test_cells(ws, unlabelled), "| 100 gold rows", _test_cells(ws, f"{name}-s1"))


if __name__ == "__main__":
    {"curve": curve, "fits": fits, "student": student}[sys.argv[1]](*sys.argv[2:])
