"""Token-level amalgamation end to end on tiny models: train two NER teachers over disjoint entity types,
amalgamate with every token-level method through the one training loop, measure entity F1."""

from __future__ import annotations

import pytest

import tiny
from conftest import Kamal

pytestmark = pytest.mark.xdist_group("ner")  # one worker builds the module's teachers, not each


@pytest.fixture(scope="module")
def ner(tmp_path_factory):
    """A workspace with two trained token teachers (PER+LOC, ORG), a transfer pool and a tagged test set."""
    root = tmp_path_factory.mktemp("ner")
    encoder = tiny.make_encoder(root / "encoder", seed=6)
    train = tiny.write_jsonl(root / "train.jsonl", tiny.ner_rows(240, seed=1))
    pool = tiny.write_jsonl(root / "pool.jsonl", tiny.ner_rows(160, seed=2, tagged=False))
    test = tiny.write_jsonl(root / "test.jsonl", tiny.ner_rows(60, seed=3))
    ws = root / "ws"
    Kamal(None)("init", ws)
    k = Kamal(ws)
    k("add-data", train, "--name", "train")
    k("add-data", pool, "--name", "pool")
    k("add-data", test, "--name", "test", "--role", "eval")
    settings = ["--base", encoder, "--epochs", 12, "--lr", "3e-3", "--batch-size", 16, "--max-length", 32]
    out = k("train-teacher", "train", "--labels", "PER,LOC", "--name", "perloc", *settings).stdout
    assert "held-out entity F1" in out
    k("train-teacher", "train", "--labels", "ORG", "--name", "org", *settings)
    return {"kamal": k, "encoder": encoder, "root": root}


STUDENT = ["--data", "pool", "--epochs", 6, "--lr", "3e-3", "--batch-size", 16, "--max-length", 32, "--mc-samples", 3]


