"""kamal amalgamate / students / runs / eval / predict on tiny trained teachers."""

import json
from pathlib import Path

import pytest
from conftest import unfolded
from safetensors.torch import load_file

TRAIN = ["--student", None, "--epochs", "4", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]


def train_args(assets):
    args = list(TRAIN)
    args[1] = str(assets["encoder"])
    return args


def test_every_output_level_method_trains_a_student(two_teachers, assets):
    for method in ("muki-hard", "muki-soft", "vanilla-kd", "uhc"):
        result = two_teachers("--verbose", "amalgamate", "--method", method, "--name", method, *train_args(assets))
        assert f"Trained student {method} ({method}) over 4 labels" in result.stdout
        # the teachers were added: without generated text, auto says how to let RMD select
        assert ("text from `kamal synthesize --prompt" in result.output) == method.startswith("muki"), result.output
    students = {s["name"]: s for s in two_teachers.json("students")}
    assert set(students) == {"muki-hard", "muki-soft", "vanilla-kd", "uhc"}
    hard = students["muki-hard"]
    assert hard["labels"] == ["world", "sports", "business", "scitech"]
    assert [t["name"] for t in hard["teachers"]] == ["news", "money"]
    assert all(len(t["fingerprint"]) == 64 and t["probe_id"] for t in hard["teachers"])
    assert hard["options"] == {"paper": False, "mc": True, "reweight": "auto", "score": "auto", "calibrate": "none",
                               "temperature": 1.0, "encoder": "minilm-l6", "refit": "none", "pick_smooth": "auto",
                               "commit": "auto", "prior": "auto", "smooth": "auto"}
    assert hard["train"]["objective"]["auto"]["score"] in ("mc-dropout", "entropy", "max-prob", "energy")
    assert hard["select_by"] == "transfer-loss" and hard["train"]["selected_by"] == "transfer-loss"
    assert hard["train"]["held_out_rows"] == 12 and hard["train"]["train_rows"] == 228
    folder = Path(hard["path"])
    config = json.loads((folder / "config.json").read_text())
    assert [config["id2label"][str(i)] for i in range(4)] == hard["labels"]
    assert (folder / "tokenizer.json").is_file() and (folder / "model.safetensors").is_file()
    assert json.loads((folder / "kamal.json").read_text())["teachers"][0]["name"] == "news"
    runs = [r for r in two_teachers.json("runs") if r["kind"] == "amalgamate"]
    assert [r["status"] for r in runs] == ["done"] * 4
    assert not any((two_teachers.workspace / ".kamal" / "artifacts" / "runs").iterdir())  # checkpoints cleared


def test_probes_run_first_when_missing_and_are_reused(two_teachers, assets):
    one_epoch = [*train_args(assets), "--epochs", "1"]  # what is probed first, not how the students learn
    result = two_teachers("amalgamate", "--method", "uhc", "--name", "u0", *one_epoch)
    assert "Probing news on pool first (logits only: uhc reads no confidences; max length 128)." in result.stderr
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "u1", *one_epoch)
    assert "Probing news on pool first (K=16, max length 128)" in result.stderr
    result = two_teachers("amalgamate", "--method", "muki-soft", "--name", "v1", *one_epoch)
    assert "first" not in result.stderr
    result = two_teachers("amalgamate", "--method", "vanilla-kd", "--name", "v2", "--mc-samples", "2", *one_epoch)
    assert "first" not in result.stderr  # any probe at this length has the logits
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "u2", "--mc-samples", "2", *one_epoch,
                          code=2)
    assert "have no K=2: pass --mc-samples" in result.stderr and "or --reprobe" in result.stderr
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "u2", "--mc-samples", "2", "--reprobe",
                          *one_epoch)
    assert "its other cached probes (K=1, max length 128; K=16, max length 128) are not used (--reprobe)" in result.stderr


