"""Teachers: register a fine-tuned classifier folder, or train one."""
