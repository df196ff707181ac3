"""kamal export: a student's ONNX folder, verified, with its card, recorded in the workspace."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from kamalcli.errors import KamalError
from kamalcli.files import ensure_writable_dir, publish_dir, removed_on_failure
from kamalcli.models.folder import kamal_json

PARITY_ROWS = 256


def parity_texts(store, student) -> list[str]:
    """Real texts for the parity check: labelled eval rows first, then the transfer rows."""
    from kamalcli.data.text import load_dataset_rows

    from kamalcli.data.tokens import load_token_rows

    task = getattr(student, "task", "sequence")
    datasets = [d for d in store.datasets() if d.role in ("eval", "test") and d.task == task]
    if student.transfer_dataset_id is not None:
        datasets.append(store.dataset_by_id(student.transfer_dataset_id))
    texts: list[str] = []
    for dataset in datasets:
        rows = ([" ".join(tokens) for tokens in load_token_rows(dataset)[0]] if dataset.task == "token"
                else load_dataset_rows(dataset)[0])
        texts.extend(rows[: PARITY_ROWS - len(texts)])
        if len(texts) >= PARITY_ROWS:
            break
    if not texts:
        raise KamalError("export needs real texts for its parity check: add data with `kamal add-data`")
    return texts


def card_fields(store, student) -> dict:
    from kamalcli.export.card import markdown_table, tasks_section
    from kamalcli.heads import heads_of_student

    teachers = markdown_table(
        ["teacher", "labels", "weights sha256"],
        [(t["name"], ", ".join(_teacher_labels(store, t)) or "-", t["fingerprint"][:16]) for t in student.teachers],
    )
    latest = store.latest_evaluations(student.id)
    if getattr(student, "task", "sequence") == "token":
        metrics = markdown_table(
            ["data", "sentences", "entity precision", "entity recall", "entity F1"],
            [(d, m["sentences"], f"{100 * m['entity_precision']:.1f}%", f"{100 * m['entity_recall']:.1f}%",
              f"{100 * m['entity_f1']:.1f}%") for d, m in latest.items()],
        ) if latest else "Not evaluated yet (`kamal eval`)."
    elif any("task" in m for m in latest.values()):
        metrics = markdown_table(
            ["data", "task", "rows", "accuracy (multi-label: micro-F1)", "macro-F1"],
            [(d, m.get("task", "-"), m["rows"], f"{100 * m.get('accuracy', m.get('micro_f1')):.1f}%",
              f"{100 * m['macro_f1']:.1f}%") for d, m in latest.items()],
        )
    else:
        metrics = markdown_table(
            ["data", "rows", "accuracy", "macro-F1"],
            [(d, m["rows"], f"{100 * m['accuracy']:.1f}%", f"{100 * m['macro_f1']:.1f}%") for d, m in latest.items()],
        ) if latest else "Not evaluated yet (`kamal eval`)."
    transfer = store.dataset_by_id(student.transfer_dataset_id) if student.transfer_dataset_id else None
    labelled = student.select_by.startswith("eval:")
    token = getattr(student, "task", "sequence") == "token"
    max_length = student.train.get("config", {}).get("max_length")
    return {
        "tasks_section": tasks_section(heads_of_student(student)),
        "name": student.name,
        "pipeline_task": "token-classification" if token else "text-classification",
        "usage_arguments": ('aggregation_strategy="simple"' if token else
                            f"top_k=3, truncation=True, max_length={max_length}"),
        "check_reference": ("the student's own probability of every sub-token's top tag" if token
                            else "kamal's own predictions"),
        "method": student.method,
        "options": ", ".join(f"{k}={v}" for k, v in sorted(student.options.items())) or "defaults",
        "base": _base_for_people(kamal_json(Path(student.path)).get("base") or student.base),
        "seed": student.seed,
        "teachers_table": teachers,
        "num_teachers": len(student.teachers),
        "metrics_table": metrics,
        "transfer_data": f"{transfer.name} ({transfer.num_rows} rows, sha256 {transfer.content_hash[:16]})" if transfer else "-",
        "lineage": f"extends {student.parent}" if student.parent else "first version",
        "select_by": student.select_by + (" (labelled data)" if labelled else " (label-free)"),
        "select_by_note": f" (but the best checkpoint was chosen on the labels of {student.select_by[5:]})" if labelled else "",
        "max_length": max_length,
        "hub_metadata": hub_metadata(store, student, latest, transfer.name if transfer else None),
        "trust_section": trust_section(student),
        "scope_note": " (its scope score flags such text: see above)" if student.scope else "",
    }


SCORE_WORDS = {
    "rmd": "minus the relative Mahalanobis distance (Ren et al. 2021) of the last layer's first-token vector "
           "(the ONNX model's `features` output; `hidden_states[-1][:, 0]` in transformers) to Gaussians fitted on "
           "the rows it puts in each class, the background one on all rows (their arrays are in scope.npz too)",
    "energy": "the log-sum-exp of the logits",
    "msp": "the largest softmax probability",
}


def trust_section(student) -> str:
    """What the student says about itself (kamalcli/trust), and the files an export carries for it."""
    lines = []
    for task, s in student.by_task("scope").items():
        score = SCORE_WORDS.get(s["score"], s["score"])
        if task is None:
            lines.append(f"- Out of scope: a text whose scope score is below {s['threshold']:.6g} is likely outside "
                         f"what the teachers knew (that threshold keeps {100 * s['keep']:.0f}% of the {s['rows']} rows "
                         f"of {s['data']} it was fitted on). The score is {score}. `scope.npz` holds it (`settings`, "
                         "JSON); `kamal predict --json` gives `in_scope` and `scope_score`.")
        else:
            lines.append(f"- Out of scope of task {task} (`scope-tasks.npz`, settings and arrays per task in order): a "
                         f"text whose score on the task's columns is below {s['threshold']:.6g} is likely outside what "
                         f"its teachers knew (it keeps {100 * s['keep']:.0f}% of the {s['rows']} rows of {s['data']}). "
                         f"The score is {score}.")
    for task, c in student.by_task("calibration").items():
        at_least = max(0.0, 1 - c["threshold"])
        if task is None:
            lines.append(f"- Prediction sets (split conformal, `calibration.json`): a label is in the set when its "
                         f"probability is at least {at_least:.6g}; the set holds the true label with probability "
                         f"{c['coverage']:g}, calibrated on {c['rows']} labelled rows of {c['data']}.")
        else:
            lines.append(f"- Prediction sets of task {task} (split conformal, `calibration-tasks.json`): a label of the "
                         f"task is in the set when its probability is at least {at_least:.6g}; the set holds the true "
                         f"label with probability {c['coverage']:g}, calibrated on {c['rows']} labelled rows of "
                         f"{c['data']}.")
    return "## Scope and prediction sets\n\n" + "\n".join(lines) if lines else ""


def _base_for_people(base: str) -> str:
    """A named base or hub id as it is; a local folder by its name only (a card gets published)."""
    if os.sep in base and Path(base).expanduser().exists():
        return f"{Path(base).name} (a local folder)"
    return base


def hub_metadata(store, student, latest: dict[str, dict], transfer: str | None) -> dict:
    """What the Hub reads from a card: base_model, license (when the base declares one), datasets, model-index."""
    from kamalcli.models.bases import hub_id_of

    root = student  # an extended student's base is its first ancestor's
    while root.parent and (parent := store.find_student(root.parent)) is not None and parent.id != root.id:
        root = parent
    meta: dict = {}
    hub_id = hub_id_of(kamal_json(Path(root.path)).get("base"))
    if hub_id:
        meta["base_model"] = hub_id
    license_id = declared_license(Path(root.base))
    if license_id:
        meta["license"] = license_id
    datasets = list(dict.fromkeys(([transfer] if transfer else []) + list(latest)))
    if datasets:
        meta["datasets"] = datasets
    token = getattr(student, "task", "sequence") == "token"
    task = ({"type": "token-classification", "name": "Token Classification"} if token
            else {"type": "text-classification", "name": "Text Classification"})
    results = [{
        "task": task,
        "dataset": {"name": data, "type": data},
        "metrics": [m for m in (
            {"type": "accuracy", "value": round(metrics["accuracy"], 4), "name": "Accuracy"}
            if metrics.get("accuracy") is not None else None,
            {"type": "f1", "value": round(metrics["macro_f1"], 4), "name": "Macro F1", "args": {"average": "macro"}}
            if metrics.get("macro_f1") is not None else None,
            {"type": "f1", "value": round(metrics["entity_f1"], 4), "name": "Entity F1 (seqeval)"}
            if metrics.get("entity_f1") is not None else None,
        ) if m],
    } for data, metrics in latest.items()]
    results = [r for r in results if r["metrics"]]
    if results:
        meta["model-index"] = [{"name": student.name, "results": results}]
    return meta


def declared_license(folder: Path) -> str | None:
    """The `license:` of a model folder's README.md front matter, if it has one."""
    import yaml

    try:
        text = (folder / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("---"):
        return None
    block = text[3:].split("\n---", 1)[0]
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError:
        return None
    value = data.get("license") if isinstance(data, dict) else None
    return str(value) if isinstance(value, (str, int)) and str(value).strip() else None


def _teacher_labels(store, teacher_row: dict) -> list[str]:
    found = store.find_teacher(name=teacher_row["name"])
    return list(found.labels) if found and found.fingerprint == teacher_row["fingerprint"] else []


def export_folder(workspace, out: str | None, default_name: str) -> Path:
    """Where an export goes: --out as given, else default_name among the workspace's exports. An empty --out
    (a variable that was not set) is refused, not taken for the default."""
    if out is None:
        return workspace.artifact_dir("exports") / default_name
    if not out.strip():
        raise KamalError("--out is empty: give the folder to export into, or leave --out off for the default "
                         f"(exports/{default_name} in the workspace)")
    return Path(out).expanduser().resolve()


def check_target(workspace, store, target: Path, force: bool) -> None:
    """An export folder may replace (with --force) only a previous kamal export: never the workspace,
    a folder holding it, its state, or a folder with anything else in it."""
    from kamalcli.export.hf import has_marker
    from kamalcli.export.onnx import EXPORT_MARKER

    root, state = workspace.root.resolve(), workspace.state_dir.resolve()
    target = target.resolve()
    store.claim("export folder", str(target), exclusive=True)  # a second export into this folder is refused
    if target == root or target in root.parents:
        raise KamalError(f"--out {target} would replace the workspace {root}; choose a folder of the export's own")
    exports = workspace.artifact_dir("exports").resolve()
    if (target == state or state in target.parents) and target.parent != exports:
        raise KamalError(f"--out {target} is inside the workspace's state ({state}); choose another folder")
    if not target.exists():
        return
    if not force:
        raise KamalError(f"{target} already exists (use --force to replace a previous export)")
    if not target.is_dir():
        raise KamalError(f"{target} is a file, not a previous export; choose another --out")
    recorded = any(Path(e.path).resolve() == target for e in store.exports())  # exports made before the marker
    if not ((target / EXPORT_MARKER).is_file() or has_marker(target) or recorded or not any(target.iterdir())):
        raise KamalError(f"{target} is not a previous kamal export (it has no {EXPORT_MARKER}); --force replaces "
                         "only those: choose another --out")
    foreign = foreign_entries(target)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise KamalError(f"{target} holds what no kamal export wrote ({shown}); --force replaces only an export's "
                         "own files: move those or choose another --out")


def foreign_entries(folder: Path) -> list[str]:
    """What a previous export's folder holds that the export did not write: names outside its marker's list of
    files (a marker from before the list: outside every file an export writes), and any folder or link."""
    from kamalcli.export import hf, onnx

    allowed = _listed_files(folder) or (onnx.WRITTEN_FILES | hf.WRITTEN_FILES)
    return sorted(p.name for p in folder.iterdir() if p.name not in allowed or p.is_symlink() or not p.is_file())


def _listed_files(folder: Path) -> frozenset[str] | None:
    """The files an export recorded writing (.kamal-export, or an --hf export's export.json); None if neither
    lists them."""
    from kamalcli.export.hf import MARKER
    from kamalcli.export.onnx import EXPORT_MARKER

    for marker in (EXPORT_MARKER, MARKER):
        try:
            files = json.loads((folder / marker).read_text(encoding="utf-8")).get("files")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(files, list) and all(isinstance(name, str) for name in files):
            return frozenset(files) | {marker}
    return None


def export_student(workspace, store, student, *, quantize: str | None, out: str | None, force: bool,
                   opset: int = 17):
    """Returns (export record, ExportResult)."""
    from kamalcli.export.onnx import export_onnx
    from kamalcli.workspace.runs import recorded_run

    folder = student.folder
    target = export_folder(workspace, out, student.name + (f"-{quantize}" if quantize else ""))
    check_target(workspace, store, target, force)
    parent = target.parent
    ensure_writable_dir(parent)
    texts = parity_texts(store, student)
    params = {"student": student.name, "quantize": quantize, "out": str(target), "opset": opset}
    with recorded_run(store, "export", student.name, params) as run:
        result = export_onnx(folder, target, quantize=quantize, parity_texts=texts, opset=opset,
                             card_fields=card_fields(store, student), overwrite=force,
                             before_publish=lambda: check_target(workspace, store, target, force))
        record = store.add_export(student_id=student.id, path=str(target), quantize=quantize, opset=opset,
                                  parity=result.parity, size_bytes=result.size_bytes)
        run.result = {"path": str(target), "size_bytes": result.size_bytes, "parity": result.parity,
                      "fused_ops": result.fused_op_counts, "warnings": result.warnings, "notes": result.notes}
    return record, result


def export_hf(workspace, store, student, *, out: str | None, force: bool) :
    """The student as a Hugging Face folder, checked through transformers.pipeline."""
    from kamalcli.export.hf import CHECK_ROWS, write_hf_folder
    from kamalcli.workspace.runs import recorded_run

    folder = student.folder
    target = export_folder(workspace, out, f"{student.name}-hf")
    check_target(workspace, store, target, force)
    ensure_writable_dir(target.parent)
    texts = parity_texts(store, student)[:CHECK_ROWS]
    fields = card_fields(store, student)
    params = {"student": student.name, "format": "hf", "out": str(target)}
    with recorded_run(store, "export", student.name, params) as run:
        staging = target.parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with removed_on_failure(staging):
            result = write_hf_folder(staging, folder, student, texts, fields)
            check_target(workspace, store, target, force)  # it may have appeared while we worked
            publish_dir(staging, target)
        result.path = target
        run.result = result.as_json()
    return result
