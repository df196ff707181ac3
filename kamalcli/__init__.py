"""kamal: merge fine-tuned text classifiers into one student (knowledge amalgamation)."""

__version__ = "0.1.0"
