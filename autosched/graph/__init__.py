"""Import a model into Relax and rewrite its graph into fusion groups and tasks (``passes.GRAPH_PASSES``)."""
