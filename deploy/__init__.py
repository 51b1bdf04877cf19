"""Tooling run from the repository, never shipped in the image: the launcher, the soak, the attacks."""
