"""Helpers every package may use; they import nothing else of clinjudge."""
