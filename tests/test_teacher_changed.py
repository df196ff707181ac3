"""A teacher fine-tuned again into the folder it was added from: kamal notices before it uses cached outputs."""

import os
import shutil

import tiny
from conftest import add_copied_teacher
from kamalcli.files import sha256_files

TRAIN = ["--epochs", "1", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]
PROBE = ["--mc-samples", "2", "--no-rmd", "--data", "pool"]


def _setup(kamal, assets, tmp_path):
    """Teacher a from a folder the test may rewrite, teacher b untouched, transfer data."""
    return add_copied_teacher(kamal, assets, tmp_path / "a")


def _retrain(folder):
    """Fine-tuned again into the same folder: same labels and shapes, other weights."""
    tiny.make_classifier(folder, ["world", "sports"], seed=77)
    return sha256_files([folder / "model.safetensors"])


def _fingerprints(kamal) -> dict:
    return {t["name"]: t["fingerprint"] for t in kamal.json("teachers")}


def _probe_ids(kamal) -> dict:
    return {p["teacher"]: p["probe_id"] for p in kamal.json("report")["probes"]}


def test_a_teacher_rewritten_after_probing_is_probed_again(kamal, assets, tmp_path):
    folder = _setup(kamal, assets, tmp_path)
    kamal("probe", *PROBE)
    old, old_probes = _fingerprints(kamal)["a"], _probe_ids(kamal)
    new = _retrain(folder)
    assert new != old

    listed = kamal("teachers")  # a reader: flags the change, records nothing
    assert f"teacher a changed on disk since it was added (fingerprint {old[:12]} -> {new[:12]})" in listed.stderr
    [a] = [t for t in kamal.json("teachers") if t["name"] == "a"]
    assert a["fingerprint"] == old and a["changed_on_disk"] is True and a["fingerprint_on_disk"] == new

    result = kamal("probe", *PROBE)
    assert (f"teacher a changed on disk since it was added (fingerprint {old[:12]} -> {new[:12]}): "
            "its cached probes are stale and will be recomputed") in result.stderr
    assert "b on pool: cached" in result.stderr and "1 more were cached." in result.stdout
    assert _fingerprints(kamal)["a"] == new
    [a] = [t for t in kamal.json("teachers") if t["name"] == "a"]
    assert a["changed_on_disk"] is False and "changed on disk" not in kamal("teachers").stderr
    probes = _probe_ids(kamal)
    assert probes["b"] == old_probes["b"] and probes["a"] != old_probes["a"]
    assert len(kamal.json("report")["probes"]) == 2  # the stale probe is gone, not shown beside the new one

    again = kamal("probe", *PROBE)
    assert "Nothing to do: all 2 probes were cached" in again.stdout and "changed on disk" not in again.stderr


def test_amalgamate_notices_a_rewritten_teacher_and_older_students_keep_their_fingerprint(kamal, assets, tmp_path):
    folder = _setup(kamal, assets, tmp_path)
    train = ["--student", assets["encoder"], *TRAIN]
    kamal("amalgamate", "--method", "vanilla-kd", "--name", "before", *train)
    old = _fingerprints(kamal)["a"]
    new = _retrain(folder)

    result = kamal("amalgamate", "--method", "vanilla-kd", "--name", "after", *train)
    assert f"teacher a changed on disk since it was added (fingerprint {old[:12]} -> {new[:12]})" in result.stderr
    assert "Probing a on pool first" in result.stderr and "Probing b on pool first" not in result.stderr
    students = {s["name"]: {t["name"]: t["fingerprint"] for t in s["teachers"]} for s in kamal.json("students")}
    assert students["before"]["a"] == old and students["after"]["a"] == new
    assert students["before"]["b"] == students["after"]["b"]


def test_touched_weights_with_the_same_bytes_stay_cached(kamal, assets, tmp_path):
    folder = _setup(kamal, assets, tmp_path)
    kamal("probe", *PROBE)
    weights = folder / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    result = kamal("probe", *PROBE)
    assert "Nothing to do: all 2 probes were cached" in result.stdout and "changed on disk" not in result.stderr


def test_weights_rewritten_into_another_teachers_are_refused(kamal, assets, tmp_path):
    folder = _setup(kamal, assets, tmp_path)
    kamal("probe", *PROBE)
    shutil.copy(assets["teacher_b"] / "model.safetensors", folder / "model.safetensors")
    before = kamal.db_snapshot()
    result = kamal("probe", *PROBE, code=2)
    assert "teacher a changed on disk since it was added" in result.stderr
    assert "its weights are now those of teacher b" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert kamal.db_snapshot() == before
