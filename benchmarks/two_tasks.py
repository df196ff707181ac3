"""two-tasks (issue 67): one student for teachers of two tasks, each added with `--task`.

Two default-student settings become the two tasks: their teachers (trained elsewhere, added as folders), their
pools joined into one transfer set, each task tested on its own test rows (added with --role test after training).
The README's path: `kamal synthesize --per-class 20`, `kamal probe`, `kamal amalgamate --method muki-hard`.
Beside the student, per task: each teacher alone, the task's teachers' ensemble, the one-task default student and
the logistic head on frozen minilm-l6 vectors (both from the default-student results), then size and speed against
running the four teachers side by side.
"""

from __future__ import annotations

import json
import time

from common import RESULTS, WORK, Bench, markdown, write_results, write_rows
from default_student import DEFAULT, DEFAULT_ROW, GENERATED, GENERATED_PER_CLASS, SETTINGS

TASKS = {  # task: the default-student setting whose teachers, pool and test rows it takes
    "topic": "two teachers {5,5}",
    "intent": "intent: a weather skill and a date-time skill {7,7}",
}
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
    figures["cost"] = _cost(ws, student, [t for s in settings.values() for t in s.teachers], settings, bench)
    figures["train_seconds"] = next(s for s in ws.json("students") if s["name"] == student)["train"]["seconds"]
    write_results(bench, figures, table(figures))


def _task_figures(ws, student: str, task: str, setting, stored: dict, bench: Bench) -> dict:
    """The student on the task's test rows beside each teacher alone, the ensemble and the stored references."""
    data = f"test-{task}"

    def cell(metrics: dict | None) -> dict | None:
        return None if metrics is None else {k: metrics[k] for k in ("accuracy", "macro_f1")}

    members = [a for t in setting.teachers for a in ("--teacher", t)]
    one_task = stored.get("students", {}).get("realistic", {}).get(DEFAULT)
    return {
        "student": cell(ws.json("eval", student, "--data", data, "--task", task)),
        "ensemble": cell(ws.json("eval", "--baseline", "ensemble", *members, "--data", data)),
        "teachers": {t: cell(ws.json("eval", "--baseline", f"teacher:{t}", "--data", data)) for t in setting.teachers},
        "one_task_default": {k: one_task[k]["mean"] for k in ("accuracy", "macro_f1")} if one_task else None,
        "head_reference": ({k: stored["supervised_head"][k]["mean"] for k in ("accuracy", "macro_f1")}
                           if "supervised_head" in stored else cell(setting.head_reference(bench, bench.seeds[0]))),
    }


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
    cost = figures["cost"]
    teachers = cost["teachers"].values()
    params = sum(t["parameters"] for t in teachers)
    seconds = sum(t["seconds"] for t in teachers)
    speed = (f"One student: {cost['student']['parameters'] / 1e6:.1f} M parameters, {cost['student']['seconds']:.1f} s "
             f"for {cost['rows']} texts at {cost['max_length']} tokens on the CPU; the {len(cost['teachers'])} teachers "
             f"side by side: {params / 1e6:.1f} M, {seconds:.1f} s ({seconds / cost['student']['seconds']:.1f}x the "
             f"time). Training the student took {figures['train_seconds'] / 60:.0f} minutes.")
    intro = ("Teachers of `" + "` and `".join(TASKS.values()) + "` added with `--task " + "` / `--task ".join(TASKS)
             + "`; one pool of both settings' rows; the README's path (`synthesize --per-class 20`, `probe`, "
             "`amalgamate --method muki-hard`, no options); each task tested on its own test rows. Accuracy / "
             "macro-F1 %, one seed.")
    return intro + "\n\n" + markdown(["", "accuracy / macro-F1 %"], rows) + "\n\n" + speed


SCENARIOS = {"two-tasks": two_tasks}
