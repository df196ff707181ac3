"""kamal report --html: one offline file with the paper's plots, checked as a person sees it."""

import re
import shutil
import sqlite3
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from kamalcli.report import svg

TRAIN = ["--epochs", "3", "--lr", "2e-3", "--batch-size", "16", "--max-length", "32"]


@pytest.fixture
def full_workspace(kamal, assets, trained):
    """Two teachers probed on labelled data, a student, an extended student, both evaluated."""
    kamal("add-teacher", trained["news"], "--name", "news")
    kamal("add-teacher", trained["money"], "--name", "money")
    kamal("add-data", assets["pool6"], "--name", "pool")
    kamal("add-data", assets["test6"], "--name", "test", "--role", "eval")
    kamal("probe", "--mc-samples", "4")
    kamal("amalgamate", "--method", "muki-soft", "--name", "v1", "--student", assets["encoder"],
          "--mc-samples", "4", *TRAIN)
    kamal("add-teacher", trained["life"], "--name", "life")
    kamal("extend", "v1", "--teacher", "life", "--name", "v2", "--mc-samples", "4", *TRAIN)
    kamal("eval", "v1", "--data", "test")
    kamal("eval", "v2", "--data", "test")
    kamal("eval", "--baseline", "ensemble", "--data", "test")
    return kamal


def test_the_report_holds_every_section_and_nothing_from_the_network(full_workspace, ws, tmp_path):
    out = tmp_path / "report.html"
    result = full_workspace("report", "--html", out)
    assert f"Wrote {out}" in result.stdout
    html = out.read_text()
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html and "<link" not in html
    for anchor in ("teachers", "scores", "calibration", "selection", "students", "lineage"):
        assert f'id="{anchor}"' in html
    # Figure 2: one chart per teacher, dataset and score, each with its AUROC on the plot
    distributions = re.findall(r'aria-label="(mc-dropout|entropy|max-prob|rmd): AUROC ([0-9.]+)"', html)
    # news and money on test (pool has no labels, so no in/out split), 4 scores each
    assert len(distributions) >= 4 * 2 and all(0 <= float(a) <= 1 for _, a in distributions)
    assert html.count("ECE ") >= 2 * 2  # plain and MC reliability diagram per probe
    assert "selects the right teacher most often" in html
    # life was probed only by the ensemble baseline (K = 1): no MC-dropout charts that would repeat the plain ones
    life = html[html.index('life on test <span class="note">(K = 1;'):html.index("v1-as-teacher on test")]
    assert 'aria-label="entropy: AUROC' in life and 'aria-label="mc-dropout: AUROC' not in life
    # each student: a training curve from recorded losses, confusion matrix, per-class F1
    assert html.count('aria-label="Training curve"') == 2
    assert html.count('aria-label="Confusion matrix"') == 2 and html.count('aria-label="F1 per class (%)"') == 2
    assert "not recorded" not in html
    assert html.count("Decided when it trained: score=") == 2  # each student's auto choices, as it recorded them
    assert html.count("Decided before it trained:") == 2  # each student's recipe, as kamal amalgamate printed it
    assert "The next muki-hard student of news, money decides" in html  # what the next amalgamate would decide
    assert "<b>v2</b>" in html and "+2 new (health, arts)" in html  # lineage
    assert "baseline ensemble" in html
    assert len(html.encode()) < 2_000_000


def test_old_students_show_their_curve_as_not_recorded(full_workspace, ws, tmp_path):
    conn = sqlite3.connect(ws / ".kamal" / "kamal.db")
    with conn:
        conn.execute("DELETE FROM loss_history")
        conn.execute("UPDATE students SET train = json_remove(train, '$.history')")
    conn.close()
    out = tmp_path / "old.html"
    full_workspace("report", "--html", out)
    html = out.read_text()
    assert html.count("Training curve: not recorded") == 2
    assert 'aria-label="Training curve"' not in html


def test_an_empty_workspace_and_bad_paths(kamal, tmp_path):
    out = tmp_path / "empty.html"
    kamal("report", "--html", out)
    html = out.read_text()
    assert "No teachers yet" in html and "No students yet" in html
    result = kamal("report", "--html", tmp_path / "no-such-folder" / "r.html", code=2)
    assert "no folder" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    written = kamal.json("report", "--html", out)
    assert written["bytes"] == len(out.read_bytes()) and written["students"] == 0