def test_token_teachers_are_registered_with_their_task(ner):
    k = ner["kamal"]
    teachers = {t["name"]: t for t in k.json("teachers")}
    assert teachers["perloc"]["task"] == "token"
    assert teachers["perloc"]["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    assert teachers["org"]["labels"] == ["O", "B-ORG", "I-ORG"]


@pytest.mark.parametrize("method", ["muki-hard", "muki-soft", "vanilla-kd", "uhc"])
def test_every_token_method_trains_and_evaluates(ner, method):
    k = ner["kamal"]
    k("amalgamate", "--method", method, "--student", ner["encoder"], "--name", f"s-{method}", *STUDENT)
    [student] = [s for s in k.json("students") if s["name"] == f"s-{method}"]
    assert student["task"] == "token"
    assert student["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    assert student["train"]["objective"]["level"] == "token"
    metrics = k.json("eval", f"s-{method}", "--data", "test")
    assert 0.0 <= metrics["entity_f1"] <= 1.0
    assert set(metrics["per_type"]) <= {"PER", "LOC", "ORG"}
    assert metrics["entities"] == sum(v["support"] for v in metrics["per_type"].values())
    printed = k("eval", f"s-{method}", "--data", "test").stdout
    assert "entity F1" in printed and "PER" in printed


def test_muki_student_learns_entities_of_both_teachers(ner):
    k = ner["kamal"]
    k("amalgamate", "--method", "muki-hard", "--student", ner["encoder"], "--name", "mh-long",
      *[a if a != 6 else 12 for a in STUDENT])
    metrics = k.json("eval", "mh-long", "--data", "test")
    found = {kind for kind, v in metrics["per_type"].items() if v["f1"] > 0}
    assert {"PER", "ORG"} <= found, metrics["per_type"]
    info = [s for s in k.json("students") if s["name"] == "mh-long"][0]["train"]["objective"]
    assert info["contested_words"] > 0 and info["all_o_words"] > 0


def test_baselines_ensemble_and_one_teacher(ner):
    k = ner["kamal"]
    ensemble = k.json("eval", "--baseline", "ensemble", "--data", "test")
    alone = k.json("eval", "--baseline", "teacher:org", "--data", "test")
    # every gold type is listed; one teacher predicts only its own
    assert set(alone["per_type"]) == {"PER", "LOC", "ORG"}
    assert alone["per_type"]["PER"]["predicted"] == alone["per_type"]["LOC"]["predicted"] == 0
    assert alone["per_type"]["ORG"]["predicted"] > 0
    assert ensemble["entities"] == alone["entities"]


def test_tasks_never_mix(ner, assets, tmp_path):
    k = ner["kamal"]
    k("add-teacher", assets["teacher_a"], "--name", "topics")
    try:
        out = k("amalgamate", "--method", "muki-hard", *STUDENT, code=2).output
        assert "mix tasks" in out and "Traceback" not in out
        out = k("amalgamate", "--method", "dfa", "--teacher", "perloc", "--teacher", "org", *STUDENT, code=2).output
        assert "sequence classifiers only" in out
        out = k("amalgamate", "--method", "vanilla-kd", "--teacher", "topics", *STUDENT, code=2).output
        assert "holds tokens with tags" in out
        out = k("eval", "--baseline", "teacher:topics", "--data", "test", code=2).output
        assert "sequence classifier" in out
    finally:
        k("remove-teacher", "topics")


def test_reprobe_is_refused_for_token_teachers_not_ignored(ner):
    out = ner["kamal"]("amalgamate", "--method", "muki-hard", "--reprobe", *STUDENT, code=2).output
    assert "--reprobe" in out and "Traceback" not in out


def test_add_teacher_refuses_token_classifier_without_bio_tags(kamal, tmp_path):
    folder = tiny.make_token_classifier(tmp_path / "bad", ["person", "place", "O"])
    out = kamal("add-teacher", folder, code=2).output
    assert "BIO tags" in out
    folder = tiny.make_token_classifier(tmp_path / "good", ["O", "B-MISC", "I-MISC"])
    out = kamal("add-teacher", folder, "--name", "misc").stdout
    assert "Added teacher misc" in out


def test_word_alignment_labels_the_first_sub_token():
    from transformers import BertTokenizerFast

    from kamalcli.models.words import encode_words

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "tele", "##scope", "goal", "big"]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    aligned = encode_words(tokenizer, [["big", "telescope", "goal"], ["goal"] * 5], max_length=5)
    # [CLS] big tele ##scope goal -> cut at 5 tokens: [CLS] big tele ##scope [SEP]
    assert aligned.first[0].tolist() == [1, 2, -1]
    assert aligned.first[1].tolist() == [1, 2, 3, -1, -1]
    assert aligned.positions().tolist() == [[1, 2, -1, -1, -1], [1, 2, 3, -1, -1]]
    assert aligned.cut_words() == 3


def test_probe_and_report_token_teachers(ner, tmp_path):
    k = ner["kamal"]
    out = k("probe", "--data", "test", "--mc-samples", 3, "--max-length", 32).stdout
    assert "entity tags only (per word)" in out
    rows = {r["score"]: r for r in k.json("report")["selection"] if r["data"] == "test"}
    only, with_o = rows["mc-dropout, entity tags only (per word)"], rows["mc-dropout, O included (per word)"]
    assert 0.0 <= with_o["accuracy"] <= only["accuracy"] <= 1.0
    assert only["rows"] > 0
    probes = [p for p in k.json("report")["probes"] if p.get("task") == "token" and p["data"] == "test"]
    assert probes and all(0.0 <= p["mean_entity_confidence"] <= 1.0 for p in probes)
    text = k("report").stdout
    assert "Token teachers per word" in text
    k("report", "--html", tmp_path / "r.html")
    assert (tmp_path / "r.html").stat().st_size > 1000
    out = k("probe", "--rmd-fit", "test", code=2).output
    assert "RMD is not computed for token teachers" in out


def test_word_alignment_skips_a_bare_sentencepiece_boundary():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from kamalcli.models.words import encode_words

    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -1.0), ("中", -2.0),
              ("共", -2.0), ("\u2581goal", -1.0)]
    backend = Tokenizer(models.Unigram(pieces, unk_id=3))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", pad_token="<pad>")
    aligned = encode_words(tokenizer, [["中", "goal", "共"]], max_length=16)
    tokens = tokenizer.convert_ids_to_tokens(aligned.encoded.ids[0].tolist())
    assert tokens == ["<s>", "\u2581", "中", "\u2581goal", "\u2581", "共", "</s>"]
    assert aligned.first[0].tolist() == [2, 3, 5]  # 中 and 共 at their piece, goal at ▁goal


