"""The IR: UOps, pattern rewriting, semantics, linearization and the linear-program spec."""