def test_a_dry_run_trains_nothing_and_its_fingerprint_names_the_student_training_makes(two_teachers, assets):
    args = ["amalgamate", "--method", "muki-hard", *train_args(assets), "--epochs", "1"]
    result = two_teachers(*args, "--name", "d1", "--dry-run")
    assert "Dry run, nothing trained: d1 (muki-hard) would learn 4 labels from 240 rows of pool." in result.stdout
    assert "Target: " in result.stdout and "picks: news " in result.stdout
    assert two_teachers.json("students") == [] and not [r for r in two_teachers.json("runs") if r["kind"] == "amalgamate"]
    plan = json.loads(two_teachers(*args, "--name", "d1", "--dry-run", "--json").stdout)
    same = json.loads(two_teachers(*args, "--name", "d2", "--dry-run", "--json").stdout)
    other = json.loads(two_teachers(*args, "--name", "d3", "--lr", "1e-3", "--dry-run", "--json").stdout)
    assert plan["fingerprint"] == same["fingerprint"] != other["fingerprint"] and len(plan["fingerprint"]) == 64
    assert plan["target"]["commit"] in (0.0, 1.0) and set(plan["target"]["chosen_share"]) == {"news", "money"}
    assert plan["recipe"]["commit"]["value"] in (0.0, 1.0, None) and plan["labels"] == ["world", "sports", "business", "scitech"]
    # what the fingerprint promises: the two requests train the same weights
    for name in ("d1", "d2"):
        two_teachers(*args, "--name", name)
    folders = {s["name"]: Path(s["path"]) for s in two_teachers.json("students")}
    d1, d2 = (load_file(folders[n] / "model.safetensors") for n in ("d1", "d2"))
    assert d1.keys() == d2.keys() and all((d1[k] == d2[k]).all() for k in d1)
    assert "--json goes with --dry-run" in two_teachers("amalgamate", "--method", "muki-hard", "--json", code=2).stderr


def test_one_teacher_is_plain_distillation(two_teachers, assets):
    two_teachers("amalgamate", "--method", "vanilla-kd", "--teacher", "news", "--name", "one", *train_args(assets))
    student = next(s for s in two_teachers.json("students") if s["name"] == "one")
    assert student["labels"] == ["world", "sports"] and [t["name"] for t in student["teachers"]] == ["news"]


@pytest.mark.slow  # make test's budget: a quality check over a longer training, not logic
def test_a_good_teacher_selection_gives_a_good_student(two_teachers, assets):
    two_teachers("add-data", assets["train"], "--name", "train", "--role", "eval")
    two_teachers("probe", "--data", "pool", "--data", "test", "--rmd-fit", "train", "--mc-samples", "4")
    selection = {s["score"]: s for s in two_teachers.json("report")["selection"] if s["data"] == "test"}
    assert selection["rmd"]["accuracy"] > 0.9
    result = two_teachers("amalgamate", "--method", "muki-hard", "--option", "score=rmd", "--mc-samples", "4",
                          "--name", "good", *train_args(assets), "--epochs", "6")
    assert "first" not in result.stderr  # the probe (and its labelled RMD fit) was reused
    accuracy = two_teachers.json("eval", "good", "--data", "test")["accuracy"]
    assert accuracy > 0.8, accuracy


def test_ablations_and_eval_selection_are_recorded(two_teachers, assets):
    two_teachers("amalgamate", "--method", "muki-hard", "--option", "mc=false", "--option", "reweight=false",
                 "--name", "ablation", *train_args(assets))
    result = two_teachers("amalgamate", "--method", "muki-soft", "--select-by", "eval:test", "--name", "labelled",
                          *train_args(assets))
    assert "Model selection uses the labels of test" in result.stderr
    students = {s["name"]: s for s in two_teachers.json("students")}
    assert students["ablation"]["options"]["mc"] is False and students["ablation"]["options"]["reweight"] is False
    assert students["labelled"]["select_by"] == "eval:test"
    assert students["labelled"]["train"]["selected_by"] == "eval:test"


