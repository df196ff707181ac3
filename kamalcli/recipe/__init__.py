"""The default student's recipe: what kamal decides where a method's options say auto (recipe.py), from the
evidence the workspace holds (evidence.py)."""
