"""kamal export."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option, note
from kamalcli.errors import KamalError


@click.command()
@click.argument("student_name")
@click.option("--onnx", is_flag=True, help="Export to ONNX (model.onnx for onnxruntime).")
@click.option("--hf", is_flag=True, help="Export a plain Hugging Face folder with a Hub model card (transformers.pipeline).")
@click.option("--quantize", type=click.Choice(["int8"]), help="Dynamic int8 quantisation (smaller, faster on CPU).")
@click.option("--out", type=click.Path(file_okay=False), help="Output folder (default: inside the workspace).")
@click.option("--force", is_flag=True, help="Replace an existing output folder.")
@click.option("--opset", type=int, default=17, show_default=True, help="ONNX opset.")
@json_option
@pass_app
def export(app: App, student_name, onnx, hf, quantize, out, force, opset, as_json) -> None:
    """Ship a student: ONNX (model.onnx, tokenizer, labels) or a Hugging Face folder, with a model card, checked."""
    from kamalcli.export.service import export_student

    if onnx == hf:
        raise KamalError("choose a format: --onnx or --hf" if not onnx else "one format at a time: --onnx or --hf")
    if hf:
        if quantize:
            raise KamalError("--quantize applies to --onnx only")
        _export_hf(app, student_name, out, force, as_json)
        return
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


def _export_hf(app: App, student_name: str, out, force: bool, as_json: bool) -> None:
    from kamalcli.export.service import export_hf

    with app.writer() as store:
        student = store.student(student_name)
        result = export_hf(app.workspace, store, student, out=out, force=force)
    if as_json:
        emit_json(result.as_json())
        return
    check = result.check
    click.echo(f"Exported {student.name} to {result.path} (Hugging Face folder, {result.size_bytes / 1e6:.1f} MB)")
    click.echo(f"  transformers.pipeline on {check['rows']} texts agrees with kamal: max |probability diff| "
               f"{check['max_abs_diff']:.2e}, same top label {check['argmax_agreement']:.4f}")
    click.echo(f"  publish: huggingface-cli upload you/{student.name} {result.path}")


COMMANDS = [export]
