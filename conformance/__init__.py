"""The backend conformance suite: exact op x dtype tables checked against the reference semantics."""