def test_loss_history_is_recorded_per_step_and_survives_a_resume(two_teachers, assets, ws, interrupt_training):
    args = ["--method", "vanilla-kd", "--student", assets["encoder"], *TRAIN]
    interrupt_training(7)
    two_teachers("amalgamate", *args, "--name", "kd", code=130)
    interrupt_training(None)
    two_teachers("amalgamate", "--resume", "kd")
    two_teachers("amalgamate", *args, "--name", "straight")
    conn = sqlite3.connect(ws / ".kamal" / "kamal.db")
    try:
        rows = {name: conn.execute("SELECT l.step, l.loss FROM loss_history l JOIN students s ON s.id = l.student_id "
                                   "WHERE s.name = ? ORDER BY l.step", [name]).fetchall()
                for name in ("kd", "straight")}
    finally:
        conn.close()
    steps = two_teachers.json("students")[0]["train"]["steps"]
    assert [s for s, _ in rows["straight"]] == list(range(1, steps + 1))
    # the resumed run kept the steps before Ctrl-C, and they are the uninterrupted run's losses
    assert [s for s, _ in rows["kd"]] == list(range(1, steps + 1))
    assert [loss for _, loss in rows["kd"]] == pytest.approx([loss for _, loss in rows["straight"]], rel=1e-6)


def test_a_student_block_names_what_its_objective_decided():
    from kamalcli.report.html import decided

    objective = {"score": "rmd", "commit": 1.0, "prior": "prototype within en", "refit": ["zh"], "reweight": True,
                 "pick_smooth": {"neighbours": 10, "used": True, "agreement": 0.8, "chance": 0.55, "kappa": 0.5634}}
    assert decided(objective) == ("score=rmd; commit=1; prior=prototype within en; refit=zh; "
                                  "pick_smooth=10 (neighbours' kappa 0.56); reweight=margin")
    unused = {"pick_smooth": {"neighbours": 10, "used": False, "agreement": 0.5, "chance": 0.5, "kappa": 0.0},
              "smooth": 10, "commit": 0.0, "reweight": "per-teacher"}
    assert decided(unused) == "commit=0; pick_smooth=0 (neighbours' kappa 0.00); smooth=10; reweight=per-teacher"
    assert decided({"temperature": 2.0}) == ""


def test_loss_history_file_keeps_the_last_value_per_step(tmp_path):
    from kamalcli.train.loss_history import LossHistory

    history = LossHistory(tmp_path / "run")
    for step, loss in ((1, 2.0), (2, 1.5), (3, 1.4), (2, 1.25), (3, 1.0)):  # a resume repeats steps 2 and 3
        history.record(step, loss)
    with open(history.path, "a") as f:
        f.write("4\t")  # a line cut short by a kill
    assert history.steps() == [(1, 2.0), (2, 1.25), (3, 1.0)]
    assert LossHistory(tmp_path / "none").steps() == []


# -- the chart module: golden values ---------------------------------------------------

def test_histogram_and_ticks():
    assert svg.histogram([0.0, 0.1, 0.5, 1.0], 0.0, 1.0, 4) == [0.5, 0.0, 0.25, 0.25]
    assert svg.histogram([], 0.0, 1.0, 2) == [0.0, 0.0]
    assert svg.nice_ticks(0, 1, 5) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.nice_ticks(0, 1500, 6) == [0, 500, 1000, 1500]
    assert svg.nice_ticks(2.3, 2.3) == [2.3]
    assert svg.tick_labels([0.3255, 0.326, 0.3265]) == ["0.3255", "0.3260", "0.3265"]
    assert svg.tick_labels([0, 500, 1000]) == ["0", "500", "1000"]
    points, group = svg.thin([(i, float(i)) for i in range(1, 11)], 4)
    assert group == 3 and points == [(3, 2.0), (6, 5.0), (9, 8.0), (10, 10.0)]


def test_reliability_bins_give_kamals_ece():
    from kamalcli.probe.calibration import ece
    from kamalcli.probe.calibration import reliability_bins

    confidence = [0.95, 0.9, 0.55, 0.6, 0.3]
    correct = [1, 0, 1, 1, 0]
    conf, acc, counts = reliability_bins(confidence, correct, bins=5)
    assert counts == [0, 1, 2, 0, 2]
    assert acc == [None, 0.0, 1.0, None, 0.5] and conf[2] == pytest.approx(0.575)
    from_bins = sum(n / 5 * abs(a - c) for c, a, n in zip(conf, acc, counts) if n)
    # |0-0.3|*1/5 + |1-0.575|*2/5 + |0.5-0.925|*2/5 = 0.06 + 0.17 + 0.17
    assert from_bins == pytest.approx(0.4) and ece(confidence, correct, bins=5) == pytest.approx(0.4)


