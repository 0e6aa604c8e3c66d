"""Small shared helpers (hashing, serialisation) with no heavy dependencies."""
