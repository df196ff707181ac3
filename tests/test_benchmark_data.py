"""The benchmark data ships with kamal: a fresh clone can rerun every scenario."""

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_topics10_is_in_the_repository_and_is_the_default():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from common import DEFAULT_DATA, HALF_A, HALF_B, load_split
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert DEFAULT_DATA == ROOT / "benchmarks" / "data" / "debian-topics"
    sizes = {split: len(load_split(DEFAULT_DATA, split)) for split in ("train", "dev", "test")}
    assert sizes == {"train": 5437, "dev": 736, "test": 1602}  # the counts in its README
    train = load_split(DEFAULT_DATA, "train")
    assert set(Counter(r["label"] for r in train)) == set(HALF_A + HALF_B)
    assert {"text", "label", "package", "source"} <= set(train[0])
    shipped = sum(p.stat().st_size for p in (DEFAULT_DATA / "topics10").iterdir())
    assert shipped < 3_000_000
    assert "Licence" in (DEFAULT_DATA / "README.md").read_text()


def test_nothing_points_outside_the_repository_for_data():
    docs = sorted((ROOT / "docs").glob("*.md"))
    assert ROOT / "docs" / "benchmarks.md" in docs  # the benchmark narrative and its tables live there
    for path in [*(ROOT / "benchmarks").glob("*.py"), ROOT / "README.md", ROOT / "CONTRIBUTING.md", *docs]:
        assert "shared/data" not in path.read_text(), path


def test_the_realistic_transfer_rows_are_none_of_the_teachers_rows():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from common import PROFILES, Bench
        from default_student import pool_rows, teacher_rows
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for profile in ("quick", "full"):
        bench = Bench("default-student", PROFILES[profile])
        taught = {r["text"] for r in teacher_rows(bench)}
        pool = pool_rows(bench)
        assert pool and not taught & {r["text"] for r in pool}
    quick = Bench("default-student", PROFILES["quick"])
    assert len(teacher_rows(quick)) == len(pool_rows(quick)) == 2000  # the same size under both protocols


def test_a_run_keeps_the_stored_protocols_and_seeds_it_did_not_run():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from default_student import with_stored_figures
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def row(accuracies, steps):
        return {"accuracy": {"values": accuracies}, "per_test": {"zh": {"values": [a - 0.1 for a in accuracies]}},
                "best_step": steps}

    stored = {"protocols": ["muki", "realistic"], "seeds": [1], "student_lr": [3e-4],
              "students": {"muki": {"default": row([0.70], [400])}, "realistic": {"default": row([0.60], [200])}},
              "supervised": {"muki": row([0.80], [None]), "realistic": row([0.75], [None])}}
    rerun = {"protocols": ["realistic"], "seeds": [1, 2], "student_lr": [1e-4],
             "students": {"realistic": {"default": row([0.62, 0.66], [300, 500])}},
             "supervised": {"realistic": row([0.76, 0.78], [None, None])}}
    merged = with_stored_figures(rerun, stored)
    assert merged["protocols"] == ["muki", "realistic"]
    assert merged["seeds_by_protocol"] == {"muki": [1], "realistic": [1, 2]}
    assert merged["students"]["muki"] == stored["students"]["muki"]  # not run: kept as stored
    assert merged["students"]["realistic"]["default"]["accuracy"]["values"] == [0.62, 0.66]  # seed 1 rerun: replaced
    assert merged["student_lr"] == [1e-4, 3e-4]

    seed_2 = {"protocols": ["muki"], "seeds": [2], "student_lr": [3e-4],
              "students": {"muki": {"default": row([0.74], [600])}}, "supervised": {"muki": row([0.84], [None])}}
    again = with_stored_figures(seed_2, merged)
    assert again["seeds_by_protocol"] == {"muki": [1, 2], "realistic": [1, 2]}
    default = again["students"]["muki"]["default"]
    assert default["accuracy"]["values"] == [0.70, 0.74] and abs(default["accuracy"]["mean"] - 0.72) < 1e-12
    assert abs(default["accuracy"]["std"] - 0.028284271247461905) < 1e-12  # stdev of 0.70 and 0.74
    assert [round(v, 2) for v in default["per_test"]["zh"]["values"]] == [0.60, 0.64]
    assert default["best_step"] == [400, 600]
    assert again["supervised"]["muki"]["accuracy"]["values"] == [0.80, 0.84]
    assert again["students"]["realistic"] == merged["students"]["realistic"]

    other_rows = {**seed_2, "students": {"muki": {"default": row([0.74], [600]), "new row": row([0.5], [100])}}}
    assert with_stored_figures(other_rows, merged)["seeds_by_protocol"]["muki"] == [2]  # rows changed: the run alone
    assert with_stored_figures(stored, {}) is stored  # nothing stored: the run as it is