def test_charts_are_deterministic_and_escape_text():
    a = svg.distribution_chart([0.9, 0.8], [0.2, 0.4, 0.5], title="<mc>", note="AUROC 1.000")
    assert a == svg.distribution_chart([0.9, 0.8], [0.2, 0.4, 0.5], title="<mc>", note="AUROC 1.000")
    assert "&lt;mc&gt;" in a and "<mc>" not in a
    assert a.count(f'fill="{svg.IN_DOMAIN}"') >= 2 and a.count(f'fill="{svg.OUT_DOMAIN}"') >= 3
    matrix = svg.confusion_chart([[3, 1], [0, 4]], ["a", "b"], title="Confusion matrix")
    assert ">3<" in matrix and ">4<" in matrix and "gold a, predicted b: 1" in matrix


def test_a_big_workspace_stays_under_two_megabytes():
    """5 teachers x 2 labelled datasets of 1,602 rows, 10 students of 10 labels with 1,700 steps each."""
    import random

    from kamalcli.report.gather import Report, Reliability, ScoreDistribution, StudentView, TeacherOnData
    from kamalcli.report.html import render

    rng = random.Random(0)
    labels = [f"label-{i}" for i in range(10)]
    probes = []
    for t in range(5):
        for data in ("dev", "test"):
            dists = [ScoreDistribution(s, [rng.random() for _ in range(320)], [rng.random() for _ in range(1282)], 0.7)
                     for s in ("mc-dropout", "entropy", "max-prob", "rmd")]
            rel = [Reliability(kind, [0.5] * 15, [0.4] * 15, [10] * 15, 0.1) for kind in ("plain", "MC dropout")]
            probes.append(TeacherOnData(f"teacher-{t}", data, t, 16, 320, 1282, dists, rel, {"ece_in": 0.1}))
    metrics = {"rows": 1602, "accuracy": 0.7, "macro_f1": 0.6, "labels": labels,
               "confusion": [[rng.randrange(200) for _ in labels] for _ in labels],
               "per_class": {name: {"f1": 0.5, "precision": 0.5, "recall": 0.5, "support": 160} for name in labels}}
    students = [StudentView(f"student-{i}", "muki-hard", {"mc": True}, f"student-{i - 1}" if i else None,
                            [f"teacher-{t}" for t in range(5)], labels, "transfer-loss",
                            {"history": [{"step": s, "transfer-loss": rng.random()} for s in range(200, 1701, 200)],
                             "best_step": 1400, "selected_by": "transfer-loss"},
                            [(s, rng.random()) for s in range(1, 1701)], {"test": metrics, "dev": metrics})
                for i in range(10)]
    report = Report("big", [{"name": f"teacher-{t}", "labels": labels[2 * t:2 * t + 2], "origin": "added", "layers": 6}
                            for t in range(5)], probes, [], [], students, [])
    size = len(render(report).encode())
    print(f"synthetic report, 5 teachers and 10 students: {size / 1e6:.2f} MB")
    assert size < 2_000_000


# -- in a real browser --------------------------------------------------------------------

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """RGB(A) rows of a non-interlaced 8-bit PNG (what Chromium writes), without an image library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], None
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    bit_depth, colour_type, interlace = header[8], header[9], header[12]
    assert bit_depth == 8 and colour_type in (2, 6) and interlace == 0
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, channels, rows


def _count_colour(rows, channels: int, hex_colour: str, tolerance: int = 6) -> int:
    target = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    count = 0
    for line in rows:
        for i in range(0, len(line), channels):
            if all(abs(line[i + c] - target[c]) <= tolerance for c in range(3)):
                count += 1
    return count


def screenshot(html: Path, png: Path, width: int = 1280, height: int = 4000) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}",
                        html.as_uri()], check=True, capture_output=True, timeout=120)


@pytest.mark.slow  # a real browser: the full tier
@pytest.mark.skipif(_chromium() is None, reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)")
def test_chromium_draws_the_plots(full_workspace, tmp_path):
    html = tmp_path / "report.html"
    full_workspace("report", "--html", html)
    png = tmp_path / "report.png"
    screenshot(html, png)
    width, channels, rows = _png_pixels(png)
    assert width == 1280
    # Every series colour is on screen, in areas far larger than the legend swatches (8 x 8 pixels each).
    drawn = {name: _count_colour(rows, channels, colour) for name, colour in
             (("in domain", svg.IN_DOMAIN), ("out of domain", svg.OUT_DOMAIN), ("MC dropout", svg.MC),
              ("plain", svg.PLAIN), ("per-class F1", svg.BAR), ("held-out", svg.HELD_OUT))}
    swatches = 64 * 12
    assert drawn["in domain"] > swatches and drawn["out of domain"] > swatches, drawn
    assert drawn["MC dropout"] > 200 and drawn["plain"] > 200 and drawn["per-class F1"] > 200, drawn
    assert drawn["held-out"] > 50, drawn
