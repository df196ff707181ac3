"""kamal: merge fine-tuned text classifiers into one student (knowledge amalgamation)."""

__version__ = "0.2.0"
