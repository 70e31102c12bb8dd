"""Process reward model bridge (SPEC §7); not built yet."""

__all__: list[str] = []