def test_predict_prints_entities_with_torch_and_onnx_alike(ner):
    k = ner["kamal"]
    if not any(s["name"] == "s-muki-hard" for s in k.json("students")):
        k("amalgamate", "--method", "muki-hard", "--student", ner["encoder"], "--name", "s-muki-hard", *STUDENT)
    text = "the goal coach said today a market in the treaty"
    torch_out = k.json("predict", "s-muki-hard", text, "bank")
    assert [r["text"] for r in torch_out] == [text, "bank"]
    for e in torch_out[0]["entities"]:
        assert e["type"] in {"PER", "LOC", "ORG"} and text[e["start"]:e["end"]] == e["text"]
        assert 0 < e["score"] <= 1
    out = k("export", "s-muki-hard", "--onnx").stdout
    assert "parity with PyTorch" in out and "argmax agreement 1.0000" in out
    onnx_out = k.json("predict", "s-muki-hard", "--onnx", text, "bank")
    assert [[(e["type"], e["start"], e["end"]) for e in r["entities"]] for r in onnx_out] == \
        [[(e["type"], e["start"], e["end"]) for e in r["entities"]] for r in torch_out]
    for a, b in zip(onnx_out, torch_out):
        for x, y in zip(a["entities"], b["entities"]):
            assert x["score"] == pytest.approx(y["score"], abs=1e-4)
    assert "\t" + text in k("predict", "s-muki-hard", text).stdout


def test_split_words_cuts_cjk_characters_and_keeps_other_words():
    from kamalcli.models.words import split_words

    assert split_words("江泽民 met Bill，１９") == [("江", 0, 1), ("泽", 1, 2), ("民", 2, 3), ("met", 4, 7),
                                                 ("Bill", 8, 12), ("，", 12, 13), ("１", 13, 14), ("９", 14, 15)]


def test_extend_a_token_student_with_a_token_teacher(ner):
    k = ner["kamal"]
    k("amalgamate", "--method", "vanilla-kd", "--teacher", "perloc", "--student", ner["encoder"], "--name", "one",
      *STUDENT)
    out = k("extend", "one", "--teacher", "org", "--method", "muki-hard", *STUDENT).stdout
    assert "Trained student one-v2" in out
    grown = next(s for s in k.json("students") if s["name"] == "one-v2")
    assert grown["task"] == "token" and grown["parent"] == "one"
    assert grown["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]  # old ids first
    assert "entity_f1" in k.json("eval", "one-v2", "--data", "test")


def test_select_token_student_by_entity_f1_on_tagged_data(ner):
    k = ner["kamal"]
    out = k("amalgamate", "--method", "uhc", "--student", ner["encoder"], "--name", "by-f1",
            "--select-by", "eval:test", *STUDENT).output
    assert "entity F1" in out
    student = next(s for s in k.json("students") if s["name"] == "by-f1")
    assert student["train"]["selected_by"] == "eval:test"
    best = student["train"]["best_metric"]
    assert best == max(h["eval:test"] for h in student["train"]["history"])
    assert best == pytest.approx(k.json("eval", "by-f1", "--data", "test")["entity_f1"], abs=1e-9)


def test_export_hf_of_a_token_student_tags_in_the_token_classification_pipeline(ner, tmp_path):
    import json

    from transformers import pipeline

    k = ner["kamal"]
    if not any(s["name"] == "s-muki-hard" for s in k.json("students")):
        k("amalgamate", "--method", "muki-hard", "--student", ner["encoder"], "--name", "s-muki-hard", *STUDENT)
    out = tmp_path / "hf"
    k("export", "s-muki-hard", "--hf", "--out", out)
    check = json.loads((out / "export.json").read_text())["check"]
    assert check["loader"] == "transformers.pipeline('token-classification')"
    assert check["argmax_agreement"] == 1.0 and check["max_abs_diff"] <= 1e-4 and check["sub_tokens"] > check["rows"]
    card = (out / "README.md").read_text()
    assert 'pipeline_tag: "token-classification"' in card and 'pipeline("token-classification"' in card
    tagged = pipeline("token-classification", model=str(out), ignore_labels=[])("the goal coach said today")
    assert {t["entity"] for t in tagged} <= {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"}


def test_a_token_amalgamation_resumes_bit_for_bit_after_ctrl_c(ner, interrupt_training):
    from safetensors.torch import load_file

    k = ner["kamal"]
    args = ["--method", "muki-soft", "--student", ner["encoder"], *STUDENT, "--seed", "3"]
    k("amalgamate", *args, "--name", "straight")
    interrupt_training(5)
    assert "kamal amalgamate --resume resumed" in k("amalgamate", *args, "--name", "resumed", code=130).stderr
    interrupt_training(None)
    k("amalgamate", "--resume", "resumed")
    folders = {s["name"]: s["path"] for s in k.json("students")}
    a, b = (load_file(f"{folders[n]}/model.safetensors") for n in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(a[key].equal(b[key]) for key in a)


def test_synthesize_refuses_token_teachers_in_one_line(ner):
    result = ner["kamal"]("synthesize", "--teacher", "org", "--per-class", "1", "--name", "gen", code=2)
    assert result.stderr.strip().splitlines()[-1].endswith("and org tag tokens: name sentence teachers with --teacher")
