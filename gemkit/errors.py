"""Errors a user can cause; each message says what was wrong and what to do."""

from __future__ import annotations


class GemkitError(Exception):
    """Base class of every error gemkit raises on purpose."""


class UnknownEnvError(GemkitError, KeyError):
    """An env id that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown env id"


class InvalidEnvIdError(GemkitError, ValueError):
    """An env id that does not follow `family:Name-vN[-level]`."""


class RegistrationError(GemkitError):
    """A registration that clashes with an existing one or cannot be loaded."""


class VectorEnvError(GemkitError):
    """A vector env used in a way it does not support."""
