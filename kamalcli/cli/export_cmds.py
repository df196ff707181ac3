"""kamal export."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, note
from kamalcli.errors import KamalError


@click.command()
@click.argument("student_name")
@click.option("--onnx", is_flag=True, help="Export to ONNX (the one format so far).")
@click.option("--quantize", type=click.Choice(["int8"]), help="Dynamic int8 quantisation (smaller, faster on CPU).")
@click.option("--out", type=click.Path(file_okay=False), help="Output folder (default: inside the workspace).")
@click.option("--force", is_flag=True, help="Replace an existing output folder.")
@click.option("--opset", type=int, default=17, show_default=True, help="ONNX opset.")
@json_option
@pass_app
def export(app: App, student_name, onnx, quantize, out, force, opset, as_json) -> None:
    """Ship a student: model.onnx, tokenizer, labels.json and a model card, checked against PyTorch."""
    from kamalcli.export.service import export_student

    if not onnx:
        raise KamalError("choose a format: --onnx")
    with app.writer() as store:
        student = store.student(student_name)
        record, result = export_student(app.workspace, store, student, quantize=quantize, out=out, force=force,
                                        opset=opset)
    for warning in result.warnings:
        note(f"Warning: {warning}")
    for message in result.notes:
        note(f"Note: {message}")
    if as_json:
        emit_json({**record.as_json(), "fused_ops": result.fused_op_counts, "warnings": result.warnings})
        return
    parity = result.parity
    click.echo(f"Exported {student.name} to {record.path}")
    click.echo(f"  model.onnx {result.size_bytes / 1e6:.1f} MB, opset {opset}"
               + (", int8" if quantize else "") + (f"; fused: {', '.join(result.fused_ops)}" if result.fused_ops else ""))
    click.echo(f"  parity with PyTorch on {parity['rows']} texts: max |logit diff| {parity['max_abs_diff']:.2e}, "
               f"argmax agreement {parity['argmax_agreement']:.4f}")
    click.echo(f"  try: kamal predict {student.name} --onnx \"some text\"")


COMMANDS = [export]
