"""What a student says about itself: whether a text is in its scope (scope.py) and which labels may be the
true one with a guaranteed probability (conformal.py). numpy only, so the torch-free runtime of an export
answers as `kamal predict` does."""
