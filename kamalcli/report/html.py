"""The report as one self-contained HTML file: templates/report.html filled with tables and inline SVG."""

from __future__ import annotations

import string
from html import escape
from importlib import resources

from kamalcli import __version__
from kamalcli.report import svg
from kamalcli.report.gather import Report, StudentView

SCORE_NOTES = {
    "mc-dropout": "1 - normalised entropy of the MC-dropout mean",
    "entropy": "1 - normalised entropy",
    "max-prob": "largest probability",
    "rmd": "minus the relative Mahalanobis distance",
}


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _f3(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _table(headers, rows, *, numeric_from: int = 1, best_row: int | None = None) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = "".join(f'<td class="num">{escape(str(c))}</td>' if j >= numeric_from else f"<td>{escape(str(c))}</td>"
                        for j, c in enumerate(row))
        body.append(f'<tr class="best">{cells}</tr>' if i == best_row else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(anchor: str, title: str, intro: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{escape(title)}</h2><p class="note">{intro}</p>{body}</section>'


def _missing(text: str) -> str:
    return f'<p class="missing">{escape(text)}</p>'


# -- teachers ---------------------------------------------------------------------

def teachers_section(report: Report) -> str:
    if not report.teachers:
        return _missing("No teachers yet (kamal add-teacher FOLDER).")
    return _table(["teacher", "labels", "origin", "layers"],
                  [(t["name"], ", ".join(t["labels"]), t["origin"], t["layers"] or "-") for t in report.teachers],
                  numeric_from=3)


def distributions_section(report: Report) -> str:
    if not report.probes:
        why = "No probe on labelled data yet: `kamal add-data FILE --role eval` then `kamal probe`."
        if report.unlabelled:
            why += f" (Probed without gold labels: {', '.join(report.unlabelled)}.)"
        return _missing(why)
    out = []
    for p in report.probes:
        charts = [svg.distribution_chart(d.inside, d.outside, title=d.score,
                                         note="AUROC " + ("-" if d.auroc is None else f"{d.auroc:.3f}"))
                  for d in p.distributions]
        out.append(f'<div class="row-name">{escape(p.teacher)} on {escape(p.data)} '
                   f'<span class="note">(K = {p.mc_samples}; {p.in_rows} rows of its own labels, '
                   f'{p.out_rows} of others)</span></div><div class="grid">{"".join(charts)}</div>')
    return "".join(out)


def calibration_section(report: Report) -> str:
    if not report.probes:
        return _missing("Needs a probe on labelled data (see above).")
    rows, charts = [], []
    for p in report.probes:
        s = p.summary
        rows.append((p.teacher, p.data, _pct(s.get("accuracy_in")), _f3(s.get("ece_in")), _f3(s.get("mc_ece_in")),
                     _f3(s.get("ece_out")), _f3(s.get("mc_ece_out"))))
        pair = [svg.reliability_chart(r.confidence, r.accuracy, r.counts, title=r.kind,
                                      note="ECE " + _f3(r.ece), colour=svg.PLAIN if r.kind == "plain" else svg.MC)
                for r in p.reliability]
        charts.append(f'<div><div class="row-name">{escape(p.teacher)} on {escape(p.data)}</div>'
                      f'<div class="grid">{"".join(pair)}</div></div>')
    table = _table(["teacher", "data", "accuracy in %", "ECE in", "ECE in MC", "ECE out", "ECE out MC"], rows,
                   numeric_from=2)
    return table + f'<div class="grid">{"".join(charts)}</div>'


def _recipe_table(recipe) -> str:
    """A recipe's decisions (kamalcli/recipe/recipe.py) as a table: decision, value, reason."""
    return _table(["decision", "value", "reason"], recipe.rows(), numeric_from=3)


def selection_section(report: Report) -> str:
    if not report.selection:
        return _missing("No selection measured yet: `kamal probe` with a labelled dataset and two teachers or more.")
    from kamalcli.probe.service import generated_against_real, generated_against_real_line, selection_groups
    from kamalcli.recipe.recipe import Recipe, unread_sentence

    out = []
    for data, names, rows, best in selection_groups(report.selection):
        kind = ", text kamal generated" if rows[0].get("generated") else ""
        out.append(f"<h3>{escape(data)} ({escape(', '.join(names))}{kind})</h3>")
        out.append(_table(["score", "selects the right teacher %", "balanced over teachers %", "AUROC right vs wrong",
                           "hard target right %", "rows"],
                          [(r["score"], _pct(r["accuracy"]), _pct(r.get("balanced")), _f3(r["auroc"]),
                            _pct(r["target_accuracy"]), r["rows"]) for r in rows],
                          best_row=rows.index(best) if best else None))
        if best:
            balanced = (f", balanced over teachers {_pct(best['balanced'])}%" if best.get("balanced") is not None
                        else "")
            out.append(f'<p class="note">{escape(best["score"])} selects the right teacher most often '
                       f'({_pct(best["accuracy"])}% of {best["rows"]:,} rows{balanced}).</p>')
    out.extend(f'<p class="note">{escape(generated_against_real_line(check))}</p>'
               for check in generated_against_real(report.selection))
    for entry in report.recipes:  # what the next amalgamate of the default student decides, by the same call
        recipe = Recipe.from_json(entry["recipe"])
        out.append(f"<h3>The next muki-hard student of {escape(', '.join(entry['teachers']))} decides</h3>")
        out.append(_recipe_table(recipe))
        evidence = recipe.lines() + ([unread_sentence(entry["unread"])] if entry.get("unread") else [])
        out.extend(f'<p class="note">{escape(line)}</p>' for line in evidence)
    return "".join(out)


# -- students -----------------------------------------------------------------------

def _training_chart(s: StudentView) -> str:
    train = s.train or {}
    selected_by = train.get("selected_by") or ""
    held_out = []
    for h in train.get("history") or []:
        value = next((v for k, v in h.items() if k != "step"), None)
        if value is not None:
            held_out.append((h["step"], value))
    if not s.losses and not held_out:
        return _missing("Training curve: not recorded (trained before kamal kept the loss per step).")
    name = f"held-out {selected_by}" if selected_by and selected_by != "last step" else "held-out metric"
    chart = svg.loss_chart(s.losses, held_out, best_step=train.get("best_step"), held_out_name=name,
                           title="Training curve")
    note = "" if s.losses else _missing("Loss per step: not recorded (trained before kamal kept it).")
    return chart + note


def _evaluation(data: str, m: dict) -> str:
    if "entity_f1" in m:  # a token student: entity-level figures per type
        head = (f'<div class="row-name">on {escape(data)}: entity F1 {_pct(m["entity_f1"])}% (precision '
                f'{_pct(m["entity_precision"])}%, recall {_pct(m["entity_recall"])}%; {m["entities"]} entities)</div>')
        per_type = [(kind, v["f1"]) for kind, v in m["per_type"].items()]
        return head + f'<div class="grid">{svg.bar_chart(per_type, title="Entity F1 per type (%)")}</div>'
    labels = m.get("labels") or list((m.get("per_class") or {}).keys())
    head = (f'<div class="row-name">on {escape(data)}: accuracy {_pct(m.get("accuracy"))}%, '
            f'macro-F1 {_pct(m.get("macro_f1"))}% ({m.get("rows")} rows)</div>')
    parts = []
    if m.get("confusion") and labels:
        parts.append(svg.confusion_chart(m["confusion"], labels, title="Confusion matrix"))
    if m.get("per_class"):
        per_class = m["per_class"]
        order = [name for name in labels if name in per_class] or list(per_class)
        parts.append(svg.bar_chart([(name, per_class[name]["f1"]) for name in order], title="F1 per class (%)"))
    extra = [f"{label} {_pct(m[key])}%" for key, label in (("old_label_accuracy", "old labels"),
                                                          ("new_label_accuracy", "new labels")) if key in m]
    tail = f'<p class="note">{escape("; ".join(extra))}</p>' if extra else ""
    return head + f'<div class="grid">{"".join(parts)}</div>' + tail


def decided(objective: dict) -> str:
    """The choices a student's objective recorded where its options said auto (score, commit, prior, refit,
    pick_smooth, smooth, reweight), as option=value; "" for a method that records none."""
    parts = []
    if "score" in objective:
        parts.append(f"score={objective['score']}")
    if "commit" in objective:
        parts.append(f"commit={objective['commit']:g}")
    if "prior" in objective:
        parts.append(f"prior={objective['prior']}")
    if objective.get("refit"):
        parts.append(f"refit={', '.join(objective['refit'])}")
    pick = objective.get("pick_smooth")
    if pick:
        parts.append(f"pick_smooth={pick['neighbours'] if pick['used'] else 0} (neighbours' kappa {pick['kappa']:.2f})")
    if "smooth" in objective:
        parts.append(f"smooth={objective['smooth']}")
    if "reweight" in objective:
        recorded = objective["reweight"]  # older students recorded true or false
        parts.append(f"reweight={ {True: 'margin', False: 'none'}.get(recorded, recorded)}")
    return "; ".join(parts)


def student_block(s: StudentView) -> str:
    options = ", ".join(f"{k}={v}" for k, v in sorted(s.options.items())) or "defaults"
    lines = [f"<h3>{escape(s.name)}</h3>",
             f'<p class="note">{escape(s.method)} ({escape(options)}); teachers {escape(", ".join(s.teachers))}; '
             f'{len(s.labels)} labels; model selection {escape(s.select_by)}'
             + (f"; extends {escape(s.parent)}" if s.parent else "") + "</p>"]
    recorded = (s.train or {}).get("recipe")
    if recorded:  # the recipe it trained with, as kamal amalgamate decided and printed it
        from kamalcli.recipe.recipe import Recipe

        lines.append('<p class="note">Decided before it trained:</p>')
        lines.append(_recipe_table(Recipe.from_json(recorded)))
    choices = decided(s.train.get("objective") or {})
    if choices:
        lines.append(f'<p class="note">Decided when it trained: {escape(choices)}</p>')
    lines.append(_training_chart(s))
    if s.evaluations:
        lines += [_evaluation(data, m) for data, m in s.evaluations.items()]
    else:
        lines.append(_missing(f"Not evaluated yet: kamal eval {s.name} --data NAME."))
    return f'<div class="student">{"".join(lines)}</div>'


def students_section(report: Report) -> str:
    if not report.students:
        return _missing("No students yet (kamal amalgamate --method muki-hard).")
    rows = []
    for s in report.students:
        for data, m in s.evaluations.items():
            rows.append((s.name, s.method, data, _pct(m.get("accuracy")), _pct(m.get("macro_f1")),
                         _pct(m.get("entity_f1"))))
    rows += [(f"baseline {b['baseline']}", "-", b["data"], _pct(b["accuracy"]), _pct(b["macro_f1"]),
              _pct(b.get("entity_f1"))) for b in report.baselines]
    summary = _table(["student", "method", "data", "accuracy %", "macro-F1 %", "entity F1 %"], rows,
                     numeric_from=3) if rows else ""
    return summary + "".join(student_block(s) for s in report.students)


def lineage_section(report: Report) -> str:
    children: dict[str | None, list[StudentView]] = {}
    names = {s.name for s in report.students}
    for s in report.students:
        children.setdefault(s.parent if s.parent in names else None, []).append(s)
    if not any(s.parent for s in report.students):
        return _missing("No extended students yet (kamal extend STUDENT --teacher NAME).")
    by_name = {s.name: s for s in report.students}

    def added(s: StudentView) -> str:
        parent = by_name.get(s.parent) if s.parent else None
        new = [label for label in s.labels if parent is None or label not in parent.labels]
        teachers = [t for t in s.teachers if parent is None or t not in parent.teachers]
        what = f"{len(s.labels)} labels" + (f", +{len(new)} new ({', '.join(new)})" if parent else "")
        detail = f"{s.method}; teachers {', '.join(teachers)}; {what}"
        return f'<b>{escape(s.name)}</b> <span class="note">{escape(detail)}</span>'

    def tree(parent: str | None) -> str:
        items = "".join(f"<li>{added(s)}{tree(s.name)}</li>" for s in children.get(parent, []))
        return f'<ul class="lineage">{items}</ul>' if items else ""

    return tree(None)


SECTIONS = [
    ("teachers", "Teachers", "The classifiers being merged, in the order of the union label space.", teachers_section),
    ("scores", "Which confidence score separates a teacher's own classes (MUKI's Figure 2)",
     "For each teacher and score: the distribution on rows whose gold label is the teacher's (in domain, up) "
     "and on the other rows (out of domain, down). The AUROC says how well the score alone tells them apart "
     "(1 = perfectly, 0.5 = not at all). A score that selects teachers well separates these two.", distributions_section),
    ("calibration", "Calibration (ECE)",
     "Reliability diagrams on in-domain rows: accuracy in each confidence bin against the diagonal of perfect "
     "calibration, for the plain softmax and for the Monte-Carlo-dropout mean. Out of domain every prediction "
     "is wrong, so ECE there is the mean confidence.", calibration_section),
    ("selection", "Teacher selection",
     "How often the most confident teacher owns the gold label, per score, beside the oracle.", selection_section),
    ("students", "Students",
     "Each student's training curve (the loss per step and the held-out figure used for model selection), "
     "and its latest evaluation per dataset.", students_section),
    ("lineage", "Lineage", "Students grown with `kamal extend`: each one below the student it extends.", lineage_section),
]


def render(report: Report) -> str:
    template = string.Template(resources.files("kamalcli.templates").joinpath("report.html").read_text(encoding="utf-8"))
    sections = "".join(_section(anchor, title, escape(intro), make(report)) for anchor, title, intro, make in SECTIONS)
    nav = "".join(f'<a href="#{anchor}">{escape(title.split(" (")[0])}</a>' for anchor, title, _, _ in SECTIONS)
    summary = (f"{len(report.teachers)} teachers, {len({(p.teacher, p.data) for p in report.probes})} probes on "
               f"labelled data, {len(report.students)} students.")
    return template.substitute(version=escape(__version__), workspace=escape(report.workspace), summary=escape(summary),
                               nav=nav, sections=sections)
