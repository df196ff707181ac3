"""The README's example, walked in its order on tiny models, as a new user would: teachers arrive as folders,
the unlabelled pool is new to them, and kamal synthesize writes text before the probe. No command needs a flag
the README does not show (the tiny bases are set in kamal.toml, and the LM and the number of texts shrunk)."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import tiny
from conftest import FOUR, Kamal

README = Path(__file__).parents[1] / "README.md"
# The README example's default student on the tiny models, recorded before a change that must not alter it, per
# torch thread count (the order of float sums changes the bits): make test runs one thread a worker, test-all two.
# The bits also differ by machine (the CPU's kernels): each machine kind seen gives one of these.
DEFAULT_STUDENT_SHA256 = {
    1: {"0eb64e70404586a33029dcb126339064b31eb20a9f43ed07a258616502f8a793",    # recorded at c26f74f
        "b2c8170e00f0b04728e8e8d061fef384601fce0d8ab4b3ef7fbbfa7716c8594e",    # an AMD EPYC machine, 2026-11-30
        "56af9b834d9f3e7351825e9acae80de654549052e586ec6b91d429ae84e1c7af"},   # an Intel Xeon machine, 2026-12-01
    2: {"13d955ba8db176fbd124162897e4b735d5bd6801826ca88f5f8c1a87966f5a6d",
        "832bc3e68441d2be39ad4c2ab9df28037e12c5fde3822eed33e7f127ca83ccfa",
        "96909b343cdc3e618993da367f4ee6e85f1ab29e9b6aefd08c34f3042ee880dd"},  # an Intel Xeon machine, 2026-12-01
}


def readme_example() -> list[list[str]]:
    """The commands of the README's "An example" block, in order (comments dropped, `&&` split)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("## An example", 1)[1].split("```", 2)[1]
    commands = []
    for line in block.strip().splitlines():
        line = line.split("  #", 1)[0].strip()
        for part in line.split("&&"):
            argv = shlex.split(part)
            if argv and argv[0] == "kamal":
                commands.append(argv[1:])
    return commands


def test_the_readme_example_is_what_this_test_walks():
    commands = [c[0] for c in readme_example()]
    assert commands == ["init", "add-teacher", "add-teacher", "add-data", "add-data", "synthesize", "probe",
                        "report", "amalgamate", "eval", "export", "predict"]


def test_the_readme_path_works_without_extra_flags(tmp_path, trained, assets, lm):
    """Every command of the README's example, in order."""
    folders = {"./news-a": trained["news"], "./news-b": _unnamed_copy(trained["money"], tmp_path),
               "unlabelled.jsonl": _pool(tmp_path), "test.csv": assets["test"]}
    outputs = {}
    for argv in readme_example():
        argv = [str(folders.get(a, a)) for a in argv]
        if argv[0] == "init":
            Kamal(None)("init", tmp_path / argv[1])
            kamal = Kamal(tmp_path / argv[1])
            _tiny_settings(kamal.workspace, assets)
            continue
        if argv[0] == "synthesize":
            argv = ["synthesize", *_tiny_lm(argv[1:], lm)]
        outputs[argv[0]] = kamal(*argv)
    assert "several transfer sets" not in outputs["amalgamate"].stderr
    assert "pool" in outputs["amalgamate"].stderr  # it says which transfer set it used
    # the prior is decided by its check on the pool (with these tiny models its prototypes read nothing)
    assert re.search(r"^  prior +none +its prototypes do not read the rows of pool$", outputs["amalgamate"].stderr,
                     re.MULTILINE), outputs["amalgamate"].stderr
    assert re.search(r"accuracy \d+\.\d%", outputs["eval"].stdout)
    assert outputs["predict"].stdout.count("\n") == 1
    long = [(command, line) for command, result in outputs.items() for line in result.output.splitlines()
            if len(line) > 160]
    assert not long, long  # every line kamal prints by default fits 160 characters
    student = next((tmp_path / "proj" / ".kamal" / "artifacts" / "students" / "v1").glob("*.safetensors"))
    # The same student, bit for bit, as before the recipe was decided in one module (recorded at c26f74f)
    import torch

    threads = torch.get_num_threads()
    assert threads in DEFAULT_STUDENT_SHA256, f"the default student's bits are recorded for {list(DEFAULT_STUDENT_SHA256)} threads"
    assert hashlib.sha256(student.read_bytes()).hexdigest() in DEFAULT_STUDENT_SHA256[threads]


def _tiny_settings(workspace: Path, assets) -> None:
    """What a user sets once in kamal.toml: the student base and lengths (here the tiny ones)."""
    config = workspace / "kamal.toml"
    text = config.read_text()
    text = text.replace('student = "minilm-l6"', f'student = "{assets["encoder"]}"')
    text = re.sub(r"(?m)^max_length = 128", "max_length = 32", text)
    text = re.sub(r"(?m)^steps = 600", "steps = 60", text)
    text = re.sub(r"(?m)^mc_samples = 16", "mc_samples = 2", text)
    config.write_text(text)


def _tiny_lm(argv: list[str], lm: Path) -> list[str]:
    """The README's synthesize with the tiny LM and a handful of texts (the one thing a test must shrink)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--per-class":
            out += ["--per-class", "3"]
            skip = True
            continue
        out.append(arg)
    return [*out, "--lm", str(lm), "--max-new-tokens", "6", "--top-m", "5"]


def _unnamed_copy(folder: Path, tmp_path: Path) -> Path:
    """A teacher whose config names its classes LABEL_0, LABEL_1 (the README names them with --labels)."""
    import json
    import shutil

    copy = tmp_path / "news-b"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    config["id2label"] = {str(i): f"LABEL_{i}" for i in range(len(config["id2label"]))}
    config["label2id"] = {f"LABEL_{i}": i for i in range(len(config["id2label"]))}
    (copy / "config.json").write_text(json.dumps(config))
    (copy / "kamal.json").unlink(missing_ok=True)
    return copy


def _pool(tmp_path: Path) -> Path:
    """Unlabelled text new to the teachers (another seed than their training rows)."""
    return tiny.write_jsonl(tmp_path / "unlabelled.jsonl",
                            [{"text": r["text"]} for r in tiny.topic_rows(FOUR, 30, seed=41)])
