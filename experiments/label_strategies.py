"""Issue 65, an experiment (its findings are in docs/benchmarks.md; the file is deleted in the next commit).

Which 100 rows to label, by `kamal label-queue --strategy`: the few-shot peer a user makes from them (logistic
regression on minilm-l6 mean vectors, several draws) and kamal's default given them as the guide says (an eval set,
`--gold`, `--rmd-fit`; one draw). Run on a copy of the README walk's seed-1 workspace (benchmarks/readme_walk.py):

    cp -r benchmarks/work/walk-1-synth20-later3 /tmp/ws
    python experiments/label_strategies.py /tmp/ws --peer        # the peer, 5 draws a strategy
    python experiments/label_strategies.py /tmp/ws --students random diverse balanced disagree
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from common import DEFAULT_DATA, load_split, sample  # noqa: E402

STRATEGIES = ("disagree", "random", "balanced", "diverse")


def kamal(ws: Path, *args) -> str:
    done = subprocess.run([sys.executable, "-m", "kamalcli", "-w", str(ws), *map(str, args)], capture_output=True,
                          text=True, check=True)
    return done.stdout


def queue(ws: Path, strategy: str, seed: int, n: int) -> list[str]:
    out = ws / "data" / f"queue-{strategy}-{seed}.jsonl"
    if not out.is_file():
        kamal(ws, "label-queue", "--data", "pool", "--n", n, "--out", out, "--strategy", strategy, "--seed", seed)
    return [json.loads(line)["text"] for line in out.read_text().splitlines()]


def peer(ws: Path, n: int, draws: int) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    from kamalcli.probe.encoder import text_vectors

    pool, test = load_split(DEFAULT_DATA, "dev"), sample(load_split(DEFAULT_DATA, "test"), 600, "test-1")
    vectors = text_vectors("minilm-l6", [r["text"] for r in pool], 128)
    tests = text_vectors("minilm-l6", [r["text"] for r in test], 128)
    index, truth = {r["text"]: i for i, r in enumerate(pool)}, np.array([r["label"] for r in test])
    for strategy in STRATEGIES:
        figures = []
        for seed in range(1 if strategy == "disagree" else draws):
            rows = [index[t] for t in queue(ws, strategy, seed, n)]
            model = LogisticRegression(C=10.0, max_iter=2000).fit(vectors[rows], [pool[i]["label"] for i in rows])
            predicted = model.predict(tests)
            figures.append((100 * np.mean(predicted == truth), 100 * f1_score(truth, predicted, average="macro")))
        a = np.array(figures)
        print(f"{strategy}: peer accuracy {a[:, 0].mean():.1f} (sd {a[:, 0].std():.1f}, {len(a)} draws), "
              f"macro-F1 {a[:, 1].mean():.1f}")


def students(ws: Path, strategies: list[str], n: int) -> None:
    gold = {r["text"]: r["label"] for r in load_split(DEFAULT_DATA, "dev")}
    for strategy in strategies:
        name = f"gold-{strategy}"
        if name not in {s["name"] for s in json.loads(kamal(ws, "students", "--json"))}:
            rows = ws / "data" / f"{name}.jsonl"
            rows.write_text("".join(json.dumps({"text": t, "label": gold[t]}) + "\n" for t in queue(ws, strategy, 0, n)))
            kamal(ws, "add-data", rows, "--name", name, "--role", "eval")
            kamal(ws, "probe")
            kamal(ws, "amalgamate", "--method", "muki-hard", "--name", name, "--gold", name, "--rmd-fit", name, "--seed", 1)
            kamal(ws, "remove-data", name)  # an eval set left behind would steer the next student's recipe
        m = json.loads(kamal(ws, "eval", name, "--data", "test", "--json"))
        print(f"{strategy}: kamal's default with these rows {100 * m['accuracy']:.1f} / {100 * m['macro_f1']:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--peer", action="store_true")
    parser.add_argument("--students", nargs="*", default=[], choices=STRATEGIES)
    args = parser.parse_args()
    if args.peer:
        peer(args.workspace, args.n, args.draws)
    students(args.workspace, args.students, args.n)