def test_eval_predict_and_baselines(two_teachers, assets, tmp_path):
    two_teachers("amalgamate", "--method", "vanilla-kd", "--name", "kd", *train_args(assets))
    metrics = two_teachers.json("eval", "kd", "--data", "test")
    assert set(metrics) >= {"accuracy", "macro_f1", "per_class", "confusion", "labels", "rows"}
    assert metrics["rows"] == 80 and sum(map(sum, metrics["confusion"])) == 80
    ensemble = two_teachers.json("eval", "--baseline", "ensemble", "--data", "test")
    alone = two_teachers.json("eval", "--baseline", "teacher:news", "--data", "test")
    assert alone["accuracy"] <= 0.5  # it can only ever be right on its own half
    confusion = ensemble["confusion"]
    assert ensemble["rows"] == 80 and sum(map(sum, confusion)) == 80
    assert ensemble["accuracy"] == pytest.approx(sum(confusion[i][i] for i in range(len(confusion))) / 80)
    assert ensemble["accuracy"] >= alone["accuracy"]  # both halves, each from its own teacher
    # --teacher picks the ensemble's members (a workspace may hold teachers that are not to be ensembled)
    of_both = two_teachers.json("eval", "--baseline", "ensemble", "--teacher", "news", "--teacher", "money",
                                "--data", "test")
    of_news = two_teachers.json("eval", "--baseline", "ensemble", "--teacher", "news", "--data", "test")
    assert of_both["confusion"] == confusion
    assert of_news["confusion"] == alone["confusion"]  # one member: that teacher's own argmax
    for bad, message in ((["kd", "--teacher", "news"], "a student has its own teachers"),
                         (["--baseline", "teacher:news", "--teacher", "money"], "one teacher already"),
                         (["--baseline", "ensemble", "--teacher", "nobody"], "nobody")):
        result = two_teachers("eval", *bad, "--data", "test", code=2)
        assert message in result.output and "Traceback" not in result.output
    evaluated = {s["name"]: s for s in two_teachers.json("students")}["kd"]["evaluations"]
    assert evaluated[0]["data"] == "test" and evaluated[0]["accuracy"] == metrics["accuracy"]

    texts = tmp_path / "more.txt"
    texts.write_text("goal match league\n\nbank shares market\n")
    predictions = two_teachers.json("predict", "kd", "election treaty minister", "--file", texts, "--top", "2")
    assert [p["text"] for p in predictions] == ["election treaty minister", "goal match league", "", "bank shares market"]
    assert predictions[2]["label"] is None  # the blank line keeps its place (tests/test_predict_cli.py)
    assert all(p["label"] in ("world", "sports", "business", "scitech") and len(p["top"]) == 2
               for p in predictions if p["text"])
    plain = two_teachers("predict", "kd", "goal match")
    assert plain.stdout.split("\t")[0] in ("world", "sports", "business", "scitech")


