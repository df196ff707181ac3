"""kamal export."""

from __future__ import annotations

import click

from kamalcli.cli.app import App, pass_app
from kamalcli.cli.render import emit_json, json_option
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
    if onnx == hf:
        raise KamalError("choose a format: --onnx or --hf" if not onnx else "one format at a time: --onnx or --hf")
    found = app.api().export(student_name, format="hf" if hf else "onnx", quantize=quantize, out=out, force=force,
                             opset=opset)
    if as_json:
        emit_json(found)
    elif hf:
        check = found["check"]
        click.echo(f"Exported {student_name} to {found['path']} (Hugging Face folder, {found['size_bytes'] / 1e6:.1f} MB)")
        click.echo(f"  transformers.pipeline on {check['rows']} texts agrees with kamal: max |probability diff| "
                   f"{check['max_abs_diff']:.2e}, same top label {check['argmax_agreement']:.4f}")
        click.echo(f"  publish: huggingface-cli upload you/{student_name} {found['path']}")
    else:
        parity = found["parity"]
        click.echo(f"Exported {student_name} to {found['path']}")
        click.echo(f"  model.onnx {found['size_bytes'] / 1e6:.1f} MB, opset {opset}"
                   + (", int8" if quantize else "") + (f"; fused: {', '.join(sorted(found['fused_ops']))}" if found["fused_ops"] else ""))
        click.echo(f"  parity with PyTorch on {parity['rows']} texts: max |logit diff| {parity['max_abs_diff']:.2e}, "
                   f"argmax agreement {parity['argmax_agreement']:.4f}")
        click.echo(f"  try: kamal predict {student_name} --onnx \"some text\"")


COMMANDS = [export]
