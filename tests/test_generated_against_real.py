"""A selection figure measured on generated text is shown beside the same score's figure on real labelled rows
(issue 64: a figure on generated rows is never presented as what holds on real text)."""

from kamalcli.probe.service import generated_against_real, generated_against_real_line


def _row(data, score, accuracy, rows, *, generated=False, teachers=("a", "b"), balanced=None):
    return {"data": data, "generated": generated, "teachers": list(teachers), "score": score, "accuracy": accuracy,
            "rows": rows, "balanced": balanced, "options_key": "k", "auroc": None, "in_sample": False}


def test_a_generated_figure_far_above_the_real_rows_is_said_to_overstate():
    rows = [_row("synth", "rmd", 0.975, 200, generated=True), _row("synth", "entropy", 0.6, 200, generated=True),
            _row("synth", "auto: rmd", 0.975, 200, generated=True),
            _row("test", "rmd", 0.80, 600, balanced=0.848), _row("test", "entropy", 0.7, 600),
            _row("other", "rmd", 0.5, 100, teachers=("a", "c"))]  # other teachers: not compared
    [check] = generated_against_real(rows)
    assert check["score"] == "rmd" and check["figure"] == 0.975 and check["rows"] == 200
    assert check["real"] == [{"data": "test", "figure": 0.848, "rows": 600, "disagree": True}]  # balanced where measured
    line = generated_against_real_line(check)
    assert line == ("rmd picks the right teacher on 97.5% of 200 generated rows (synth), but 84.8% of 600 real rows "
                    "(test): the generated rows overstate it by 12.7 points; the real figures are what a student meets.")


def test_figures_inside_each_others_interval_agree_and_no_real_rows_is_said():
    rows = [_row("synth", "prototype", 0.80, 50, generated=True), _row("pool-gold", "prototype", 0.78, 400)]
    [check] = generated_against_real(rows)  # no auto row: the best score of the generated rows
    assert check["real"][0]["disagree"] is False
    assert generated_against_real_line(check).endswith(": the generated rows tell what holds on real text.")
    [alone] = generated_against_real(rows[:1])
    assert alone["real"] == []
    assert "no labelled real rows measure it: what holds on real text is not known" in generated_against_real_line(alone)
    assert generated_against_real(rows[1:]) == []  # real rows only: nothing to compare


def test_real_rows_above_the_generated_figure_are_said_to_be_understated():
    rows = [_row("synth", "rmd", 0.6, 200, generated=True), _row("test", "rmd", 0.9, 600),
            _row("pool-gold", "rmd", 0.8, 600)]
    [check] = generated_against_real(rows)
    assert "the generated rows understate it by 20.0 to 30.0 points" in generated_against_real_line(check)