def test_student_from_a_classifier_and_shallower(two_teachers, assets):
    args = train_args(assets)
    args[1] = str(assets["teacher_c"])  # a classifier over other labels: its head is replaced
    two_teachers("amalgamate", "--method", "uhc", "--name", "from-clf", "--student-layers", "1", *args)
    student = {s["name"]: s for s in two_teachers.json("students")}["from-clf"]
    config = json.loads((Path(student["path"]) / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and len(config["id2label"]) == 4
    weights = load_file(str(Path(student["path"]) / "model.safetensors"))
    assert weights["classifier.weight"].shape[0] == 4


def test_ctrl_c_then_resume_matches_an_uninterrupted_run(two_teachers, assets, interrupt_training, monkeypatch):
    from kamalcli.students import amalgamate

    args = ["--method", "muki-soft", *train_args(assets), "--checkpoint-every", "5"]
    two_teachers("amalgamate", *args, "--name", "straight")
    interrupt_training(7)
    result = two_teachers("amalgamate", *args, "--name", "cut", code=130)
    assert "kamal amalgamate --resume cut" in result.stderr
    assert "cut" not in {s["name"] for s in two_teachers.json("students")}
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "cut"] == ["interrupted"]
    runs_dir = two_teachers.workspace / ".kamal" / "artifacts" / "runs"
    assert len(list(runs_dir.iterdir())) == 1  # the interrupted run keeps its checkpoint
    interrupt_training(None)

    def decide_again(*args, **kwargs):
        raise AssertionError("a resumed run decided its recipe again")

    monkeypatch.setattr(amalgamate, "plan_recipe", decide_again)  # it reads the recipe its run recorded
    resumed = two_teachers("amalgamate", "--resume", "cut")
    table = [line for line in result.stderr.splitlines() if line.startswith("  ") and "saved at" not in line]
    assert table and all(line in resumed.stderr.splitlines() for line in table)  # the same recipe, printed again
    assert not any(runs_dir.iterdir())
    students = {s["name"]: s for s in two_teachers.json("students")}
    a = load_file(str(Path(students["straight"]["path"]) / "model.safetensors"))
    b = load_file(str(Path(students["cut"]["path"]) / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert [r["status"] for r in two_teachers.json("runs") if r["name"] == "cut"] == ["interrupted", "done"]
    assert students["cut"]["train"]["recipe"] == students["straight"]["train"]["recipe"]
    assert "score" in students["cut"]["train"]["recipe"]
    assert "nothing to resume" in two_teachers("amalgamate", "--resume", "cut", code=2).stderr


@pytest.mark.parametrize("args, message", [
    (["--method", "dfb"], "unknown method 'dfb'"),
    (["--method", "ensemble"], "is a baseline with nothing to train"),
    (["--method", "muki-soft", "--option", "tau=-1"], "tau must be above 0"),
    (["--method", "uhc", "--teacher", "ghost"], "no teacher named 'ghost'"),
    (["--method", "muki-hard", "--teacher", "news"], "chooses among teachers and needs at least two"),
    (["--method", "uhc", "--data", "nothing"], "no dataset named 'nothing'"),
    (["--method", "uhc", "--select-by", "eval:pool"], "that dataset has no labels"),
    (["--method", "uhc", "--student-layers", "7", "--student", "ENCODER"], "the base has 2 layers"),
    (["--method", "uhc", "--student", "/no/such/base"], "no such folder"),
    ([], "choose a method with --method"),
    (["--resume", "ghost"], "no interrupted run named 'ghost'"),
])
def test_bad_amalgamate_input(two_teachers, assets, args, message):
    args = [str(assets["encoder"]) if a == "ENCODER" else a for a in args]
    before = two_teachers.db_snapshot()
    result = two_teachers("amalgamate", *args, code=2)
    assert message in result.stderr, result.stderr
    assert two_teachers.db_snapshot() == before


def test_missing_pieces(kamal, assets, trained):
    assert "no teachers" in kamal("amalgamate", "--method", "uhc", code=2).stderr
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    assert "no transfer data" in kamal("amalgamate", "--method", "uhc", code=2).stderr
    kamal("add-data", assets["pool"], "--name", "pool")
    kamal("add-data", assets["pool"], "--name", "pool2")
    assert "choose one with --data" in kamal("amalgamate", "--method", "uhc", code=2).stderr
    assert "no student named 'ghost'" in kamal("eval", "ghost", "--data", "pool", code=2).stderr
    assert "no student named 'ghost'" in kamal("predict", "ghost", "hi", code=2).stderr


def test_predict_needs_text_and_eval_needs_labels(two_teachers, assets, tmp_path):
    two_teachers("amalgamate", "--method", "uhc", "--name", "u", *train_args(assets))
    assert "nothing to classify" in two_teachers("predict", "u", code=2).stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert "holds no text" in two_teachers("predict", "u", "--file", empty, code=2).stderr
    assert "has no gold labels" in two_teachers("eval", "u", "--data", "pool", code=2).stderr
    assert "has no ONNX export yet" in two_teachers("predict", "u", "hi", "--onnx", code=2).stderr
    assert "a student named 'u' exists already" in two_teachers("amalgamate", "--method", "uhc", "--name", "u", code=2).stderr


def test_without_epochs_the_step_budget_applies_and_epochs_win(two_teachers, assets):
    args = ["--student", str(assets["encoder"]), "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]
    two_teachers("amalgamate", "--method", "vanilla-kd", "--name", "budget", "--steps", "6", *args)
    two_teachers("amalgamate", "--method", "vanilla-kd", "--name", "epoch", "--steps", "6", "--epochs", "1", *args)
    students = {s["name"]: s["train"] for s in two_teachers.json("students")}
    budget, epoch = students["budget"], students["epoch"]
    assert budget["config"]["epochs"] is None and budget["config"]["steps"] == 6
    assert budget["steps"] == 6 and budget["stopped_early"] is False  # measured at step 6 only: nothing to stop
    assert epoch["config"]["epochs"] == 1 and epoch["steps"] == 15  # 228 rows / 16: --epochs wins over --steps


def test_prior_prototype_needs_labelled_text_for_every_label_and_auto_says_why_there_is_none(two_teachers, assets):
    result = two_teachers("amalgamate", "--method", "muki-hard", "--option", "prior=prototype", "--name", "p",
                          *train_args(assets), code=2)
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: prior=prototype: no labelled text for these teachers' labels (`kamal synthesize` writes some, or "
        "--rmd-fit NAME).")
    assert not two_teachers.json("students")
    result = two_teachers("--verbose", "amalgamate", "--method", "muki-hard", "--name", "p", *train_args(assets))
    assert "prior=auto: none: no labelled text for these teachers' labels" in result.output
    [student] = two_teachers.json("students")
    assert "prior" not in student["train"]["objective"]
    run = next(r for r in two_teachers.json("runs") if r["name"] == "p" and r["status"] == "done")
    assert run["params"]["recipe"]["prior"]["kind"] == "none"  # recorded: a resumed run decides nothing again


def test_smooth_averages_each_target_with_its_nearest_rows_and_says_so(two_teachers, assets, monkeypatch):
    from kamalcli.recipe import recipe as neighbours

    monkeypatch.setattr(neighbours, "SMOOTH_NEIGHBOURS", 10)  # kamal's default (the tests' conftest turns it off)
    encoder = ["--option", f"encoder={assets['encoder']}"]
    result = two_teachers("--verbose", "amalgamate", "--method", "muki-hard", "--name", "auto", *encoder,
                          *train_args(assets))
    assert ("smooth=auto: none: it smooths only beside a prior over every label, whose check shows that "
            f"{assets['encoder']} reads the transfer rows; smooth=K asks for K anyway.") in result.output
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "three", "--option", "smooth=3",
                          *encoder, *train_args(assets))
    assert ("smooth=3: each row's target is 50% its own and 50% the mean of its 3 nearest rows of pool in "
            f"{assets['encoder']} (no labels; smooth=0 turns it off).") in unfolded(result.output)
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "off", "--option", "smooth=0",
                          *encoder, *train_args(assets))
    assert "smooth=" not in result.output
    students = {s["name"]: s for s in two_teachers.json("students")}
    assert students["three"]["train"]["objective"]["smooth"] == 3
    assert "smooth" not in students["auto"]["train"]["objective"] and "smooth" not in students["off"]["train"]["objective"]
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "gone", "--option", "smooth=3",
                          "--option", "encoder=/no/such/encoder", *train_args(assets), code=2)
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "gone" not in {s["name"] for s in two_teachers.json("students")}


