"""Files kamal writes from: workspace config, model card, workspace .gitignore."""