def test_every_benchmark_script_loads():
    """Each script's imports resolve (benchmarks/scope.py imported a helper a refactor had moved, unnoticed for days):
    its top level runs, without its main, in one process, with benchmarks/ on the path as when run.py runs it."""
    import subprocess

    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert 2 < len(scripts) <= 12  # a bench, not a notebook: one-off experiments live in git's history
    # 3,800 until issue 65's SetFit peer: a peer the issue names, not an experiment
    assert sum(len(p.read_text().splitlines()) for p in scripts) <= 3830, "benchmarks/*.py: at most 3,830 lines"
    code = ("import runpy, sys\n"
            "sys.path.insert(0, sys.argv[1].rsplit('/', 1)[0])  # as `python benchmarks/run.py` has it\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        runpy.run_path(path, run_name='loaded_by_test')\n"
            "    except Exception as e:\n"
            "        print(f'{path}: {type(e).__name__}: {e}')\n")
    done = subprocess.run([sys.executable, "-c", code, *map(str, scripts)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "", done.stdout


def test_every_suite_and_benchmark_path_the_docs_name_exists():
    """`python benchmarks/run.py SUITE` names a suite, and every benchmarks/ file the docs name is there (a removed
    script is named as git keeps it, `git show COMMIT:benchmarks/X.py`); each tool suite answers --help."""
    import re
    import subprocess

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    suites = {*run.scenarios(), *run.TOOLS, "all", "docs", "readme"}
    for name, (module, function) in run.TOOLS.items():
        assert callable(getattr(__import__(module), function)), name
    for path in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for suite in re.findall(r"benchmarks/run\.py ([a-z][\w-]*)", text):
            assert suite in suites, f"{path.name}: run.py {suite}"
        for named in re.findall(r"(?<![:\w/.-])benchmarks/[\w./-]+", text):
            named = named.rstrip(".,")
            if named.startswith("benchmarks/work") or re.search(r"[A-Z]{4,}", named):
                continue  # made by a run, not kept; or a pattern (benchmarks/results/SCENARIO-PROFILE.md)
            assert (ROOT / named).exists(), f"{path.name}: {named}"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "cross-lingual-peers", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--reuse" in done.stdout, done.stderr[-2000:]


def test_docs_blocks_take_a_profile_result_or_a_plain_one(tmp_path, monkeypatch):
    """`run.py docs` fills <!-- bench:NAME --> from results/NAME-full.md, else NAME-quick.md, else NAME.md, else the
    one NAME-*.md; a block with no results file, or several NAME-*.md, is left as it is."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    results = tmp_path / "results"
    results.mkdir()
    (results / "a-quick.md").write_text("quick a\n")
    (results / "a-full.md").write_text("full a\n")
    (results / "b-quick.md").write_text("quick b\n")
    (results / "row-weights.md").write_text("| plain |\n")
    (results / "distributed-speed-dist1000.md").write_text("one\n")
    (results / "gpu-figures-h100.md").write_text("h100\n")
    (results / "gpu-figures-h200.md").write_text("h200\n")
    monkeypatch.setattr(run, "RESULTS", results)
    doc = tmp_path / "doc.md"
    blocks = ["a", "b", "row-weights", "distributed-speed", "gpu-figures", "gpu-figures-h200", "none"]
    doc.write_text("".join(f"<!-- bench:{n} -->\nold\n<!-- /bench:{n} -->\n" for n in blocks))
    assert run.update_docs(doc) == ["gpu-figures", "none"]  # two gpu-figures-*.md: the block must name one
    bodies = ["full a", "quick b", "| plain |", "one", "old", "h200", "old"]
    assert doc.read_text() == "".join(f"<!-- bench:{n} -->\n{b}\n<!-- /bench:{n} -->\n" for n, b in zip(blocks, bodies))


def test_cross_lingual_peers_reads_the_work_folder_only_after_choosing_the_build():
    """common fixes its work folder from KAMAL_BENCH_WORK when imported; cross-lingual-peers points that variable at
    the build's folder before importing it. Imported at the top, it trained in the work root instead (it did once).
    run.py imports a tool suite's module only, so nothing imports common before the suite chooses."""
    import subprocess

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import run, cross_lingual_builds\n"
            "print(sorted({'common', 'default_student', 'cross_lingual'} & set(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_cross_lingual_peers_merges_rows_by_build_and_keeps_a_rebuilt_build_apart(tmp_path, monkeypatch):
    """A build's folder holds only the rows trained there: the render keeps every stored row and adds or replaces the
    folder's rows in the run of the same build. The same teacher seed made again in a fresh folder trained other
    teachers once, so a build is its seed and its teachers' fingerprint, and a stored run of another build (here the
    one stored before fingerprints) stays a column of its own."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import cross_lingual_builds as builds

    stored = {"date": "2026-11-28", "runs": [
        {"teacher_seed": 2, "protocol": "muki", "seed": 1, "rows": {"default": {"student": "old-build"}}},
        {"teacher_seed": 2, "teachers": "bb7f4a44", "protocol": "muki", "seed": 1,
         "rows": {"default": {"student": "stored-default"}, "uhc": {"student": "stored-uhc"}}},
        {"teacher_seed": 3, "protocol": "muki", "seed": 1, "rows": {"default": {"student": "other-seed"}}}]}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / f"{builds.PEERS_STEM}.json").write_text(json.dumps(stored))
    build = tmp_path / "builds" / "teacher-seed-2"
    weights = build / "quick-cross-lingual" / ".kamal" / "artifacts" / "teachers" / "en"
    weights.mkdir(parents=True)
    (weights / "model.safetensors").write_bytes(b"x")
    assert builds.teachers_fingerprint(build) == "bb7f4a44"  # sha256(b"en" + sha256(b"x")), first 8 hex digits
    (build / "peers-muki-s1.json").write_text(json.dumps(
        {"teacher_seed": 2, "protocol": "muki", "seed": 1, "rows": {"init-merge": {"student": "new-merge"},
                                                                    "uhc": {"student": "new-uhc"}}}))
    (build / "peers-realistic-s2.json").write_text(json.dumps(
        {"teacher_seed": 2, "protocol": "realistic", "seed": 2, "rows": {"default": {"student": "new-seed"}}}))
    monkeypatch.setattr(builds, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(builds, "BUILDS", tmp_path / "builds")

    runs = {builds.run_key(r): {k: v["student"] for k, v in r["rows"].items()} for r in builds.merged_runs()}
    assert runs == {(2, "", "muki", 1): {"default": "old-build"},
                    (2, "bb7f4a44", "muki", 1): {"default": "stored-default", "uhc": "new-uhc",
                                                 "init-merge": "new-merge"},
                    (2, "bb7f4a44", "realistic", 2): {"default": "new-seed"},
                    (3, "", "muki", 1): {"default": "other-seed"}}
    assert builds.build_label({"teacher_seed": 2, "teachers": "bb7f4a44"}) == "2, teachers bb7f4a44"
    assert builds.build_label({"teacher_seed": 2}) == "2"


def test_the_ablation_keeps_an_auto_only_where_it_helps_on_the_confirm_mean_and_costs_a_point_nowhere():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from default_student import ABLATIONS, SETTINGS, ablation_table
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    tune, first, second = [t for t in SETTINGS if t.startswith(("sentiment", "genre", "intent"))]
    figures = lambda accuracy: {"accuracy": accuracy, "macro_f1": accuracy}  # noqa: E731
    one = lambda: {"default": figures(0.70), **{a: figures(0.70) for a in ABLATIONS}}  # noqa: E731
    stored = {title: {"role": "tune" if title == tune else "confirm", "seeds": {"1": one()}} for title in (tune, first, second)}
    seed = lambda title: stored[title]["seeds"]["1"]  # noqa: E731
    seed(first)["prior=none"], seed(second)["prior=none"] = figures(0.60), figures(0.66)  # the auto helps twice
    seed(first)["smooth=0"], seed(second)["smooth=0"] = figures(0.60), figures(0.715)  # helps on the mean, costs 1.5
    seed(tune)["commit=1"] = figures(0.50)  # helps only where rules were chosen: no evidence
    rows = {line.split(" | ")[0].strip("| "): line for line in ablation_table(stored).splitlines()}
    assert rows["prior=none"].endswith("| -10.0 | -4.0 | -7.0 | keep |")
    assert rows["smooth=0"].endswith("| -10.0 | +1.5 | -4.2 | drop |")
    assert rows["commit=1"].endswith("| -20.0 | +0.0 | +0.0 | +0.0 | drop |")
    stored[second]["seeds"]["2"] = {**one(), "smooth=0": figures(0.665)}  # a second seed: each setting's mean over seeds
    rows = {line.split(" | ")[0].strip("| "): line for line in ablation_table(stored).splitlines()}
    assert rows["smooth=0"].endswith("| -10.0 | -1.0 | -5.5 | keep |")
    assert "seeds 1,2" in ablation_table(stored).splitlines()[2]


def test_the_gold_table_reads_each_cell_as_the_mean_over_the_seeds_that_have_it():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from default_student import SETTINGS, gold_table
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    title = next(t for t in SETTINGS if t.startswith("intent"))
    cell = lambda accuracy: {"accuracy": accuracy, "macro_f1": accuracy / 2}  # noqa: E731
    first = {"no labels": cell(0.80), "rows": {"random-100": {"kamal": cell(0.90), "rmd_fit": cell(0.70), "setfit": cell(0.60)},
                                               "random-25": {"kamal": cell(0.85), "teachers_target": cell(0.83),
                                                             "logistic": cell(0.50)}}}
    second = {"no labels": cell(0.84), "all": cell(0.97), "rows": {"random-100": {"kamal": cell(0.94), "rmd_fit": None},
                                                                  "random-50": {"kamal": cell(0.88)}}}
    rows = gold_table({title: {"role": "confirm", "seeds": {"1": first, "2": second}}}).splitlines()
    assert "(confirm; seeds 1,2)" in rows[2]
    assert rows[4] == "| kamal's default, no labels | 82.0 / 41.0 |"
    assert rows[5].endswith("| 92.0 / 46.0 |")  # both draws
    assert rows[6].startswith("| ... the teachers' target") and rows[6].endswith("| - |")  # no seed has it at 100 rows
    assert rows[7].endswith("| 70.0 / 35.0 |")  # the one seed that has it
    assert rows[8].endswith("| - |")            # no seed has the peer
    assert rows[9].startswith("| the peer on the same rows: SetFit") and rows[9].endswith("| 60.0 / 30.0 |")
    curve = {line.split(" | ")[0].strip("| "): line for line in rows if line.startswith("| intent")}  # 0, 25, 50, 100, 200 rows
    assert "| gold rows | 0 | 25 | 50 | 100 | 200 | all |" in rows
    assert curve["intent: kamal, random rows"].endswith("| 82.0 | 85.0 | 88.0 | 92.0 | - | - |")  # 0: no labels; 25, 50: one seed
    assert curve["intent: logistic peer, random rows"].endswith("| - | 50.0 | - | - | - | 97.0 |")  # all: every pool row
    assert curve["intent: kamal, the teachers' target, random rows"].endswith("| 82.0 | 83.0 | - | - | - | - |")
    assert "intent: kamal, disagree rows" not in curve  # a row no seed has a figure for


def test_a_peer_is_scored_on_every_test_row_a_class_its_rows_lack_counting_wrong():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from default_student import _peer_cells
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    tests = [{"label": label} for label in ("a", "b", "c", "a")]
    cells = _peer_cells(["a", "b", "a", "b"], ["a", "b"], tests)  # c: no gold row had it
    assert cells["accuracy"] == 0.5


def test_a_student_trained_with_the_same_fingerprint_stands_for_a_new_name(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from common import DEFAULT_DATA, FINGERPRINTS, PROFILES, Bench
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    class FakeWorkspace:  # `amalgamate --dry-run`'s fingerprint: the options asked for
        root, students, trained = tmp_path, set(), []

        def has_student(self, name):
            return name in self.students

        def json(self, *args):
            return {"fingerprint": "+".join(a for a in args if "=" in a)}

        def __call__(self, *args, quiet=False):
            self.trained.append(args[args.index("--name") + 1])
            self.students.add(self.trained[-1])

    bench, ws = Bench("test", PROFILES["quick"], DEFAULT_DATA, [1]), FakeWorkspace()
    assert bench.train_student(ws, "ablate-commit-1", "muki-hard", ["a", "b"], 1, ("commit=1",)) == "ablate-commit-1-s1"
    assert bench.train_student(ws, "default-new-rule", "muki-hard", ["a", "b"], 1, ("commit=1",)) == "ablate-commit-1-s1"
    assert bench.train_student(ws, "ablate-commit-0", "muki-hard", ["a", "b"], 1, ("commit=0",)) == "ablate-commit-0-s1"
    assert ws.trained == ["ablate-commit-1-s1", "ablate-commit-0-s1"]  # the second request trained nothing
    assert json.loads((tmp_path / FINGERPRINTS).read_text()) == {"commit=1": "ablate-commit-1-s1", "commit=0": "ablate-commit-0-s1"}
    ws.students.add("trained-before-s1")  # a student from before fingerprints were kept: kept when first asked for
    assert bench.train_student(ws, "trained-before", "muki-hard", ["a", "b"], 1, ("prior=none",)) == "trained-before-s1"
    assert bench.train_student(ws, "ablate-prior-none", "muki-hard", ["a", "b"], 1, ("prior=none",)) == "trained-before-s1"
    assert ws.trained == ["ablate-commit-1-s1", "ablate-commit-0-s1"]
    ws.students.discard("ablate-commit-0-s1")  # removed by hand, then trained again under a rule that moves its target
    assert bench.train_student(ws, "ablate-commit-0", "muki-hard", ["a", "b"], 1, ("commit=0", "refit=none")) == "ablate-commit-0-s1"
    known = json.loads((tmp_path / FINGERPRINTS).read_text())
    assert "commit=0" not in known and known["commit=0+refit=none"] == "ablate-commit-0-s1"  # its old fingerprint points nowhere