def test_pick_smooth_averages_each_rows_confidence_with_its_nearest_rows_and_says_so(two_teachers, assets):
    encoder = ["--option", f"encoder={assets['encoder']}", "--option", "score=entropy"]
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "three", "--option", "pick_smooth=3",
                          "--option", "commit=1", *encoder, *train_args(assets))
    assert (f"pick_smooth=3: each pick averaged over the 3 nearest rows of pool in {assets['encoder']} (kappa "
            in result.output)
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "off", "--option", "pick_smooth=0",
                          "--option", "commit=1", *encoder, *train_args(assets))
    assert "pick_smooth=" not in result.output
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "kd", "--option", "pick_smooth=3",
                          "--option", "commit=0", *encoder, *train_args(assets))
    assert "pick_smooth=" not in result.output  # vanilla-kd's target reads no pick
    students = {s["name"]: s for s in two_teachers.json("students")}
    recorded = students["three"]["train"]["objective"]["pick_smooth"]
    assert recorded["neighbours"] == 3 and recorded["used"] and 0 <= recorded["agreement"] <= 1
    assert "pick_smooth" not in students["off"]["train"]["objective"]
    result = two_teachers("amalgamate", "--method", "muki-hard", "--name", "gone", "--option", "pick_smooth=3",
                          "--option", "encoder=/no/such/encoder", "--option", "score=entropy", *train_args(assets),
                          code=2)
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "gone" not in {s["name"] for s in two_teachers.json("students")}


