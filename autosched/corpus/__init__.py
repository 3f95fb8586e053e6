"""Built-in models: the corpus of real architectures (random weights), the zoo, and small test modules."""
