"""Converters that turn weights shipped inside Python packages into Hugging Face folders, cached."""