def test_prototype_scores_need_labelled_text_for_every_label(two_teachers, assets):
    result = two_teachers("amalgamate", "--method", "muki-hard", "--option", "score=rmd+prototype", "--name", "p",
                          *train_args(assets), code=2)
    assert "score=rmd+prototype needs labelled text for every label" in result.output
    assert not two_teachers.json("students")
    two_teachers("add-data", assets["train"], "--name", "train", "--role", "eval")
    result = two_teachers("amalgamate", "--method", "muki-soft", "--option", "score=prototype", "--option",
                          f"encoder={assets['encoder']}", "--rmd-fit", "train", "--name", "p", *train_args(assets))
    assert "sentence vectors of train's rows, one prototype per label" in result.output
    [student] = two_teachers.json("students")
    assert student["train"]["objective"]["score"] == "prototype"
    result = two_teachers("amalgamate", "--method", "muki-hard", "--option", "score=prototype", "--option",
                          "encoder=/no/such/encoder", "--rmd-fit", "train", "--name", "q", *train_args(assets), code=2)
    assert "/no/such/encoder: no such folder" in result.output and "Traceback" not in result.output


def test_gold_rows_join_the_priors_prototypes_and_the_recipe_says_so(two_teachers, assets, tmp_path, monkeypatch):
    import tiny
    from conftest import FOUR
    from kamalcli.probe import prototypes

    fitted = []  # (fit data, gold) of every prototype fit
    fit_prototypes = prototypes.fit_prototypes
    monkeypatch.setattr(prototypes, "fit_prototypes", lambda *args, gold=None, **kwargs: fitted.append(
        (args[3].name, gold.name if gold is not None else None)) or fit_prototypes(*args, gold=gold, **kwargs))

    gold = tiny.write_jsonl(tmp_path / "gold.jsonl", tiny.topic_rows(FOUR, 60, seed=12)[:40])  # rows of the pool
    two_teachers("add-data", assets["train"], "--name", "train", "--role", "eval")
    two_teachers("add-data", gold, "--name", "gold", "--role", "eval")
    two_teachers("probe", "--rmd-fit", "train")
    args = ["amalgamate", "--method", "muki-hard", "--option", f"encoder={assets['encoder']}", *train_args(assets)]
    result = two_teachers("--verbose", *args, "--rmd-fit", "train", "--gold", "gold", "--name", "pooled")
    assert "built from train and the labelled rows of gold (a gold row is left out of its own label's prototype)" in (
        unfolded(result.output))
    [student] = two_teachers.json("students")
    assert student["train"]["recipe"]["prior"]["value"] == "train + gold"
    # the target is the one the gold rows pick out of fold (kamalcli/methods/gold_target.py), said and recorded
    chosen = student["train"]["objective"]["gold_target"]
    assert chosen["rows"] == 40 and set(chosen["right"]) == {"teachers", "pooled", "stacked", "stacked+vectors"}
    assert f"Gold rows (40): out of fold, {chosen['chosen']} predicts {chosen['right'][chosen['chosen']]} of them" in (
        unfolded(result.output))
    # twice: the prior's check, then the prior itself (the prototype score reads train alone, as --rmd-fit says)
    assert student["train"]["recipe"]["prior"]["check"] is not None and fitted.count(("train", "gold")) == 2
    uhc = two_teachers("amalgamate", "--method", "uhc", "--gold", "gold", "--dry-run", *train_args(assets))
    assert "uhc learns no single target over the union: the gold rows add their cross-entropy alone." in uhc.output
    alone = json.loads(two_teachers(*args, "--rmd-fit", "gold", "--gold", "gold", "--name", "g", "--dry-run",
                                    "--json").stdout)
    assert alone["recipe"]["prior"]["value"] == "gold" and alone["recipe"]["prior"]["gold"] is None
