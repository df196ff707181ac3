"""Weight-space merging of teachers that share a pretrained base: the zero-training peer of amalgamation
(`kamal eval --baseline merge:METHOD`)."""
