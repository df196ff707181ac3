"""Hugging Face models: the named bases, reading a model folder, loading, tokenising, converting packaged weights."""
